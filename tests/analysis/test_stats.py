"""The agreement statistics against published tables and reference implementations."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from clinjudge.analysis import _stats
from clinjudge.analysis._stats import (
    ICC_FORMS,
    added_rater_bootstrap,
    bootstrap_indices,
    cohen_kappa,
    fleiss_kappa,
    gwet_ac2,
    gwet_weights,
    icc_forms,
    icc_values_batch,
    krippendorff_alpha,
    krippendorff_alpha_boot,
    krippendorff_alpha_ci,
    percent_agreement,
    substitution_bootstrap,
    wilcoxon_paired,
)
from tests.requirements import optional_module, require_module

pingouin = optional_module("pingouin")
krippendorff = optional_module("krippendorff")

# pingouin 0.7 calls a pandas API that pandas 3 deprecates; not our concern here.
pytestmark = pytest.mark.filterwarnings("ignore:The inplace keyword:Warning")

NAN = np.nan

# Shrout & Fleiss (1979), Table 2: 6 targets rated by 4 judges.
SHROUT_FLEISS = np.array(
    [[9, 2, 5, 8], [6, 1, 3, 2], [8, 4, 6, 8], [7, 1, 2, 6], [10, 5, 6, 9], [6, 2, 4, 7]],
    dtype=float,
)
SHROUT_FLEISS_PUBLISHED = {
    "ICC1": 0.17,
    "ICC2": 0.29,
    "ICC3": 0.71,
    "ICC1k": 0.44,
    "ICC2k": 0.62,
    "ICC3k": 0.91,
}

# Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 observers x 12 units.
RELIABILITY_DATA = np.array(
    [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
        [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
    ]
)

PINGOUIN_NAMES = {
    "ICC(1,1)": "ICC1",
    "ICC(A,1)": "ICC2",
    "ICC(C,1)": "ICC3",
    "ICC(1,k)": "ICC1k",
    "ICC(A,k)": "ICC2k",
    "ICC(C,k)": "ICC3k",
}


def _pingouin_icc(matrix: np.ndarray) -> dict[str, tuple[float, list[float]]]:
    n, k = matrix.shape
    frame = pd.DataFrame(
        {
            "unit": np.repeat(np.arange(n), k),
            "rater": np.tile(np.arange(k), n),
            "score": matrix.ravel(),
        }
    )
    table = pingouin.intraclass_corr(frame, targets="unit", raters="rater", ratings="score")
    return {
        PINGOUIN_NAMES[row.Type]: (float(row.ICC), [float(v) for v in row.CI95])
        for row in table.itertuples()
    }


def _ratings(rng: np.random.Generator, n: int, k: int, spread: float = 0.8) -> np.ndarray:
    truth = rng.normal(3, 1, size=(n, 1))
    bias = rng.normal(0, 0.4, size=(1, k))
    return np.clip(np.rint(truth + bias + rng.normal(0, spread, size=(n, k))), 1, 5)


@pytest.fixture(autouse=True)
def _unrounded_pingouin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(pingouin.options, "round.column.CI95", None)


# ---------------------------------------------------------------------------------------------
# ICC


def test_icc_matches_shrout_fleiss_published_table() -> None:
    result = icc_forms(SHROUT_FLEISS)
    assert list(result) == list(ICC_FORMS)
    for form, published in SHROUT_FLEISS_PUBLISHED.items():
        assert round(result[form]["value"], 2) == published, form


@pytest.mark.parametrize(("n", "k", "seed"), [(6, 4, None), (30, 3, 1), (40, 7, 2), (12, 2, 3)])
def test_icc_forms_match_pingouin(n: int, k: int, seed: int | None) -> None:
    matrix = SHROUT_FLEISS if seed is None else _ratings(np.random.default_rng(seed), n, k)
    ours = icc_forms(matrix)
    reference = _pingouin_icc(matrix)
    for form in ICC_FORMS:
        value, ci = reference[form]
        assert ours[form]["value"] == pytest.approx(value, abs=1e-10), form
        assert ours[form]["ci95"] == pytest.approx(ci, abs=1e-8), form
        lo, hi = ours[form]["ci95"]
        assert lo <= ours[form]["value"] <= hi


def test_icc_batch_matches_single_matrices() -> None:
    rng = np.random.default_rng(5)
    stack = np.stack([_ratings(rng, 25, 5) for _ in range(8)])
    for form in ICC_FORMS:
        batch = icc_values_batch(stack, form)
        assert batch.shape == (8,)
        expected = [icc_forms(m)[form]["value"] for m in stack]
        assert batch == pytest.approx(expected, abs=1e-12)


def test_icc_rejects_missing_values_and_bad_shapes() -> None:
    with pytest.raises(ValueError, match="complete units"):
        icc_forms(np.array([[1.0, 2.0], [NAN, 3.0], [2.0, 2.0]]))
    with pytest.raises(ValueError, match="at least 2 units and 2 raters"):
        icc_forms(np.array([[1.0, 2.0, 3.0]]))
    with pytest.raises(ValueError, match="unknown form"):
        icc_values_batch(np.ones((2, 3, 3)), "ICC4")


def test_icc_of_constant_data_is_nan_not_an_error() -> None:
    result = icc_forms(np.full((5, 3), 4.0))
    assert all(math.isnan(v["value"]) for v in result.values())


# ---------------------------------------------------------------------------------------------
# Krippendorff's alpha


def test_alpha_matches_krippendorff_2011_example() -> None:
    assert krippendorff_alpha(RELIABILITY_DATA, "nominal") == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha(RELIABILITY_DATA, "ordinal") == pytest.approx(0.815, abs=5e-4)
    assert krippendorff_alpha(RELIABILITY_DATA, "interval") == pytest.approx(0.849, abs=5e-4)
    assert krippendorff_alpha(RELIABILITY_DATA, "ratio") == pytest.approx(0.797, abs=5e-4)


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval", "ratio"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alpha_matches_krippendorff_package_with_missing_data(level: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    data = _ratings(rng, 30, 5).T  # raters x units
    data[rng.random(data.shape) < 0.25] = NAN
    if level == "ordinal":
        data[data == 3] = 4  # a gap in the observed values must not matter
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement=level)
    assert krippendorff_alpha(data, level) == pytest.approx(expected, abs=1e-10)


def test_alpha_bootstrap_resamples_match_package_on_resampled_units() -> None:
    data = RELIABILITY_DATA
    pairable = (~np.isnan(data)).sum(axis=0) >= 2
    units = data[:, pairable]
    boot = krippendorff_alpha_boot(data, "ordinal", n_boot=6, seed=3)
    for draw, value in zip(bootstrap_indices(units.shape[1], 6, 3), boot, strict=True):
        resample = units[:, draw]
        if np.unique(resample[~np.isnan(resample)]).size < 2:
            assert math.isnan(value)
            continue
        expected = krippendorff.alpha(reliability_data=resample, level_of_measurement="ordinal")
        assert value == pytest.approx(expected, abs=1e-10)


def test_alpha_ci_is_deterministic_and_brackets_the_estimate() -> None:
    rng = np.random.default_rng(9)
    data = _ratings(rng, 60, 4).T
    ci = krippendorff_alpha_ci(data, "interval", n_boot=500, seed=4)
    assert ci == krippendorff_alpha_ci(data, "interval", n_boot=500, seed=4)
    assert ci[0] < krippendorff_alpha(data, "interval") < ci[1]
    assert ci != krippendorff_alpha_ci(data, "interval", n_boot=500, seed=5)


def test_alpha_undefined_with_a_single_value() -> None:
    assert math.isnan(krippendorff_alpha(np.full((3, 4), 2.0), "nominal"))
    assert all(math.isnan(v) for v in krippendorff_alpha_ci(np.full((3, 4), 2.0), "nominal"))


# ---------------------------------------------------------------------------------------------
# Gwet's AC2, written out loop by loop from Gwet (2008, 2014) as an independent reference


def _reference_weights(categories: list[float], kind: str) -> list[list[float]]:
    q = len(categories)
    weights = [[0.0] * q for _ in range(q)]
    for a in range(q):
        for b in range(q):
            if kind == "identity":
                weights[a][b] = 1.0 if a == b else 0.0
            elif kind == "quadratic":
                span = max(categories) - min(categories)
                weights[a][b] = 1 - ((categories[a] - categories[b]) / span) ** 2
            elif kind == "ordinal":
                size = abs(a - b) + 1
                largest = q * (q - 1) / 2
                weights[a][b] = 1 - (size * (size - 1) / 2) / largest
    return weights


def _reference_ac2(data: np.ndarray, categories: list[float], kind: str) -> tuple[float, float]:
    w = _reference_weights(categories, kind)
    q = len(categories)
    units = []
    for row in data:
        counts = [sum(1 for v in row if not math.isnan(v) and v == c) for c in categories]
        if sum(counts) >= 1:
            units.append(counts)
    n = len(units)
    n2 = sum(1 for r in units if sum(r) >= 2)
    pa_unit = []
    for r in units:
        total = sum(r)
        if total < 2:
            pa_unit.append(0.0)
            continue
        agree = 0.0
        for a in range(q):
            weighted = sum(w[a][b] * r[b] for b in range(q))
            agree += r[a] * (weighted - 1)
        pa_unit.append(agree / (total * (total - 1)))
    pa = sum(pa_unit) / n2
    pi = [sum(r[a] / sum(r) for r in units) / n for a in range(q)]
    tw = sum(sum(row) for row in w)
    pe = tw / (q * (q - 1)) * sum(p * (1 - p) for p in pi)
    ac2 = (pa - pe) / (1 - pe)
    contributions = []
    for r, pa_i in zip(units, pa_unit, strict=True):
        total = sum(r)
        ac_i = (n / n2) * (pa_i - (pe if total >= 2 else 0.0)) / (1 - pe)
        pe_i = tw / (q * (q - 1)) * sum(r[a] * (1 - pi[a]) for a in range(q)) / total
        contributions.append(ac_i - 2 * (1 - ac2) * (pe_i - pe) / (1 - pe))
    variance = sum((c - ac2) ** 2 for c in contributions) / (n * (n - 1))
    return ac2, math.sqrt(variance)


@pytest.mark.parametrize("kind", ["ordinal", "quadratic", "identity"])
@pytest.mark.parametrize("seed", [0, 1])
def test_gwet_ac2_matches_direct_implementation(kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    data = _ratings(rng, 35, 6)
    data[rng.random(data.shape) < 0.2] = NAN
    data[0] = NAN  # a unit nobody rated
    data[1, 1:] = NAN  # a unit with a single rating
    categories = [1.0, 2.0, 3.0, 4.0, 5.0]
    result = gwet_ac2(data, categories, kind)
    value, se = _reference_ac2(data, categories, kind)
    assert result["value"] == pytest.approx(value, abs=1e-12)
    assert result["se"] == pytest.approx(se, abs=1e-12)
    t = sps.t.ppf(0.975, 34 - 1)  # 34 units with at least one rating
    assert result["ci95"] == pytest.approx([value - t * se, min(1.0, value + t * se)])


def test_gwet_ac1_matches_published_example() -> None:
    # Gwet's irrCAC documentation, dataset cac.raw4raters (the same 12 units x 4 raters as
    # Krippendorff's example): AC1 = 0.77544, se = 0.14295, 95% CI (0.461, 1).
    result = gwet_ac2(RELIABILITY_DATA.T, [1, 2, 3, 4, 5], "identity")
    assert result["value"] == pytest.approx(0.77544, abs=5e-6)
    assert result["se"] == pytest.approx(0.14295, abs=5e-6)
    assert result["ci95"][0] == pytest.approx(0.461, abs=5e-4)
    assert result["ci95"][1] == 1.0


def test_gwet_weights() -> None:
    ordinal = gwet_weights([1, 2, 3, 4, 5], "ordinal")
    assert ordinal[0].tolist() == pytest.approx([1.0, 0.9, 0.7, 0.4, 0.0])
    quadratic = gwet_weights([1, 2, 3, 4, 5], "quadratic")
    assert quadratic[0].tolist() == pytest.approx([1.0, 0.9375, 0.75, 0.4375, 0.0])
    assert np.allclose(ordinal, ordinal.T)


def test_gwet_declared_categories_matter_and_strays_are_rejected() -> None:
    data = np.array([[2, 2, 3], [3, 3, 3], [2, 3, 3], [4, 4, 4.0]])
    narrow = gwet_ac2(data, [2, 3, 4], "quadratic")["value"]
    wide = gwet_ac2(data, [1, 2, 3, 4, 5], "quadratic")["value"]
    assert narrow != pytest.approx(wide)
    with pytest.raises(ValueError, match="not in the category set"):
        gwet_ac2(data, [1, 2, 3], "ordinal")


# ---------------------------------------------------------------------------------------------
# Kappas and percent agreement


def test_cohen_kappa_hand_example() -> None:
    # 50 units: both yes 20, A yes B no 5, A no B yes 10, both no 15.
    # p_o = 0.7; p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5; kappa = 0.2 / 0.5 = 0.4.
    a = [1] * 20 + [1] * 5 + [0] * 10 + [0] * 15
    b = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa(a + [NAN], b + [1]) == pytest.approx(0.4)
    assert percent_agreement(np.column_stack([a, b]).astype(float)) == pytest.approx(0.7)
    assert math.isnan(cohen_kappa([1, 1, 1], [1, 1, 1]))


def test_fleiss_kappa_published_example() -> None:
    # 10 subjects, 14 raters, 5 categories (the worked example in Fleiss' kappa references):
    # P-bar = 0.378, P-bar_e = 0.213, kappa = 0.210.
    table = np.array(
        [
            [0, 0, 0, 0, 14],
            [0, 2, 6, 4, 2],
            [0, 0, 3, 5, 6],
            [0, 3, 9, 2, 0],
            [2, 2, 8, 1, 1],
            [7, 7, 0, 0, 0],
            [3, 2, 6, 3, 0],
            [2, 5, 3, 2, 2],
            [6, 5, 2, 1, 0],
            [0, 2, 2, 3, 7],
        ]
    )
    data = np.array([np.repeat(np.arange(1, 6), row) for row in table], dtype=float)
    assert fleiss_kappa(data) == pytest.approx(0.210, abs=5e-4)
    assert percent_agreement(data) == pytest.approx(0.378, abs=5e-4)
    inter_rater = require_module("statsmodels.stats.inter_rater")
    assert fleiss_kappa(data) == pytest.approx(inter_rater.fleiss_kappa(table), abs=1e-12)


def test_fleiss_kappa_hand_computed_small_case() -> None:
    # 3 units, 3 raters: counts (3,0), (2,1), (0,3).
    # P_i = 1, 1/3, 1 -> P-bar = 7/9; p = (5/9, 4/9) -> P_e = 41/81; kappa = (7/9-41/81)/(40/81)
    data = np.array([[0, 0, 0], [0, 0, 1], [1, 1, 1]], dtype=float)
    assert fleiss_kappa(data) == pytest.approx((63 / 81 - 41 / 81) / (40 / 81))
    batch = _stats._fleiss_kappa_batch(data[None])
    assert batch[0] == pytest.approx(fleiss_kappa(data))


# ---------------------------------------------------------------------------------------------
# Wilcoxon


@pytest.mark.parametrize("zero_method", ["wilcox", "pratt"])
def test_wilcoxon_matches_scipy(zero_method: str) -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(1, 6, 40).astype(float)
    y = np.clip(x + rng.integers(-1, 3, 40), 1, 5)
    result = wilcoxon_paired(x, y, zero_method=zero_method)
    expected = sps.wilcoxon(x, y, zero_method=zero_method)
    assert result["statistic"] == pytest.approx(float(expected.statistic))
    assert result["p"] == pytest.approx(float(expected.pvalue))
    assert result["zero_method"] == zero_method
    assert result["n_pairs"] == 40
    assert result["n_zero_differences"] == int((x == y).sum())


def test_wilcoxon_small_samples_with_ties_match_scipy_permutation() -> None:
    # scipy's default runs an exact sign-flip permutation test for n <= 13 with ties or zeros;
    # ours enumerates the same 2^m patterns directly.
    rng = np.random.default_rng(8)
    for n in (4, 7, 10, 13):
        x = rng.integers(1, 6, n).astype(float)
        y = x + rng.choice([-2.0, -1.0, 0.0, 1.0, 1.0, 2.0], n)
        y[0] = x[0] + 1  # at least one non-zero difference
        for zero_method in ("wilcox", "pratt"):
            result = wilcoxon_paired(x, y, zero_method=zero_method)
            expected = sps.wilcoxon(x, y, zero_method=zero_method)
            assert result["method"] in {"permutation", "exact"}
            assert result["p"] == pytest.approx(float(expected.pvalue), abs=1e-12)
            assert result["statistic"] == pytest.approx(float(expected.statistic))


def test_wilcoxon_drops_missing_pairs_and_handles_all_zero() -> None:
    x = np.array([1.0, 2.0, NAN, 4.0, 5.0, 3.0, 2.0])
    y = np.array([2.0, 4.0, 1.0, 1.0, 2.0, 1.0, NAN])
    result = wilcoxon_paired(x, y)
    assert result["n_pairs"] == 5
    assert result["p"] == pytest.approx(
        float(sps.wilcoxon(x[[0, 1, 3, 4, 5]], y[[0, 1, 3, 4, 5]]).pvalue)
    )
    same = wilcoxon_paired([1, 2, 3], [1, 2, 3])
    assert same["p"] == 1.0 and same["statistic"] == 0.0
    with pytest.raises(ValueError, match="zero_method"):
        wilcoxon_paired([1], [2], zero_method="bogus")


# ---------------------------------------------------------------------------------------------
# Substitution and added-rater bootstraps


def _study(seed: int = 0, n: int = 40, k: int = 7) -> tuple[np.ndarray, np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    humans = _ratings(rng, n, k)
    judge = np.clip(np.rint(np.median(humans, axis=1) + rng.normal(0.3, 0.6, n)), 1, 5)
    return humans, judge, [f"h{i}" for i in range(k)]


def test_substitution_is_deterministic_and_p_in_range() -> None:
    humans, judge, ids = _study()
    first = substitution_bootstrap(humans, judge, ids, n_boot=300, seed=11)
    assert first == substitution_bootstrap(humans, judge, ids, n_boot=300, seed=11)
    assert first != substitution_bootstrap(humans, judge, ids, n_boot=300, seed=12)
    assert [row["rater"] for row in first] == ids
    for row in first:
        assert 0.0 < row["p"] <= 1.0
        assert row["ci95"][0] <= row["ci95"][1]
        assert row["delta_icc"] == pytest.approx(row["icc_with_judge"] - row["icc_base"])


def test_substitution_of_a_copy_changes_nothing() -> None:
    humans, _, ids = _study(seed=3)
    humans = humans + np.random.default_rng(0).normal(0, 0.01, humans.shape)  # not integers
    judge = humans[:, 2].copy()
    row = substitution_bootstrap(humans, judge, ids, n_boot=200, seed=0)[2]
    assert row["delta_icc"] == pytest.approx(0.0, abs=1e-12)
    assert row["ci95"] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert row["p"] == 1.0


@pytest.mark.parametrize("form", ICC_FORMS)
def test_substitution_sufficient_statistics_match_explicit_matrices(form: str) -> None:
    humans, judge, ids = _study(seed=4, n=25, k=4)
    fast = substitution_bootstrap(humans, judge, ids, n_boot=100, seed=2, form=form)
    slow = _stats._substitution_by_copy(humans, judge, ids, bootstrap_indices(25, 100, 2), form)
    for a, b in zip(fast, slow, strict=True):
        assert a["delta_icc"] == pytest.approx(b["delta_icc"], abs=1e-12)
        assert a["ci95"] == pytest.approx(b["ci95"], abs=1e-10)
        assert a["p"] == pytest.approx(b["p"])


def test_substitution_resamples_match_pingouin() -> None:
    humans, judge, ids = _study(seed=6, n=20, k=3)
    draws = bootstrap_indices(20, 4, 7)
    result = substitution_bootstrap(humans, judge, ids, n_boot=4, seed=7)
    swapped = humans.copy()
    swapped[:, 1] = judge
    deltas = [
        _pingouin_icc(swapped[d])["ICC3k"][0] - _pingouin_icc(humans[d])["ICC3k"][0] for d in draws
    ]
    assert result[1]["ci95"] == pytest.approx(list(np.percentile(deltas, [2.5, 97.5])))
    assert result[1]["icc_base"] == pytest.approx(_pingouin_icc(humans)["ICC3k"][0])


def test_added_rater_bootstrap() -> None:
    humans, judge, _ = _study(seed=8)
    result = added_rater_bootstrap(humans, judge, n_boot=300, seed=1)
    both = np.column_stack([humans, judge])
    assert result["icc_base"] == pytest.approx(icc_forms(humans)["ICC3k"]["value"])
    assert result["icc_with_judge"] == pytest.approx(icc_forms(both)["ICC3k"]["value"])
    assert 0.0 < result["p"] <= 1.0
    draws = both[bootstrap_indices(40, 300, 1)]
    boot = icc_values_batch(draws, "ICC3k") - icc_values_batch(draws[:, :, :-1], "ICC3k")
    assert result["ci95"] == pytest.approx(list(np.percentile(boot, [2.5, 97.5])))
    assert result == added_rater_bootstrap(humans, judge, n_boot=300, seed=1)


def test_bootstraps_with_fleiss_kappa_and_bad_inputs() -> None:
    rng = np.random.default_rng(1)
    humans = (rng.random((30, 4)) < 0.6).astype(float)
    judge = (humans.mean(axis=1) >= 0.5).astype(float)
    rows = substitution_bootstrap(humans, judge, list("abcd"), n_boot=100, form="fleiss_kappa")
    assert rows[0]["icc_base"] == pytest.approx(fleiss_kappa(humans))
    assert all(0 < row["p"] <= 1 for row in rows)
    added = added_rater_bootstrap(humans, judge, n_boot=100, form="fleiss_kappa")
    assert 0 < added["p"] <= 1
    with pytest.raises(ValueError, match="rater ids"):
        substitution_bootstrap(humans, judge, ["a"], n_boot=10)
    with pytest.raises(ValueError, match="one score per unit"):
        substitution_bootstrap(humans, judge[:5], list("abcd"), n_boot=10)
    with pytest.raises(ValueError, match="unknown form"):
        added_rater_bootstrap(humans, judge, n_boot=10, form="ICC9")


# ---------------------------------------------------------------------------------------------
# Streamed bootstrap


@pytest.mark.parametrize(
    ("n", "n_boot", "chunk"), [(7, 50, 3), (100, 1000, None), (31, 64, 64), (40_000, 40, 32)]
)
def test_chunked_weights_are_the_resamples_of_bootstrap_indices(
    n: int, n_boot: int, chunk: int | None
) -> None:
    expected = np.zeros((n_boot, n))
    for b, draw in enumerate(bootstrap_indices(n, n_boot, 5)):
        np.add.at(expected[b], draw, 1.0)  # written out unit by unit
    got = np.zeros((n_boot, n))
    for rows, weights in _stats.bootstrap_chunks(n, n_boot, 5, chunk_rows=chunk):
        got[rows] = weights
    np.testing.assert_array_equal(got, expected)


def test_bootstrap_totals_do_not_depend_on_the_chunk_size() -> None:
    rng = np.random.default_rng(2)
    mats = [rng.normal(size=(40, 3)), rng.normal(size=(40, 2)), rng.normal(size=(15, 4))]
    whole = _stats.bootstrap_totals(mats, 200, 9, chunk_rows=200)
    for chunk in (1, 7, 64):
        for a, b in zip(
            _stats.bootstrap_totals(mats, 200, 9, chunk_rows=chunk), whole, strict=True
        ):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    # each matrix is resampled with the draws of its own unit count
    draws = bootstrap_indices(15, 200, 9)
    np.testing.assert_allclose(whole[2], mats[2][draws].sum(axis=1), rtol=1e-12)


def test_fleiss_bootstraps_match_explicitly_resampled_matrices() -> None:
    rng = np.random.default_rng(4)
    humans = rng.integers(0, 3, size=(35, 4)).astype(float)
    judge = rng.integers(0, 3, size=35).astype(float)
    ids = list("abcd")
    fast = substitution_bootstrap(humans, judge, ids, n_boot=150, seed=3, form="fleiss_kappa")
    slow = _stats._substitution_by_copy(
        humans, judge, ids, bootstrap_indices(35, 150, 3), "fleiss_kappa"
    )
    for a, b in zip(fast, slow, strict=True):
        assert a["delta_icc"] == pytest.approx(b["delta_icc"], abs=1e-12)
        assert a["ci95"] == pytest.approx(b["ci95"], abs=1e-10)
        assert a["p"] == pytest.approx(b["p"])
    both = np.column_stack([humans, judge])[bootstrap_indices(35, 150, 3)]
    boot = np.array([fleiss_kappa(m) - fleiss_kappa(m[:, :-1]) for m in both])
    added = added_rater_bootstrap(humans, judge, n_boot=150, seed=3, form="fleiss_kappa")
    assert added["ci95"] == pytest.approx(list(np.percentile(boot, [2.5, 97.5])), abs=1e-10)


def test_bootstraps_of_tiny_samples_do_not_warn() -> None:
    """Units with the same mean score but different patterns: a resample drawing only those has
    no between-unit variance and an ICC of -inf for humans and judge alike. Such resamples are
    left out of the interval without numpy printing RuntimeWarnings at the user."""
    humans = np.array([[4.0, 5.0, 3.0], [5.0, 3.0, 4.0], [3.0, 4.0, 5.0], [2.0, 3.0, 4.0]])
    judge = np.array([4.0, 4.0, 4.0, 3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        swaps = substitution_bootstrap(humans, judge, ["a", "b", "c"], n_boot=200, seed=1)
        added = added_rater_bootstrap(humans, judge, n_boot=200, seed=1)
    assert len(swaps) == 3 and all(np.isfinite(s["delta_icc"]) for s in swaps)
    assert np.isfinite(added["delta_icc"])
