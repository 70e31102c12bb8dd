"""analyse_ratings (per attribute and pooled); ratings files are read by clinjudge.inputs
(tests/inputs/test_ratings.py)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats as sps

from clinjudge.analysis._agreement import RatingRecord
from clinjudge.analysis._agreement import analyse_ratings as _analyse
from clinjudge.analysis._stats import (
    fleiss_kappa,
    gwet_ac2,
    icc_forms,
    krippendorff_alpha,
    percent_agreement,
)
from clinjudge.inputs import HumanRating

HUMANS = [f"h{i}" for i in range(5)]
ATTRIBUTES = ["accurate", "thorough", "useful"]


def analyse_ratings(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``analyse_ratings`` as ``--json`` prints it: the layout these tests pin down (the typed
    result is read by attribute in tests/analysis/test_typed_results.py)."""
    return _analyse(*args, **kwargs).to_dict()


def _study(
    n_items: int = 20,
    *,
    seed: int = 0,
    samples: int = 3,
    binary: str | None = None,
    missing: float = 0.0,
) -> list[RatingRecord]:
    rng = np.random.default_rng(seed)
    records = []
    for attribute in [*ATTRIBUTES, *([binary] if binary else [])]:
        for item in range(n_items):
            truth = rng.normal(3.2, 1.0)
            for offset, rater in enumerate(HUMANS):
                score = float(np.clip(np.rint(truth + 0.1 * offset + rng.normal(0, 0.6)), 1, 5))
                if attribute == binary:
                    score = float(score >= 3)
                value = None if rng.random() < missing else score
                records.append(
                    RatingRecord(
                        unit_id=f"i{item}", rater_id=rater, score=value, attribute=attribute
                    )
                )
            for _ in range(samples):
                score = float(np.clip(np.rint(truth + 0.4 + rng.normal(0, 0.5)), 1, 5))
                if attribute == binary:
                    score = float(score >= 3)
                records.append(
                    RatingRecord(
                        unit_id=f"i{item}", rater_id="judge", score=score, attribute=attribute
                    )
                )
    return records


def _matrix(records: list[RatingRecord], attribute: str) -> tuple[np.ndarray, np.ndarray]:
    units = sorted(
        {r.unit_id for r in records if r.attribute == attribute}, key=lambda u: int(u[1:])
    )
    humans = np.full((len(units), len(HUMANS)), np.nan)
    judge: dict[str, list[float]] = {}
    for r in records:
        if r.attribute != attribute or r.score is None:
            continue
        row = units.index(r.unit_id)
        if r.rater_id == "judge":
            judge.setdefault(r.unit_id, []).append(r.score)
        else:
            humans[row, HUMANS.index(r.rater_id)] = r.score
    return humans, np.array([np.median(judge.get(u, [np.nan])) for u in units])


CATEGORIES = {a: [1, 2, 3, 4, 5] for a in ATTRIBUTES}


def _assert_icc_equal(reported: dict, expected: dict) -> None:
    assert list(reported) == list(expected)
    for form, entry in expected.items():
        assert reported[form]["value"] == pytest.approx(entry["value"], abs=1e-12), form
        assert reported[form]["ci95"] == pytest.approx(entry["ci95"], abs=1e-12), form


@pytest.fixture(scope="module")
def report() -> dict:
    return analyse_ratings(
        _study(binary="stigmatizing"),
        judge="judge",
        categories=CATEGORIES,
        binary_attributes={"stigmatizing"},
        n_boot=200,
        seed=1,
    )


def test_report_is_strict_json_with_the_documented_keys(report: dict) -> None:
    json.dumps(report, allow_nan=False)
    assert set(report) == {"per_attribute", "pooled", "notes"}
    assert list(report["per_attribute"]) == [*ATTRIBUTES, "stigmatizing"]
    block = report["per_attribute"]["accurate"]
    assert set(block["icc"]) == {"ICC1", "ICC2", "ICC3", "ICC1k", "ICC2k", "ICC3k"}
    assert set(block["icc"]["ICC3k"]) == {"value", "ci95"}
    assert set(block["krippendorff_alpha"]) == {"nominal", "ordinal", "interval"}
    assert set(block["gwet_ac2"]) == {"ordinal", "quadratic"}
    assert set(block["gwet_ac2"]["ordinal"]) == {"value", "se", "ci95"}
    assert set(block["wilcoxon"]) >= {"statistic", "p", "zero_method"}
    assert block["wilcoxon"]["zero_method"] == "wilcox"
    assert block["wilcoxon_pratt"]["zero_method"] == "pratt"
    for key in ("median_difference", "iqr", "differences", "primary", "n_units_complete"):
        assert key in block
    assert [row["rater"] for row in block["substitution"]] == HUMANS
    assert set(block["substitution"][0]) >= {"rater", "delta_icc", "p"}
    assert set(block["added_rater"]) >= {"delta_icc", "p"}


def test_per_attribute_values_match_the_statistics(report: dict) -> None:
    records = _study(binary="stigmatizing")
    humans, judge = _matrix(records, "thorough")
    block = report["per_attribute"]["thorough"]
    _assert_icc_equal(block["icc"], icc_forms(humans))
    assert block["krippendorff_alpha"]["ordinal"]["value"] == pytest.approx(
        krippendorff_alpha(humans.T, "ordinal")
    )
    ac2 = gwet_ac2(humans, [1, 2, 3, 4, 5], "quadratic")
    assert block["gwet_ac2"]["quadratic"]["value"] == pytest.approx(ac2["value"])
    assert block["gwet_ac2"]["quadratic"]["se"] == pytest.approx(ac2["se"])
    assert block["gwet_ac2"]["quadratic"]["ci95"] == pytest.approx(ac2["ci95"])
    human_median = np.median(humans, axis=1)
    pair = np.column_stack([human_median, judge])
    assert block["primary"]["form"] == "ICC3k"
    assert block["primary"]["value"] == pytest.approx(icc_forms(pair)["ICC3k"]["value"])
    assert block["primary"]["ci95"] == pytest.approx(icc_forms(pair)["ICC3k"]["ci95"])
    diff = judge - human_median
    assert block["median_difference"] == pytest.approx(float(np.median(diff)))
    q25, q75 = np.percentile(diff, [25, 75])
    assert block["iqr"] == pytest.approx(q75 - q25)
    assert block["wilcoxon"]["p"] == pytest.approx(float(sps.wilcoxon(judge, human_median).pvalue))
    values, counts = np.unique(diff, return_counts=True)
    expected = {
        str(int(v)) if float(v).is_integer() else repr(float(v)): int(c)
        for v, c in zip(values, counts, strict=True)
    }
    assert block["differences"] == expected
    assert sum(block["differences"].values()) == 20
    assert block["judge"] == {"rater": "judge", "n_units": 20, "samples_per_unit": [3, 3]}


def test_pooled_block_uses_unit_attribute_pairs_without_binary(report: dict) -> None:
    pooled = report["pooled"]
    assert pooled["attributes"] == ATTRIBUTES
    assert pooled["n_units"] == 60 and pooled["n_units_complete"] == 60
    records = _study(binary="stigmatizing")
    stacked = [_matrix(records, a) for a in ATTRIBUTES]
    humans = np.vstack([h for h, _ in stacked])
    assert pooled["icc"]["ICC3k"]["value"] == pytest.approx(icc_forms(humans)["ICC3k"]["value"])
    assert sum(pooled["differences"].values()) == 60
    assert any("left out of the pooled block" in note for note in report["notes"])


def test_binary_attribute_reports_agreement_and_kappa(report: dict) -> None:
    block = report["per_attribute"]["stigmatizing"]
    assert "icc" not in block and "gwet_ac2" not in block
    humans, _ = _matrix(_study(binary="stigmatizing"), "stigmatizing")
    assert block["scale"] == "binary"
    assert block["percent_agreement"] == pytest.approx(percent_agreement(humans))
    assert block["kappa"] == {"method": "fleiss", "value": pytest.approx(fleiss_kappa(humans))}
    assert set(block["primary"]) == {"n_units", "percent_agreement", "kappa"}
    assert block["substitution_statistic"] == "fleiss_kappa"
    assert len(block["substitution"]) == len(HUMANS)


def test_two_binary_raters_use_cohen() -> None:
    records = [
        RatingRecord(unit_id=f"u{i}", rater_id=rater, score=float(score), attribute="stig")
        for i, (a, b) in enumerate([(0, 0), (1, 1), (0, 1), (1, 1), (0, 0), (1, 0)])
        for rater, score in (("a", a), ("b", b))
    ]
    block = analyse_ratings(records, binary_attributes={"stig"}, n_boot=50)["per_attribute"]["stig"]
    assert block["kappa"]["method"] == "cohen"
    assert block["percent_agreement"] == pytest.approx(4 / 6)


def test_missing_ratings_icc_on_complete_units_alpha_on_all() -> None:
    records = _study(seed=2, missing=0.08, samples=0)
    out = analyse_ratings(records, categories=CATEGORIES, n_boot=100)
    block = out["per_attribute"]["useful"]
    humans, _ = _matrix(records, "useful")
    complete = ~np.isnan(humans).any(axis=1)
    assert 2 <= block["n_units_complete"] == int(complete.sum()) < block["n_units"]
    _assert_icc_equal(block["icc"], icc_forms(humans[complete]))
    assert block["krippendorff_alpha"]["interval"]["value"] == pytest.approx(
        krippendorff_alpha(humans.T, "interval")
    )
    assert any("complete units only" in note and note.startswith("useful") for note in out["notes"])
    assert "primary" not in block and block["raters"] == HUMANS


def test_without_a_judge_name_the_judge_is_just_another_rater() -> None:
    out = analyse_ratings(_study(n_items=8, seed=6, samples=1), n_boot=50)
    block = out["per_attribute"]["accurate"]
    assert block["raters"] == [*HUMANS, "judge"]
    assert "primary" not in block and "substitution" not in block


def test_deterministic_given_seed() -> None:
    records = _study(n_items=12, seed=4)
    first = analyse_ratings(records, judge="judge", n_boot=100, seed=3)
    assert first == analyse_ratings(records, judge="judge", n_boot=100, seed=3)
    other = analyse_ratings(records, judge="judge", n_boot=100, seed=4)
    assert first["pooled"]["added_rater"]["ci95"] != other["pooled"]["added_rater"]["ci95"]


def test_categories_default_to_observed_and_strays_are_noted() -> None:
    records = _study(n_items=10, seed=5)
    out = analyse_ratings(records, n_boot=50)
    observed = sorted({r.score for r in records if r.attribute == "accurate"})
    assert out["per_attribute"]["accurate"]["categories"] == observed
    narrow = analyse_ratings(records, categories={"accurate": [2, 3]}, n_boot=50)
    assert any("outside the declared categories" in n for n in narrow["notes"])


def test_records_without_attribute_form_one_block() -> None:
    records = [
        RatingRecord(unit_id=f"u{i}", rater_id=r, score=float((i + j) % 5 + 1))
        for i in range(8)
        for j, r in enumerate(["a", "b", "c"])
    ]
    out = analyse_ratings(records, n_boot=50)
    assert out["per_attribute"] == {}
    assert out["pooled"]["n_units"] == 8 and out["pooled"]["icc"] is not None


def test_input_errors() -> None:
    with pytest.raises(ValueError, match="no ratings"):
        analyse_ratings([])
    mixed = [
        RatingRecord(unit_id="u", rater_id="a", score=1, attribute="x"),
        RatingRecord(unit_id="u", rater_id="b", score=1),
    ]
    with pytest.raises(ValueError, match="some ratings have an attribute"):
        analyse_ratings(mixed)
    with pytest.raises(ValueError, match="judge 'gpt' has no ratings"):
        analyse_ratings(_study(n_items=3), judge="gpt")


def test_degenerate_blocks_give_nulls_not_errors() -> None:
    records = [
        RatingRecord(unit_id="u1", rater_id="a", score=3, attribute="x"),
        RatingRecord(unit_id="u1", rater_id="j", score=3, attribute="x"),
        RatingRecord(unit_id="u2", rater_id="a", score=4, attribute="x"),
    ]
    out = analyse_ratings(records, judge="j", n_boot=20)
    json.dumps(out, allow_nan=False)
    block = out["per_attribute"]["x"]
    assert block["icc"] is None
    assert block["substitution"] == [] and block["added_rater"] is None


def test_only_binary_attributes_pool_as_binary() -> None:
    records = [
        RatingRecord(
            unit_id=f"u{i}",
            rater_id=rater,
            score=float((i * (j + 1)) % 3 == 0),
            attribute=attribute,
        )
        for attribute in ("stig", "bias")
        for i in range(10)
        for j, rater in enumerate(["a", "b", "c"])
    ]
    out = analyse_ratings(records, binary_attributes={"stig", "bias"}, n_boot=50)
    assert out["pooled"]["scale"] == "binary"
    assert out["pooled"]["attributes"] == ["stig", "bias"]
    assert out["pooled"]["n_units"] == 20
    assert not any("left out" in note or "complete units only" in note for note in out["notes"])


def test_arrow_table_input_gives_the_same_report() -> None:
    import pyarrow as pa

    rng = np.random.default_rng(3)
    records = [
        RatingRecord(
            unit_id=f"u{u}",
            rater_id=rater,
            attribute=attribute,
            score=None if rng.random() < 0.1 else float(rng.integers(1, 6)),
        )
        for attribute in ("b", "a")
        for u in rng.permutation(25)
        for rater in ("r2", "r1", "r3", "judge", "judge")
    ]
    table = pa.table(
        {
            "unit_id": [r.unit_id for r in records],
            "rater_id": [r.rater_id for r in records],
            "attribute": [r.attribute for r in records],
            "score": [r.score for r in records],
        }
    )
    from_records = analyse_ratings(records, judge="judge", n_boot=60, seed=2)
    assert analyse_ratings(table, judge="judge", n_boot=60, seed=2) == from_records
    assert list(from_records["per_attribute"]) == ["b", "a"]  # order of first appearance
    assert from_records["per_attribute"]["a"]["raters"] == ["r2", "r1", "r3"]


def test_item_id_tables_and_file_ratings_give_the_same_report() -> None:
    # Files and the store name the unit item_id: analyse_ratings takes that vocabulary too.
    records = [r for r in _study(n_items=12) if r.attribute == "accurate"]
    table = pa.table(
        {
            "item_id": [r.unit_id for r in records],
            "rater_id": [r.rater_id for r in records],
            "attribute": [r.attribute for r in records],
            "score": [r.score for r in records],
        }
    )
    from_file = [HumanRating(r.unit_id, r.rater_id, r.attribute, r.score) for r in records]
    expected = analyse_ratings(records, judge="judge", n_boot=40, seed=1)
    assert analyse_ratings(table, judge="judge", n_boot=40, seed=1) == expected
    assert analyse_ratings(from_file, judge="judge", n_boot=40, seed=1) == expected
