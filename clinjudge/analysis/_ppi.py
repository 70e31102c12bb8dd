"""Prediction-powered inference for means (PPI++, Angelopoulos, Duchi and Zrnic 2023).

Physicians rate a random sample of items (labels ``Y``); the judge scores every item
(predictions ``Yhat`` on the rated items, ``Yhat_u`` on the rest). The power-tuned estimate of
the physicians' mean is ``lam * mean(Yhat_u) + mean(Y - lam * Yhat)``, unbiased for any
``lam``; ``lam`` is chosen from the data to minimise the variance and clipped to [0, 1], as
``ppi_py`` does (``ppi_mean_pointestimate`` / ``ppi_mean_ci`` with ``lam=None``), and the
interval is the normal one with the two variance terms added.

Every group (vendor x attribute, or vendor pair x attribute) is computed at once: the samples
are padded into one array per role with NaN, and every reduction skips the padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MeanEstimate:
    """Three estimates of the physicians' mean for one group.

    Args:
        n: Items with physicians' ratings (and a judge score).
        N: Items with a judge score only.
        lam: The power-tuning parameter used (0: physicians only; 1: plain PPI).
        estimate: PPI++ estimate of the physicians' mean.
        ci_low: Lower end of its confidence interval.
        ci_high: Upper end.
        classical_mean: Mean of the physicians' ratings alone.
        classical_ci_low: Lower end of its normal (CLT) interval.
        classical_ci_high: Upper end.
        judge_mean: The judge's mean over every item (rated or not).
        judge_ci_low: Lower end of the judge-only normal interval.
        judge_ci_high: Upper end.
        effective_n: Physician ratings the classical interval would need to be as narrow as
            the PPI++ one.
    """

    n: int
    N: int
    lam: float | None
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    classical_mean: float | None
    classical_ci_low: float | None
    classical_ci_high: float | None
    judge_mean: float | None
    judge_ci_low: float | None
    judge_ci_high: float | None
    effective_n: float | None


def _padded(groups: Sequence[Sequence[float]]) -> np.ndarray:
    width = max((len(g) for g in groups), default=0)
    out = np.full((len(groups), max(width, 1)), np.nan)
    for row, values in enumerate(groups):
        out[row, : len(values)] = np.asarray(values, dtype=float)
    return out


def _nanvar0(x: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Population variance per row (ddof 0), NaN padding skipped; NaN for empty rows."""
    mean = np.nansum(x, axis=1) / np.where(count > 0, count, np.nan)
    return np.nansum((x - mean[:, None]) ** 2, axis=1) / np.where(count > 0, count, np.nan)


def ppi_means(
    labels: Sequence[Sequence[float]],
    predictions: Sequence[Sequence[float]],
    unlabelled: Sequence[Sequence[float]],
    alpha: float = 0.05,
) -> list[MeanEstimate]:
    """PPI++ estimates and intervals of the mean, with the classical and judge-only ones.

    Args:
        labels: Per group, the physicians' label of each rated item.
        predictions: Per group, the judge's score of the same items, in the same order.
        unlabelled: Per group, the judge's score of each item without ratings.
        alpha: 1 - coverage of the intervals.

    Returns:
        One estimate per group. A group with fewer than two rated items has no PPI++ or
        classical estimate (its judge-only one is still given); a group whose judge scores do
        not vary gets ``lam`` 0 (the judge carries no information about differences).
    """
    for rated, judged in zip(labels, predictions, strict=True):
        if len(rated) != len(judged):
            raise ValueError("labels and predictions must pair up item by item")
    y, yhat, yu = _padded(labels), _padded(predictions), _padded(unlabelled)
    n = np.sum(~np.isnan(y), axis=1).astype(float)
    big_n = np.sum(~np.isnan(yu), axis=1).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        lam = _tuned_lambda(y, yhat, yu, n, big_n)
        lab = np.where(n > 0, n, np.nan)
        unl = np.where(big_n > 0, big_n, np.nan)
        mean_u = np.where(big_n > 0, np.nansum(yu, axis=1) / unl, 0.0)
        rectifier = y - lam[:, None] * yhat
        estimate = lam * mean_u + np.nansum(rectifier, axis=1) / lab
        imputed_var = np.where(big_n > 0, lam**2 * _nanvar0(yu, big_n) / unl, 0.0)
        se = np.sqrt(imputed_var + _nanvar0(rectifier, n) / lab)
        classical = np.nansum(y, axis=1) / lab
        classical_se = np.sqrt(_nanvar0(y, n) / lab)
        every = np.concatenate([yhat, yu], axis=1)
        total = n + big_n
        judge = np.nansum(every, axis=1) / np.where(total > 0, total, np.nan)
        judge_se = np.sqrt(_nanvar0(every, total) / np.where(total > 0, total, np.nan))
        effective = _nanvar0(y, n) / se**2
    z = _z(alpha)
    rated = n >= 2
    return [
        MeanEstimate(
            n=int(n[g]),
            N=int(big_n[g]),
            lam=_number(lam[g], rated[g]),
            estimate=_number(estimate[g], rated[g]),
            ci_low=_number(estimate[g] - z * se[g], rated[g]),
            ci_high=_number(estimate[g] + z * se[g], rated[g]),
            classical_mean=_number(classical[g], rated[g]),
            classical_ci_low=_number(classical[g] - z * classical_se[g], rated[g]),
            classical_ci_high=_number(classical[g] + z * classical_se[g], rated[g]),
            judge_mean=_number(judge[g], total[g] > 0),
            judge_ci_low=_number(judge[g] - z * judge_se[g], total[g] > 1),
            judge_ci_high=_number(judge[g] + z * judge_se[g], total[g] > 1),
            effective_n=_number(effective[g], rated[g] and se[g] > 0),
        )
        for g in range(len(labels))
    ]


def _tuned_lambda(
    y: np.ndarray, yhat: np.ndarray, yu: np.ndarray, n: np.ndarray, big_n: np.ndarray
) -> np.ndarray:
    """The variance-minimising ``lam`` per group, clipped to [0, 1].

    The covariance of labels and predictions over the rated items is taken with 1/n, the
    variance of every prediction (rated and not) with 1/(n + N - 1), and the ratio is shrunk by
    1 + n/N: the same arithmetic as ``ppi_py``'s ``_calc_lam_glm`` for a mean.
    """
    lab = np.where(n > 0, n, np.nan)
    centred_y = y - (np.nansum(y, axis=1) / lab)[:, None]
    centred_hat = yhat - (np.nansum(yhat, axis=1) / lab)[:, None]
    covariance = np.nansum(centred_y * centred_hat, axis=1) / lab
    every = np.concatenate([yhat, yu], axis=1)
    total = n + big_n
    spread = _nanvar0(every, total) * total / np.where(total > 1, total - 1, np.nan)
    ratio = covariance / ((1 + n / np.where(big_n > 0, big_n, np.nan)) * spread)
    usable = (big_n > 0) & (spread > 0) & np.isfinite(ratio)
    return np.where(usable, np.clip(ratio, 0.0, 1.0), 0.0)


def _number(value: float, defined: bool | np.bool_) -> float | None:
    return float(value) if defined and np.isfinite(value) else None


def expected_half_widths(
    sd: float, n: int, big_n: int, correlation: float, alpha: float = 0.05
) -> tuple[float, float]:
    """Expected half-widths of the PPI++ and classical intervals, for planning a sample.

    With judge and physicians on the same spread ``sd`` and correlated by ``correlation``, the
    tuned estimator's variance is about ``sd**2 / n * (1 - correlation**2 * N / (n + N))``.

    Args:
        sd: Standard deviation of the scores (the judge's, standing in for the physicians').
        n: Items to be rated.
        big_n: Items scored by the judge only.
        correlation: Assumed judge-physician correlation.
        alpha: 1 - coverage.
    """
    z = _z(alpha)
    classical = z * sd / np.sqrt(n)
    gain = 1 - correlation**2 * big_n / (n + big_n) if n + big_n else 1.0
    return float(classical * np.sqrt(gain)), float(classical)


_Z95 = 1.959963984540054
"""``scipy.special.ndtri(0.975)``, bit for bit: the 95% intervals need no scipy."""


def _z(alpha: float) -> float:
    """The normal quantile of a two-sided ``1 - alpha`` interval, as ``scipy.stats.norm.ppf``
    gives it. Loading scipy.stats cost every importer of this module 0.5-1 s, and scipy.special
    alone 0.2 s of `judge audit plan`'s start (#39): 95% is a constant, other levels load it.

    Args:
        alpha: 1 - coverage.
    """
    if alpha == 0.05:
        return _Z95
    from scipy.special import ndtri

    return float(ndtri(1 - alpha / 2))
