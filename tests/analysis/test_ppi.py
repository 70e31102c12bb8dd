"""PPI++ means: equal to a reference written here, one group at a time, from the formulas of
``ppi_py`` (``ppi_mean_pointestimate`` and ``ppi_mean_ci`` with ``lam=None``, alpha 0.05).

The reference follows ppi_py's steps literally: the plain PPI estimate first, gradients about it,
lambda from their covariance over 2(1 + n/N) times the sample covariance (ddof 1) of all
predictions, clipped to [0, 1], then the estimate and the normal interval with standard
deviations taken with ddof 0. (ppi-python itself needs numba, scikit-learn and statsmodels, too
heavy for the test command; the same arrays were also checked against ppi_py 0.2.3 by hand.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from clinjudge.analysis._ppi import expected_half_widths, ppi_means

Z975 = 1.959963984540054  # the normal quantile at 0.975


def reference(y: np.ndarray, yhat: np.ndarray, yu: np.ndarray) -> tuple[float, float, float, float]:
    """(lambda, estimate, low, high) for one group, step by step as ppi_py does."""
    n, big_n = len(y), len(yu)
    plain = yu.mean() + (y - yhat).mean()
    grads, grads_hat, grads_hat_u = y - plain, yhat - plain, yu - plain
    gc, ghc = grads - grads.mean(), grads_hat - grads_hat.mean()
    cov_grads = (1 / n) * (gc @ ghc + ghc @ gc)
    var_hat = np.cov(np.concatenate([grads_hat, grads_hat_u]))
    lam = float(np.clip(cov_grads / (2 * (1 + n / big_n) * var_hat), 0, 1))
    estimate = (lam * yu).mean() + (y - lam * yhat).mean()
    imputed_std = (lam * yu).std() / math.sqrt(big_n)
    rectifier_std = (y - lam * yhat).std() / math.sqrt(n)
    half = Z975 * math.sqrt(imputed_std**2 + rectifier_std**2)
    return lam, estimate, estimate - half, estimate + half


def _groups(seed: int, count: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    groups = []
    for g in range(count):
        n, big_n = int(rng.integers(5, 60)), int(rng.integers(10, 400))
        truth = rng.normal(3.5, 1.0, n + big_n)
        judge = truth + rng.normal(0.4 * (g % 3 - 1), 0.8, n + big_n)
        y = np.clip(np.round(truth + rng.normal(0, 0.3, n + big_n)), 1, 5)[:n]
        groups.append((y, np.clip(np.round(judge), 1, 5)[:n], np.clip(np.round(judge), 1, 5)[n:]))
    return groups


def test_every_group_equals_the_reference_to_1e_9() -> None:
    groups = _groups(7, 25)
    got = ppi_means([g[0] for g in groups], [g[1] for g in groups], [g[2] for g in groups])
    lams = []
    for (y, yhat, yu), est in zip(groups, got, strict=True):
        lam, estimate, low, high = reference(y, yhat, yu)
        lams.append(lam)
        assert (est.n, est.N) == (len(y), len(yu))
        assert est.lam == pytest.approx(lam, abs=1e-9)
        assert est.estimate == pytest.approx(estimate, abs=1e-9)
        assert est.ci_low == pytest.approx(low, abs=1e-9)
        assert est.ci_high == pytest.approx(high, abs=1e-9)
        assert est.classical_mean == pytest.approx(y.mean(), abs=1e-12)
        half = Z975 * y.std() / math.sqrt(len(y))
        assert est.classical_ci_low == pytest.approx(y.mean() - half, abs=1e-9)
        assert est.judge_mean == pytest.approx(np.concatenate([yhat, yu]).mean(), abs=1e-12)
        width = est.ci_high - est.ci_low
        assert est.effective_n == pytest.approx(len(y) * (2 * half / width) ** 2, rel=1e-9)
    assert any(0 < lam < 1 for lam in lams)  # the tuning really ran, not only the clips


def test_lambda_is_clipped_at_both_ends() -> None:
    y = np.array([1.0, 2, 3, 4, 5, 1, 2, 3])
    anti = 6 - y  # a judge that ranks backwards: negative covariance, lambda 0
    copy = y.copy()  # a perfect judge over few unlabelled items: the ratio passes 1
    got = ppi_means([y, y], [anti, copy], [[3.0, 2.0, 4.0], [5.0, 1.0, 1.0, 5.0]])
    assert got[0].lam == 0 and got[0].estimate == pytest.approx(y.mean())
    assert got[1].lam == pytest.approx(reference(y, copy, np.array([5.0, 1, 1, 5]))[0])
    for est, (yhat, yu) in zip(got, [(anti, [3.0, 2, 4]), (copy, [5.0, 1, 1, 5])], strict=True):
        lam, estimate, low, high = reference(y, yhat, np.array(yu))
        assert (est.lam, est.estimate, est.ci_low, est.ci_high) == pytest.approx(
            (lam, estimate, low, high), abs=1e-9
        )


def test_degenerate_groups_give_no_numbers_rather_than_nan() -> None:
    got = ppi_means([[4.0], [], [3.0, 4.0]], [[4.0], [], [2.0, 2.0]], [[1.0, 2.0], [3.0], []])
    one, none, no_unlabelled = got
    assert one.estimate is None and one.ci_low is None and one.judge_mean == pytest.approx(7 / 3)
    assert none.n == 0 and none.estimate is None and none.judge_mean == 3.0
    # No unlabelled items: nothing to borrow; the estimate is the physicians' own mean.
    assert no_unlabelled.lam == 0 and no_unlabelled.estimate == pytest.approx(3.5)
    with pytest.raises(ValueError, match="pair up"):
        ppi_means([[1.0, 2.0]], [[1.0]], [[]])


def test_planned_widths_shrink_with_the_judges_correlation() -> None:
    ppi, classical = expected_half_widths(1.0, 40, 360, 0.7)
    assert classical == pytest.approx(Z975 / math.sqrt(40))
    assert ppi == pytest.approx(classical * math.sqrt(1 - 0.49 * 360 / 400))
    assert expected_half_widths(1.0, 40, 360, 0.0)[0] == pytest.approx(classical)
