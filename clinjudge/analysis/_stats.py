"""Agreement statistics in plain numpy/scipy, vectorised so that bootstraps are cheap.

Conventions:

* ICC functions take a complete ``units x raters`` matrix; batch functions take ``(B, n, k)``.
* Krippendorff's alpha takes ``raters x units`` (the layout of Krippendorff's papers) with NaN for
  a missing value; Gwet's AC2 and the kappas take ``units x raters`` with NaN for missing.
* Undefined statistics (a zero denominator, too few units) are NaN; callers turn them into
  ``None`` for JSON.
* Bootstraps resample units with replacement. Every bootstrapped statistic here is a function
  of per-unit sums, so a resample's statistic needs only ``weights @ per_unit`` (how often each
  unit was drawn, times the per-unit quantities). The weights are streamed in fixed-size chunks
  of resamples (:func:`bootstrap_chunks`), so memory is O(units + chunk x units), and the jobs
  of one analysis block share one pass (:func:`run_bootstrap`).

Formulas: Shrout & Fleiss (1979) and McGraw & Wong (1996) for the ICCs and their F-based
confidence intervals; Krippendorff (2011, "Computing Krippendorff's alpha-reliability") for alpha
through the coincidence matrix; Gwet (2008, 2014 "Handbook of Inter-Rater Reliability") for AC2
and its variance; Cohen (1960) and Fleiss (1971) for the kappas.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike
from threadpoolctl import ThreadpoolController

ICC_FORMS = ("ICC1", "ICC2", "ICC3", "ICC1k", "ICC2k", "ICC3k")
ALPHA_LEVELS = ("nominal", "ordinal", "interval", "ratio")
GWET_WEIGHTS = ("identity", "ordinal", "linear", "quadratic")
BATCH_FORMS = (*ICC_FORMS, "fleiss_kappa")
ZERO_METHODS = ("wilcox", "pratt", "zsplit")


# ---------------------------------------------------------------------------------------------
# ICC


def _mean_squares(x: np.ndarray) -> dict[str, np.ndarray]:
    """Two-way ANOVA mean squares of ``(..., n, k)`` complete matrices (last two axes)."""
    n, k = x.shape[-2], x.shape[-1]
    grand = x.mean(axis=(-2, -1), keepdims=True)
    rows = x.mean(axis=-1, keepdims=True)
    cols = x.mean(axis=-2, keepdims=True)
    ss_rows = k * ((rows - grand) ** 2).sum(axis=(-2, -1))
    ss_cols = n * ((cols - grand) ** 2).sum(axis=(-2, -1))
    ss_total = ((x - grand) ** 2).sum(axis=(-2, -1))
    ss_error = np.maximum(ss_total - ss_rows - ss_cols, 0.0)
    return {
        "msr": ss_rows / (n - 1),  # between units
        "msc": ss_cols / (k - 1),  # between raters
        "mse": ss_error / ((n - 1) * (k - 1)),  # residual
        "msw": (ss_cols + ss_error) / (n * (k - 1)),  # within units (one-way)
    }


# Mean squares of one matrix (scalars) or of a batch (arrays): the ICC has the same type.
_MS = TypeVar("_MS", np.ndarray, np.float64)


def _icc_from_ms(ms: Mapping[str, _MS], n: int, k: int, form: str) -> _MS:
    msr, msc, mse, msw = ms["msr"], ms["msc"], ms["mse"], ms["msw"]
    if form == "ICC1":
        return (msr - msw) / (msr + (k - 1) * msw)
    if form == "ICC2":
        return (msr - mse) / (msr + (k - 1) * mse + k * (msc - mse) / n)
    if form == "ICC3":
        return (msr - mse) / (msr + (k - 1) * mse)
    if form == "ICC1k":
        return (msr - msw) / msr
    if form == "ICC2k":
        return (msr - mse) / (msr + (msc - mse) / n)
    if form == "ICC3k":
        return (msr - mse) / msr
    raise ValueError(f"unknown ICC form {form!r}; expected one of {', '.join(ICC_FORMS)}")


def _check_matrix(matrix: np.ndarray, what: str = "matrix") -> np.ndarray:
    x = np.asarray(matrix, dtype=float)
    if x.ndim < 2:
        raise ValueError(f"{what} must be at least 2-D (units x raters)")
    if x.shape[-2] < 2 or x.shape[-1] < 2:
        raise ValueError(f"{what} needs at least 2 units and 2 raters, got shape {x.shape}")
    if np.isnan(x).any():
        raise ValueError(f"{what} has missing values; ICCs use complete units only")
    return x


def icc_values_batch(matrices: np.ndarray, form: str) -> np.ndarray:
    """One ICC form (or ``"fleiss_kappa"``) for each of B complete matrices.

    Args:
        matrices: Array of shape ``(B, n, k)``: B matrices of n units by k raters.
        form: One of ``ICC1, ICC2, ICC3, ICC1k, ICC2k, ICC3k`` or ``fleiss_kappa``.

    Returns:
        Array of shape ``(B,)``; NaN where the statistic is undefined.
    """
    x = _check_matrix(matrices, "matrices")
    if x.ndim != 3:
        raise ValueError(f"matrices must have shape (B, n, k), got {x.shape}")
    _check_form(form)
    if form == "fleiss_kappa":
        return _fleiss_kappa_batch(x)
    n, k = x.shape[1], x.shape[2]
    with np.errstate(divide="ignore", invalid="ignore"):
        return _icc_from_ms(_mean_squares(x), n, k, form)


def icc_forms(matrix: np.ndarray) -> dict[str, dict[str, Any]]:
    """The six Shrout & Fleiss ICCs of a complete ``units x raters`` matrix, with 95% CIs.

    ``ICC1``/``ICC1k``: one-way random; ``ICC2``/``ICC2k``: two-way random, absolute agreement;
    ``ICC3``/``ICC3k``: two-way mixed, consistency. The ``k`` forms are for the mean of the k
    raters. CIs follow Shrout & Fleiss (1979) from the F distribution; ICC2's uses
    Satterthwaite's approximate degrees of freedom.

    Returns:
        ``{form: {"value": float, "ci95": [lo, hi]}}`` for the six forms (NaN where undefined).
    """
    # scipy.special's F quantile is what scipy.stats.f.ppf calls; scipy.stats itself costs every
    # command that imports this module 0.5-1 s (#39: `judge run`, `ratings import`).
    from scipy import special

    x = _check_matrix(matrix)
    if x.ndim != 2:
        raise ValueError(f"matrix must be 2-D (units x raters), got shape {x.shape}")
    n, k = x.shape
    ms = {key: np.float64(value) for key, value in _mean_squares(x).items()}
    msr, msc, mse, msw = ms["msr"], ms["msc"], ms["mse"], ms["msw"]
    q = 0.975
    out: dict[str, dict[str, Any]] = {}
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        values = {form: float(_icc_from_ms(ms, n, k, form)) for form in ICC_FORMS}
        df_n = n - 1
        # One-way (ICC1) and two-way consistency (ICC3): exact F-based limits.
        for single, average, f_obs, df_d in (
            ("ICC1", "ICC1k", np.divide(msr, msw), n * (k - 1)),
            ("ICC3", "ICC3k", np.divide(msr, mse), (n - 1) * (k - 1)),
        ):
            f_lo = f_obs / special.fdtri(df_n, df_d, q)  # F(df_n, df_d).ppf(q)
            f_hi = f_obs * special.fdtri(df_d, df_n, q)
            out[single] = {
                "value": values[single],
                "ci95": [float((f_lo - 1) / (f_lo + k - 1)), float((f_hi - 1) / (f_hi + k - 1))],
            }
            out[average] = {
                "value": values[average],
                "ci95": [float(1 - 1 / f_lo), float(1 - 1 / f_hi)],
            }
        # Two-way random, absolute agreement (ICC2): Satterthwaite df for the denominator.
        rho = values["ICC2"]
        f_j = np.divide(msc, mse)
        a = n * (1 + (k - 1) * rho) - k * rho
        v_num = (k - 1) * (n - 1) * (k * rho * f_j + a) ** 2
        v_den = (n - 1) * k**2 * rho**2 * f_j**2 + a**2
        v = np.divide(v_num, v_den)
        f_u = special.fdtri(n - 1, v, q)
        f_l = special.fdtri(v, n - 1, q)
        c = k * msc + (k * n - k - n) * mse
        lo2 = float(n * (msr - f_u * mse) / (f_u * c + n * msr))
        hi2 = float(n * (f_l * msr - mse) / (c + n * f_l * msr))
        out["ICC2"] = {"value": rho, "ci95": [lo2, hi2]}
        out["ICC2k"] = {
            "value": values["ICC2k"],
            "ci95": [float(lo2 * k / (1 + lo2 * (k - 1))), float(hi2 * k / (1 + hi2 * (k - 1)))],
        }
    return {form: out[form] for form in ICC_FORMS}


# ---------------------------------------------------------------------------------------------
# Krippendorff's alpha


def _alpha_units(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Observed values and per-unit coincidence matrices (pairable units only, flattened)."""
    x = np.asarray(data, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"data must be 2-D (raters x units), got shape {x.shape}")
    observed = ~np.isnan(x)
    values = np.unique(x[observed])
    # counts[u, v]: how many raters gave value v to unit u
    counts = np.zeros((x.shape[1], values.size))
    rater_idx, unit_idx = np.nonzero(observed)
    np.add.at(counts, (unit_idx, np.searchsorted(values, x[rater_idx, unit_idx])), 1.0)
    m = counts.sum(axis=1)
    counts = counts[m >= 2]
    m = m[m >= 2]
    # o_u[c, k] = (n_uc n_uk - [c == k] n_uc) / (m_u - 1)
    per_unit = counts[:, :, None] * counts[:, None, :]
    diag = np.arange(values.size)
    per_unit[:, diag, diag] -= counts
    per_unit /= (m - 1)[:, None, None]
    return values, per_unit.reshape(per_unit.shape[0], values.size**2)


def _alpha_from_coincidences(o: np.ndarray, values: np.ndarray, level: str) -> np.ndarray:
    """Alpha for a stack of coincidence matrices ``(..., V, V)``."""
    n_c = o.sum(axis=-1)
    total = n_c.sum(axis=-1)
    if level == "nominal":
        delta = 1.0 - np.eye(values.size)
    elif level == "interval":
        delta = (values[:, None] - values[None, :]) ** 2
    elif level == "ratio":
        with np.errstate(divide="ignore", invalid="ignore"):
            s = values[:, None] + values[None, :]
            delta = np.where(s == 0, 0.0, ((values[:, None] - values[None, :]) / s) ** 2)
    elif level == "ordinal":
        # delta_ck = (sum_{g=c..k} n_g - (n_c + n_k) / 2)^2, with values in rank order
        cum = np.cumsum(n_c, axis=-1)
        lo = np.minimum.outer(np.arange(values.size), np.arange(values.size))
        hi = np.maximum.outer(np.arange(values.size), np.arange(values.size))
        between = cum[..., hi] - cum[..., lo] + n_c[..., lo]
        delta = (between - (n_c[..., :, None] + n_c[..., None, :]) / 2.0) ** 2
    else:
        raise ValueError(f"unknown level {level!r}; expected one of {', '.join(ALPHA_LEVELS)}")
    observed = (o * delta).sum(axis=(-2, -1))
    expected = (n_c[..., :, None] * n_c[..., None, :] * delta).sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 - (total - 1.0) * observed / expected


def krippendorff_alpha(data: np.ndarray, level: str) -> float:
    """Krippendorff's alpha of a ``raters x units`` array with NaN for missing values.

    Args:
        data: Raters in rows, units in columns; units with fewer than 2 values are not pairable
            and drop out, as in Krippendorff's definition.
        level: ``nominal``, ``ordinal``, ``interval`` or ``ratio``.
    """
    values, per_unit = _alpha_units(data)
    if per_unit.shape[0] == 0 or values.size < 2:
        return float("nan")
    o = per_unit.sum(axis=0).reshape(values.size, values.size)
    return float(_alpha_from_coincidences(o, values, level))


def alpha_bootstrap_job(data: np.ndarray, levels: Sequence[str]) -> BootstrapJob:
    """A :class:`BootstrapJob` giving alpha at each level for every resample of the pairable
    units of a ``raters x units`` array: ``{level: (n_boot,) array}``."""
    values, per_unit = _alpha_units(data)
    for level in levels:
        if level not in ALPHA_LEVELS:
            raise ValueError(f"unknown level {level!r}; expected one of {', '.join(ALPHA_LEVELS)}")

    def finish(totals: np.ndarray) -> dict[str, np.ndarray]:
        if per_unit.shape[0] == 0 or values.size < 2:
            return {level: np.full(totals.shape[0], np.nan) for level in levels}
        o = totals.reshape(totals.shape[0], values.size, values.size)
        return {level: _alpha_from_coincidences(o, values, level) for level in levels}

    return BootstrapJob(per_unit, finish)


def krippendorff_alpha_boot(
    data: np.ndarray, level: str, n_boot: int = 1000, seed: int = 0
) -> np.ndarray:
    """Alpha for ``n_boot`` resamples of the pairable units (with replacement)."""
    (boot,) = run_bootstrap([alpha_bootstrap_job(data, (level,))], n_boot, seed)
    return boot[level]


def percentile_ci(boot: np.ndarray) -> list[float]:
    """95% percentile interval of the finite bootstrap values (NaN, NaN when there are none)."""
    finite = boot[np.isfinite(boot)]
    if finite.size == 0:
        return [float("nan"), float("nan")]
    lo, hi = np.percentile(finite, [2.5, 97.5])
    return [float(lo), float(hi)]


def krippendorff_alpha_ci(
    data: np.ndarray, level: str, n_boot: int = 1000, seed: int = 0
) -> list[float]:
    """95% percentile-bootstrap interval of alpha, resampling units with replacement."""
    return percentile_ci(krippendorff_alpha_boot(data, level, n_boot=n_boot, seed=seed))


# ---------------------------------------------------------------------------------------------
# Gwet's AC2


def gwet_weights(categories: ArrayLike, weights: str) -> np.ndarray:
    """Gwet's agreement weights ``w[k, l]`` over the ordered category set.

    ``identity`` gives AC1; ``ordinal`` uses category ranks (1 - C(d+1, 2) / max); ``linear`` and
    ``quadratic`` use the category values scaled by the range.
    """
    cats = np.asarray(categories, dtype=float)
    q = cats.size
    if weights == "identity":
        return np.eye(q)
    if weights == "ordinal":
        ranks = np.arange(q)
        span = np.abs(ranks[:, None] - ranks[None, :]) + 1.0
        m = span * (span - 1.0) / 2.0
        return 1.0 - m / m.max() if m.max() > 0 else np.ones((q, q))
    spread = cats.max() - cats.min() if q else 0.0
    if spread == 0:
        return np.ones((q, q))
    diff = np.abs(cats[:, None] - cats[None, :]) / spread
    if weights == "linear":
        return 1.0 - diff
    if weights == "quadratic":
        return 1.0 - diff**2
    raise ValueError(f"unknown weights {weights!r}; expected one of {', '.join(GWET_WEIGHTS)}")


def _category_counts(data: np.ndarray, categories: ArrayLike) -> np.ndarray:
    """``units x categories`` counts from a ``units x raters`` array with NaN for missing."""
    x = np.asarray(data, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"data must be 2-D (units x raters), got shape {x.shape}")
    cats = np.asarray(categories, dtype=float)
    present = ~np.isnan(x)
    # One category at a time: temporaries stay units x raters, not units x raters x categories.
    known = np.zeros(x.shape, dtype=bool)
    counts = np.empty((x.shape[0], cats.size))
    for c, value in enumerate(cats):
        hit = np.isclose(x, value)
        known |= hit
        counts[:, c] = hit.sum(axis=1)
    stray = np.unique(x[present & ~known])
    if stray.size:
        raise ValueError(f"values {stray.tolist()} are not in the category set {cats.tolist()}")
    return counts


def gwet_ac2(data: np.ndarray, categories: Sequence[float], weights: str) -> dict[str, Any]:
    """Gwet's AC2 with Gwet's variance estimate (no finite-population correction).

    Args:
        data: ``units x raters``, NaN for a missing rating; every unit with at least one rating
            counts towards the category prevalences, units with two or more towards agreement.
        categories: The declared category set (for example ``[1, 2, 3, 4, 5]``).
        weights: ``ordinal``, ``quadratic``, ``linear`` or ``identity`` (AC1).

    Returns:
        ``{"value", "se", "ci95": [lo, hi]}``; the interval is ``value +/- t(0.975, n-1) * se``
        with the upper limit capped at 1, as in Gwet's software.
    """
    cats = np.asarray(sorted(float(c) for c in categories))
    q = cats.size
    nan = float("nan")
    if q < 2:
        return {"value": nan, "se": nan, "ci95": [nan, nan]}
    w = gwet_weights(cats, weights)
    r = _category_counts(data, cats)
    r_i = r.sum(axis=1)
    r = r[r_i >= 1]
    r_i = r_i[r_i >= 1]
    n = r.shape[0]
    multi = r_i >= 2
    n2 = int(multi.sum())
    if n2 == 0:
        return {"value": nan, "se": nan, "ci95": [nan, nan]}
    r_star = r @ w.T
    pair_den = np.where(multi, r_i * (r_i - 1.0), 1.0)
    pa_i = np.where(multi, (r * (r_star - 1.0)).sum(axis=1) / pair_den, 0.0)
    pa = pa_i.sum() / n2
    pi = (r / r_i[:, None]).mean(axis=0)
    scale = w.sum() / (q * (q - 1.0))
    pe = scale * (pi * (1.0 - pi)).sum()
    if pe >= 1.0:
        return {"value": nan, "se": nan, "ci95": [nan, nan]}
    value = (pa - pe) / (1.0 - pe)
    # Linearised per-unit contributions (Gwet 2008, eq. for the variance of AC1/AC2).
    ac_i = (n / n2) * (pa_i - pe * multi) / (1.0 - pe)
    pe_i = scale * (r @ (1.0 - pi)) / r_i
    ac_i_star = ac_i - 2.0 * (1.0 - value) * (pe_i - pe) / (1.0 - pe)
    if n < 2:
        return {"value": float(value), "se": nan, "ci95": [nan, nan]}
    var = ((ac_i_star - value) ** 2).sum() / (n * (n - 1.0))
    se = float(np.sqrt(var))
    from scipy import special  # see icc_forms

    t = special.stdtrit(n - 1, 0.975)  # t(n - 1).ppf(0.975)
    return {
        "value": float(value),
        "se": se,
        "ci95": [float(value - t * se), float(min(1.0, value + t * se))],
    }


# ---------------------------------------------------------------------------------------------
# Kappas and percent agreement


def cohen_kappa(a: ArrayLike, b: ArrayLike) -> float:
    """Cohen's (unweighted) kappa of two raters; pairs with a missing value are dropped."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("a and b must be 1-D and of equal length")
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    if x.size == 0:
        return float("nan")
    cats = np.unique(np.concatenate([x, y]))
    p_o = float((x == y).mean())
    p_x = (x[:, None] == cats).mean(axis=0)
    p_y = (y[:, None] == cats).mean(axis=0)
    p_e = float((p_x * p_y).sum())
    if p_e >= 1.0:
        return float("nan")
    return (p_o - p_e) / (1.0 - p_e)


def _unit_counts(data: np.ndarray) -> np.ndarray:
    x = np.asarray(data, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"data must be 2-D (units x raters), got shape {x.shape}")
    cats = np.unique(x[~np.isnan(x)])
    return _category_counts(x, cats)


def percent_agreement(data: np.ndarray) -> float:
    """Mean pairwise agreement over units with two or more ratings (``units x raters``, NaN ok).

    For two raters this is the share of units on which they give the same score.
    """
    counts = _unit_counts(data)
    m = counts.sum(axis=1)
    counts, m = counts[m >= 2], m[m >= 2]
    if m.size == 0:
        return float("nan")
    return float(((counts * (counts - 1)).sum(axis=1) / (m * (m - 1))).mean())


def fleiss_kappa(data: np.ndarray) -> float:
    """Fleiss' kappa of a ``units x raters`` array of category values (NaN for missing).

    With a constant number of ratings per unit this is Fleiss (1971); with missing ratings each
    unit's agreement uses its own number of ratings and the prevalences pool all ratings.
    """
    counts = _unit_counts(data)
    m = counts.sum(axis=1)
    counts, m = counts[m >= 2], m[m >= 2]
    if m.size == 0:
        return float("nan")
    p_i = (counts * (counts - 1)).sum(axis=1) / (m * (m - 1))
    p_bar = p_i.mean()
    p_j = counts.sum(axis=0) / m.sum()
    p_e = float((p_j**2).sum())
    if p_e >= 1.0:
        return float("nan")
    return float((p_bar - p_e) / (1.0 - p_e))


def _fleiss_kappa_batch(x: np.ndarray) -> np.ndarray:
    """Fleiss' kappa of ``(B, n, k)`` complete matrices."""
    _, n, k = x.shape
    cats = np.unique(x)
    counts = (x[..., None] == cats).sum(axis=2).astype(float)  # (B, n, C)
    p_bar = ((counts * (counts - 1)).sum(axis=2) / (k * (k - 1))).mean(axis=1)
    p_e = ((counts.sum(axis=1) / (n * k)) ** 2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p_e < 1.0, (p_bar - p_e) / (1.0 - p_e), np.nan)


# ---------------------------------------------------------------------------------------------
# Wilcoxon signed-rank


def _signed_rank_inputs(diff: np.ndarray, zero_method: str) -> tuple[np.ndarray, np.ndarray]:
    """Ranks of the non-zero differences and their signs, per the zero-difference method."""
    if zero_method == "pratt":
        ranks = _average_ranks(np.abs(diff))
        keep = diff != 0
        return ranks[keep], np.sign(diff[keep])
    nonzero = diff[diff != 0]
    return _average_ranks(np.abs(nonzero)), np.sign(nonzero)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank (``scipy.stats.rankdata``'s default, as scipy
    computes it; here so that ranking does not load scipy.stats).

    Args:
        values: A 1-D array without NaN.
    """
    order = np.argsort(values, kind="mergesort")
    inverse = np.empty(order.size, dtype=np.intp)
    inverse[order] = np.arange(order.size)
    ordered = values[order]
    starts = np.r_[True, ordered[1:] != ordered[:-1]]
    dense = starts.cumsum()[inverse]
    bounds = np.r_[np.nonzero(starts)[0], starts.size]
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def _exact_sign_flip_p(diff: np.ndarray, zero_method: str) -> float:
    """Two-sided p of the signed-rank sum over all 2^m sign patterns of the non-zero differences
    (what scipy's default does for n <= 13 with ties or zeros, here in one matrix product)."""
    ranks, signs = _signed_rank_inputs(diff, zero_method)
    m = ranks.size
    observed = float(ranks[signs > 0].sum())
    patterns = (np.arange(2**m)[:, None] >> np.arange(m)[None, :]) & 1  # (2^m, m) of 0/1
    null = patterns @ ranks
    slack = abs(observed) * np.finfo(float).eps * 100  # float ties count as equal
    below = float((null <= observed + slack).mean())
    above = float((null >= observed - slack).mean())
    return float(min(1.0, 2.0 * min(below, above)))


@dataclass(frozen=True)
class _SignedRankSums:
    """Signed-rank sums and the null mean and standard error of ``r_plus`` (normal approximation).

    Args:
        r_plus: Sum of the ranks of the positive differences (half the zero ranks with zsplit).
        r_minus: The same for the negative differences.
        mean: ``r_plus``'s mean under the null.
        se: ``r_plus``'s standard error under the null, corrected for ties.
    """

    r_plus: float
    r_minus: float
    mean: float
    se: float


def _signed_rank_sums(diff: np.ndarray, zero_method: str) -> _SignedRankSums:
    """The sums and null moments that ``scipy.stats.wilcoxon`` computes, in the same float steps
    (bit for bit: every term is a multiple of 1/4 well below 2^53, and the last steps are the same
    correctly rounded divisions and square root), without loading scipy.stats.

    Args:
        diff: Paired differences without NaN, not all zero.
        zero_method: ``wilcox`` drops zero differences; ``pratt`` ranks them, then leaves them out
            of the sums, the moments and the tie correction; ``zsplit`` gives half of their ranks
            to each sum.
    """
    kept = diff[diff != 0] if zero_method == "wilcox" else diff
    magnitudes = np.abs(kept)
    ranks = _average_ranks(magnitudes)
    zeros = kept == 0
    r_plus = float(ranks[kept > 0].sum())
    r_minus = float(ranks[kept < 0].sum())
    n = float(kept.size)
    mean = n * (n + 1.0) * 0.25
    variance = n * (n + 1.0) * (2.0 * n + 1.0)  # x 24, as scipy holds it until the tie correction
    tied = magnitudes
    if zero_method == "zsplit":
        half_zero_ranks = float(ranks[zeros].sum()) / 2
        r_plus += half_zero_ranks
        r_minus += half_zero_ranks
    elif zero_method == "pratt":
        n_zero = float(zeros.sum())
        mean -= n_zero * (n_zero + 1.0) * 0.25
        variance -= n_zero * (n_zero + 1.0) * (2.0 * n_zero + 1.0)
        tied = magnitudes[~zeros]
    counts = np.unique(tied, return_counts=True)[1].astype(float)
    tie_correction = float((counts**3 - counts).sum())
    se = math.sqrt((variance - tie_correction / 2) / 24)
    return _SignedRankSums(r_plus, r_minus, mean, se)


def _normal_signed_rank_p(sums: _SignedRankSums) -> float:
    """Two-sided p of ``r_plus`` under the normal approximation, without continuity correction
    (``scipy.stats.wilcoxon(method="asymptotic")``, whose normal is ``scipy.special.ndtr``)."""
    from scipy.special import ndtr  # light, unlike scipy.stats (see icc_forms)

    z = (sums.r_plus - sums.mean) / sums.se
    return float(2 * ndtr(-abs(z)))


def _signed_rank_counts(n: int) -> np.ndarray:
    """How many of the 2^n sign patterns of ranks 1..n give each positive-rank sum 0..n(n+1)/2.

    Args:
        n: Number of differences; at most 50, so that every count (and 2^n) fits in int64.
    """
    counts = np.zeros(n * (n + 1) // 2 + 1, dtype=np.int64)
    counts[0] = 1
    for rank in range(1, n + 1):
        # Every pattern of the smaller ranks, with this rank positive, adds the rank to its sum;
        # shifted from a copy, so that no pattern gains the rank twice.
        counts[rank:] += counts[:-rank].copy()
    return counts


def _exact_signed_rank_p(n: int, r_plus: float) -> float:
    """Two-sided p of an integral ``r_plus`` of n untied, non-zero differences, from its exact
    null distribution: twice the smaller tail, at most 1.

    scipy sums probabilities (counts / 2^n) in floats; every partial sum is a multiple of 2^-n
    at most 1, exact in a float for n <= 50, so integer counts give its p bit for bit.

    Args:
        n: Number of differences (1 to 50).
        r_plus: Sum of the ranks of the positive differences.
    """
    counts = _signed_rank_counts(n)
    k = int(r_plus)
    lower = int(counts[: k + 1].sum())
    upper = int(counts[k:].sum())
    return min(1.0, 2 * min(lower, upper) / 2**n)


def wilcoxon_paired(x: ArrayLike, y: ArrayLike, zero_method: str = "wilcox") -> dict[str, Any]:
    """Wilcoxon signed-rank test of ``x - y``, with the zero-difference method stated.

    ``wilcox`` (scipy's default) discards zero differences; ``pratt`` ranks them and then drops
    their ranks (a sensitivity analysis). Pairs with a missing value are dropped. The p-value
    method follows scipy's ``method="auto"``: the exact distribution for n <= 50 without ties
    or zeros, an exact sign-flip permutation for n <= 13 with ties or zeros (computed here by
    enumeration, which scipy does slowly), otherwise the normal approximation with tie
    correction. When every difference is zero the test is degenerate and ``p`` is 1. The
    statistic and p are scipy.stats.wilcoxon's bit for bit, computed here: loading scipy.stats
    cost every ``judge agree``, ``compare`` and ``report`` about 0.4 s (#39).

    Returns:
        ``{"statistic", "p", "zero_method", "method", "n_pairs", "n_zero_differences"}``;
        the statistic is scipy's (the smaller of the signed-rank sums).
    """
    if zero_method not in ZERO_METHODS:
        raise ValueError(f"zero_method must be one of {', '.join(ZERO_METHODS)}")
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("x and y must be 1-D and of equal length")
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    diff = a - b
    n_zero = int((diff == 0).sum())
    result: dict[str, Any] = {
        "statistic": float("nan"),
        "p": float("nan"),
        "zero_method": zero_method,
        "method": None,
        "n_pairs": int(diff.size),
        "n_zero_differences": n_zero,
    }
    if diff.size == 0:
        return result
    if not diff.any():
        result.update(statistic=0.0, p=1.0, method="degenerate")
        return result
    nonzero = np.abs(diff[diff != 0])
    ties = np.unique(nonzero).size < nonzero.size
    if diff.size <= 50 and not ties and n_zero == 0:
        method = "exact"
    elif diff.size <= 13 and zero_method != "zsplit":
        method = "permutation"
    else:
        method = "asymptotic"
    sums = _signed_rank_sums(diff, zero_method)
    if method == "exact":
        p_value = _exact_signed_rank_p(diff.size, sums.r_plus)
    elif method == "permutation":
        p_value = _exact_sign_flip_p(diff, zero_method)
    else:
        p_value = _normal_signed_rank_p(sums)
    result.update(statistic=min(sums.r_plus, sums.r_minus), p=p_value, method=method)
    return result


# ---------------------------------------------------------------------------------------------
# Judge as substitute or additional rater


BOOT_CHUNK_ROWS = 32
"""Resamples per chunk for large unit counts: memory is O(units + BOOT_CHUNK_ROWS x units)."""

_SMALL_CHUNK_CELLS = 1 << 20
"""Below this many (resample, unit) cells per chunk, chunks grow (fewer, larger products)."""

_threads: ThreadpoolController | None = None


def _one_blas_thread() -> Any:
    """A context running BLAS on one thread. The bootstrap products are thin (a chunk of
    resamples by a few dozen per-unit columns): extra BLAS threads spin and, on a busy or
    shared machine, made them up to 15x slower in wall time while using more CPU."""
    global _threads
    if _threads is None:
        _threads = ThreadpoolController()
    return _threads.limit(limits=1, user_api="blas")


def bootstrap_indices(n_units: int, n_boot: int, seed: int) -> np.ndarray:
    """``(n_boot, n_units)`` unit indices drawn with replacement (the resamples used here).

    :func:`bootstrap_chunks` draws the same resamples a chunk of rows at a time.
    """
    return np.random.default_rng(seed).integers(0, n_units, size=(n_boot, n_units))


def bootstrap_weights(indices: np.ndarray) -> np.ndarray:
    """How often each unit appears in each resample: ``(B, n)`` counts from ``(B, n)`` indices.

    ``indices`` is used as scratch space (offset in place) to keep peak memory down.
    """
    n_boot, n_units = indices.shape
    flat = np.add(indices, (n_units * np.arange(n_boot))[:, None], out=indices)
    counts = np.bincount(flat.ravel(), minlength=n_boot * n_units)
    return counts.reshape(n_boot, n_units).astype(float)


def _chunk_rows(n_units: int, n_boot: int, chunk_rows: int | None) -> int:
    if chunk_rows is not None:
        if chunk_rows < 1:
            raise ValueError("chunk_rows must be at least 1")
        return chunk_rows
    return max(1, min(n_boot, max(BOOT_CHUNK_ROWS, _SMALL_CHUNK_CELLS // max(n_units, 1))))


def bootstrap_chunks(
    n_units: int, n_boot: int, seed: int, chunk_rows: int | None = None
) -> Iterator[tuple[slice, np.ndarray]]:
    """The resamples of :func:`bootstrap_indices` as unit weights, a chunk of rows at a time.

    Numpy's generator yields the same stream whether the ``(n_boot, n_units)`` draws are made
    at once or row chunk by row chunk, so the chunked weights equal
    ``bootstrap_weights(bootstrap_indices(n_units, n_boot, seed))`` exactly.

    Yields:
        ``(rows, weights)``: the slice of resample numbers and their ``(len, n_units)`` counts.
    """
    if n_units < 1:
        raise ValueError("the bootstrap needs at least one unit")
    rng = np.random.default_rng(seed)
    step = _chunk_rows(n_units, n_boot, chunk_rows)
    for start in range(0, n_boot, step):
        stop = min(n_boot, start + step)
        if (stop - start) * n_units <= _SMALL_CHUNK_CELLS:
            weights = bootstrap_weights(rng.integers(0, n_units, size=(stop - start, n_units)))
        else:  # row by row: no (rows x units) index matrix next to the weights
            weights = np.empty((stop - start, n_units))
            for row in range(stop - start):
                weights[row] = np.bincount(rng.integers(0, n_units, n_units), minlength=n_units)
        yield slice(start, stop), weights


@dataclass
class BootstrapJob:
    """A statistic bootstrapped through per-unit sums.

    Args:
        per_unit: ``(n_units, m)`` per-unit quantities; a resample's totals are the
            weight-by-unit sums ``weights @ per_unit``.
        finish: Turns the ``(n_boot, m)`` resample totals into the statistic's result.
    """

    per_unit: np.ndarray
    finish: Callable[[np.ndarray], Any]


def bootstrap_totals(
    per_unit: Sequence[np.ndarray], n_boot: int, seed: int, chunk_rows: int | None = None
) -> list[np.ndarray]:
    """Resample totals ``weights @ m`` for each ``(n_units, m)`` matrix, streamed in chunks.

    Matrices with the same number of units share one pass over the resamples (the same draws,
    as every bootstrap here uses). Matrices without units get NaN totals.
    """
    out: list[np.ndarray | None] = [None] * len(per_unit)
    groups: dict[int, list[int]] = {}
    mats = [np.asarray(m, dtype=float) for m in per_unit]
    for i, m in enumerate(mats):
        if m.ndim != 2:
            raise ValueError(f"per-unit statistics must be 2-D, got shape {m.shape}")
        groups.setdefault(m.shape[0], []).append(i)
    for n_units, members in groups.items():
        if n_units == 0:
            for i in members:
                out[i] = np.full((n_boot, mats[i].shape[1]), np.nan)
            continue
        for i in members:
            out[i] = np.empty((n_boot, mats[i].shape[1]))
        with _one_blas_thread():
            for rows, weights in bootstrap_chunks(n_units, n_boot, seed, chunk_rows):
                for i in members:
                    out[i][rows] = weights @ mats[i]  # type: ignore[index]
    return [t for t in out if t is not None]


def run_bootstrap(
    jobs: Sequence[BootstrapJob], n_boot: int, seed: int, chunk_rows: int | None = None
) -> list[Any]:
    """Results of several bootstrap jobs, with one streamed pass per distinct unit count."""
    if n_boot < 1:
        raise ValueError("n_boot must be at least 1")
    totals = bootstrap_totals([job.per_unit for job in jobs], n_boot, seed, chunk_rows)
    return [job.finish(t) for job, t in zip(jobs, totals, strict=True)]


def _icc_from_sums(
    n: int,
    k: int,
    total: np.ndarray,
    sum_row2: np.ndarray,
    sum_col2: np.ndarray,
    sum_sq: np.ndarray,
    form: str,
) -> np.ndarray:
    """An ICC form from sufficient statistics: grand total, sums of squared row and column
    totals and the sum of squared scores (the ANOVA sums of squares follow from these)."""
    correction = total**2 / (n * k)
    ss_rows = sum_row2 / k - correction
    ss_cols = sum_col2 / n - correction
    ss_error = np.maximum(sum_sq - correction - ss_rows - ss_cols, 0.0)
    ms = {
        "msr": ss_rows / (n - 1),
        "msc": ss_cols / (k - 1),
        "mse": ss_error / ((n - 1) * (k - 1)),
        "msw": (ss_cols + ss_error) / (n * (k - 1)),
    }
    with np.errstate(divide="ignore", invalid="ignore"):
        return _icc_from_ms(ms, n, k, form)


def _two_sided_p(deltas: np.ndarray) -> float:
    """Two-tailed bootstrap p for H0 delta = 0: twice the smaller tail share, add-one corrected."""
    d = deltas[np.isfinite(deltas)]
    d = np.where(np.abs(d) < 1e-12, 0.0, d)  # rounding noise counts as no change
    if d.size == 0:
        return float("nan")
    below = (1.0 + (d <= 0).sum()) / (d.size + 1.0)
    above = (1.0 + (d >= 0).sum()) / (d.size + 1.0)
    return float(min(1.0, 2.0 * min(below, above)))


def _delta_summary(base: float, other: float, boot: np.ndarray) -> dict[str, Any]:
    ci = percentile_ci(boot)
    return {
        "icc_base": float(base),
        "icc_with_judge": float(other),
        "delta_icc": float(other - base),
        "ci95": ci,
        "p": _two_sided_p(boot),
    }


def _check_form(form: str) -> None:
    if form not in BATCH_FORMS:
        raise ValueError(f"unknown form {form!r}; expected one of {', '.join(BATCH_FORMS)}")


def _check_judge(humans: np.ndarray, judge: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = _check_matrix(humans, "humans")
    j = np.asarray(judge, dtype=float)
    if h.ndim != 2 or j.shape != (h.shape[0],):
        raise ValueError(f"judge must have one score per unit: {h.shape[0]}, got shape {j.shape}")
    if np.isnan(j).any():
        raise ValueError("judge has missing values; use units the judge scored")
    return h, j


def _icc_judge_job(h: np.ndarray, j: np.ndarray, form: str) -> BootstrapJob:
    """Per-unit sufficient statistics of the base, the k swapped and the extended matrices."""
    n, k = h.shape
    rows = h.sum(axis=1)
    squares = (h**2).sum(axis=1)
    rows_sw = rows[:, None] - h + j[:, None]  # (n, k): column c replaced by the judge
    squares_sw = squares[:, None] - h**2 + (j**2)[:, None]
    rows_add = rows + j
    per_unit = np.column_stack(
        [h, j, rows, rows**2, squares, rows_sw, rows_sw**2, squares_sw]
        + [rows_add, rows_add**2, squares + j**2]
    )

    def finish(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cols, col_j = t[:, :k], t[:, k]
        total, row2, sq = t[:, k + 1], t[:, k + 2], t[:, k + 3]
        at = k + 4
        total_sw, row2_sw, sq_sw = (
            t[:, at : at + k],
            t[:, at + k : at + 2 * k],
            t[:, at + 2 * k : at + 3 * k],
        )
        total_add, row2_add, sq_add = t[:, at + 3 * k], t[:, at + 3 * k + 1], t[:, at + 3 * k + 2]
        col2 = (cols**2).sum(axis=1)
        base_b = _icc_from_sums(n, k, total, row2, col2, sq, form)
        swapped_b = _icc_from_sums(
            n, k, total_sw, row2_sw, col2[:, None] - cols**2 + (col_j**2)[:, None], sq_sw, form
        )  # (B, k)
        added_b = _icc_from_sums(n, k + 1, total_add, row2_add, col2 + col_j**2, sq_add, form)
        # A resample with no variance has an undefined ICC (inf or nan); its difference is nan
        # and left out downstream, so numpy need not warn about it.
        with np.errstate(invalid="ignore"):
            return swapped_b - base_b[:, None], added_b - base_b

    return BootstrapJob(per_unit, finish)


def _fleiss_from_sums(p_sum: np.ndarray, counts: np.ndarray, n: int, k: int) -> np.ndarray:
    """Fleiss' kappa from resample sums of per-unit agreement and category counts."""
    p_bar = p_sum / n
    p_e = ((counts / (n * k)) ** 2).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p_e < 1.0, (p_bar - p_e) / (1.0 - p_e), np.nan)


def _fleiss_judge_job(h: np.ndarray, j: np.ndarray) -> BootstrapJob:
    """Fleiss' kappa is a ratio of unit sums too: per-unit agreement and category counts of the
    base, the k swapped and the extended matrices."""
    n, k = h.shape
    cats = np.unique(np.concatenate([h.ravel(), j]))
    q = cats.size
    onehot_h = h[:, :, None] == cats  # (n, k, q)
    onehot_j = (j[:, None] == cats).astype(float)  # (n, q)
    counts = onehot_h.sum(axis=1).astype(float)  # (n, q)
    counts_sw = counts[:, None, :] - onehot_h + onehot_j[:, None, :]  # (n, k, q)
    counts_add = counts + onehot_j

    def agreement(c: np.ndarray, raters: int) -> np.ndarray:
        return (c * (c - 1.0)).sum(axis=-1) / (raters * (raters - 1.0))

    per_unit = np.column_stack(
        [
            agreement(counts, k),
            counts,
            agreement(counts_sw, k),  # (n, k)
            counts_sw.reshape(n, k * q),
            agreement(counts_add, k + 1),
            counts_add,
        ]
    )

    def finish(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b = t.shape[0]
        base = _fleiss_from_sums(t[:, 0], t[:, 1 : 1 + q], n, k)
        at = 1 + q
        swapped = _fleiss_from_sums(
            t[:, at : at + k], t[:, at + k : at + k + k * q].reshape(b, k, q), n, k
        )
        at += k + k * q
        added = _fleiss_from_sums(t[:, at], t[:, at + 1 : at + 1 + q], n, k + 1)
        return swapped - base[:, None], added - base

    return BootstrapJob(per_unit, finish)


def judge_bootstrap_job(
    humans: np.ndarray, judge: np.ndarray, rater_ids: list[str], form: str = "ICC3k"
) -> BootstrapJob:
    """The judge as substitute for each rater and as one more rater, as one bootstrap job.

    Its result is ``(substitution, added_rater)`` in the shapes of
    :func:`substitution_bootstrap` and :func:`added_rater_bootstrap`. Every statistic comes
    from per-unit sums (ICC sums of squares, Fleiss' agreement and category counts), so a
    resample costs one row of a matrix product instead of a copied ``n x k`` matrix.
    """
    _check_form(form)
    h, j = _check_judge(humans, judge)
    k = h.shape[1]
    if len(rater_ids) != k:
        raise ValueError(f"{len(rater_ids)} rater ids for {k} columns")
    inner = _fleiss_judge_job(h, j) if form == "fleiss_kappa" else _icc_judge_job(h, j, form)
    base = float(icc_values_batch(h[None], form)[0])
    both = np.concatenate([h, j[:, None]], axis=1)
    added_value = float(icc_values_batch(both[None], form)[0])
    swapped_values = []
    for col in range(k):
        swapped = h.copy()
        swapped[:, col] = j
        swapped_values.append(float(icc_values_batch(swapped[None], form)[0]))

    def finish(t: np.ndarray) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        swapped_boot, added_boot = inner.finish(t)
        substitution = [
            {"rater": rater, **_delta_summary(base, swapped_values[col], swapped_boot[:, col])}
            for col, rater in enumerate(rater_ids)
        ]
        return substitution, _delta_summary(base, added_value, added_boot)

    return BootstrapJob(inner.per_unit, finish)


def substitution_bootstrap(
    humans: np.ndarray,
    judge: np.ndarray,
    rater_ids: list[str],
    n_boot: int = 1000,
    seed: int = 0,
    form: str = "ICC3k",
) -> list[dict[str, Any]]:
    """Change in the raters' ICC when the judge replaces each human rater in turn.

    Each of the ``n_boot`` resamples draws units with replacement (the same draws for every
    rater, from :func:`bootstrap_indices`) and computes ``ICC(judge in place of rater j) -
    ICC(humans)``; ``p`` is the two-tailed bootstrap p of a zero change (twice the smaller share
    of resampled changes at or beyond 0, add-one corrected) and ``ci95`` the percentile interval.

    The statistics come from per-unit sums (see :func:`judge_bootstrap_job`), streamed over
    the resamples in chunks.

    Args:
        humans: Complete ``units x raters`` matrix of the human raters.
        judge: The judge's score for each unit (for example the median of its samples).
        rater_ids: Names of the human columns, in order.
        form: ICC form (default ``ICC3k``) or ``fleiss_kappa`` for categorical scales.

    Returns:
        One ``{"rater", "delta_icc", "ci95", "p", "icc_base", "icc_with_judge"}`` per rater.
    """
    (result,) = run_bootstrap([judge_bootstrap_job(humans, judge, rater_ids, form)], n_boot, seed)
    return result[0]


def _substitution_by_copy(
    h: np.ndarray, j: np.ndarray, rater_ids: list[str], idx: np.ndarray, form: str
) -> list[dict[str, Any]]:
    """Reference: the substitution bootstrap on explicitly resampled matrices."""
    hb = h[idx]
    jb = j[idx]
    base = float(icc_values_batch(h[None], form)[0])
    base_b = icc_values_batch(hb, form)
    out = []
    for col, rater in enumerate(rater_ids):
        swapped = h.copy()
        swapped[:, col] = j
        swapped_b = hb.copy()
        swapped_b[:, :, col] = jb
        other = float(icc_values_batch(swapped[None], form)[0])
        boot = icc_values_batch(swapped_b, form) - base_b
        out.append({"rater": rater, **_delta_summary(base, other, boot)})
    return out


def added_rater_bootstrap(
    humans: np.ndarray,
    judge: np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    form: str = "ICC3k",
) -> dict[str, Any]:
    """Change in the raters' ICC when the judge joins the human raters as one more rater.

    Same resamples and p as :func:`substitution_bootstrap`. Average-measure forms (``ICC3k``)
    rise with the number of raters, so a positive change is expected for a reasonable judge.

    Returns:
        ``{"delta_icc", "ci95", "p", "icc_base", "icc_with_judge"}``.
    """
    h = np.asarray(humans, dtype=float)
    ids = [str(i) for i in range(h.shape[-1])] if h.ndim == 2 else []
    (result,) = run_bootstrap([judge_bootstrap_job(humans, judge, ids, form)], n_boot, seed)
    return result[1]
