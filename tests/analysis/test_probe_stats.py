"""Probe statistics: the Wilson interval, pairs counted as expected, scale ends, verdicts."""

from __future__ import annotations

import math

import pytest

from clinjudge.analysis._probe import (
    DIRECTIONAL_PASS,
    INVARIANCE_PASS,
    probe_row,
    wilson_interval,
)
from clinjudge.inputs import Expectation


def _wilson_by_hand(k: int, n: int) -> tuple[float, float]:
    # Wilson (1927): roots in p of (p_hat - p)^2 = z^2 p (1 - p) / n, solved as a quadratic.
    z = 1.959963984540054
    p_hat = k / n
    a = 1 + z**2 / n
    b = -(2 * p_hat + z**2 / n)
    c = p_hat**2
    root = math.sqrt(b * b - 4 * a * c)
    return (-b - root) / (2 * a), (-b + root) / (2 * a)


@pytest.mark.parametrize(("k", "n"), [(0, 1), (1, 2), (2, 2), (7, 10), (16, 16), (3, 40)])
def test_wilson_matches_an_independent_formula(k: int, n: int) -> None:
    low, high = wilson_interval(k, n)
    ref_low, ref_high = _wilson_by_hand(k, n)
    assert low == pytest.approx(max(0.0, ref_low), abs=1e-12)
    assert high == pytest.approx(min(1.0, ref_high), abs=1e-12)


@pytest.mark.parametrize(("k", "n"), [(0, 5), (3, 7), (9, 9), (41, 60)])
def test_wilson_matches_statsmodels(k: int, n: int) -> None:
    proportion = pytest.importorskip("statsmodels.stats.proportion")
    ref = proportion.proportion_confint(k, n, alpha=0.05, method="wilson")
    assert wilson_interval(k, n) == pytest.approx(ref, abs=1e-9)


def test_wilson_of_nothing_is_the_whole_range() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_directional_row_counts_moves_and_leaves_out_scale_ends() -> None:
    e = Expectation("contradiction", "accurate", "lower")
    pairs = [(4.0, 2.0), (5.0, 3.0), (3.0, 3.0), (1.0, 1.0), (None, 2.0), (4.0, None)]
    row = probe_row(e, pairs, 1, 5)
    assert (row.n, row.n_as_expected, row.n_at_limit, row.n_unscored) == (3, 2, 1, 2)
    assert row.share_as_expected == pytest.approx(2 / 3)
    assert (row.ci_low, row.ci_high) == pytest.approx(wilson_interval(2, 3))
    assert row.mean_change == pytest.approx((-2 - 2 + 0) / 3)
    assert row.share_changed is None  # directional
    assert row.verdict == "weak"  # share >= 0.5, lower bound below it


def test_verdicts_follow_the_documented_bars() -> None:
    e = Expectation("padding", "succinct", "lower")
    moved = [(4.0, 2.0)] * 10
    assert probe_row(e, moved, 1, 5).verdict == "pass"
    assert wilson_interval(10, 10)[0] >= DIRECTIONAL_PASS
    assert probe_row(e, [(4.0, 4.0)] * 10, 1, 5).verdict == "fail"
    assert probe_row(e, [], 1, 5).verdict == "no data"
    assert probe_row(e, [(1.0, 1.0)] * 3, 1, 5).verdict == "no data"  # all at the floor


def test_invariance_rows_use_the_stricter_bar_and_report_changes() -> None:
    same = Expectation("neutral", "accurate", "same")
    steady = probe_row(same, [(4.0, 4.0)] * 16, 1, 5)
    assert steady.verdict == "pass" and steady.share_changed == 0.0
    assert wilson_interval(16, 16)[0] >= INVARIANCE_PASS > wilson_interval(6, 6)[0]
    assert probe_row(same, [(4.0, 4.0)] * 6, 1, 5).verdict == "weak"
    wobbly = probe_row(same, [(4.0, 3.0)] * 3 + [(4.0, 4.0)] * 7, 1, 5)
    assert wobbly.share_changed == pytest.approx(0.3) and wobbly.verdict == "fail"


def test_injection_counts_no_improvement_and_skips_the_top() -> None:
    e = Expectation("injection", "accurate", "not higher")
    row = probe_row(e, [(3.0, 5.0), (3.0, 3.0), (4.0, 2.0), (5.0, 5.0)], 1, 5)
    assert (row.n, row.n_as_expected, row.n_at_limit) == (3, 2, 1)
    worse_is_higher = Expectation("injection", "voice_summ", "not lower")
    row = probe_row(worse_is_higher, [(1.0, 0.0), (0.0, 0.0), (1.0, 1.0)], 0, 1)
    assert (row.n, row.n_as_expected, row.n_at_limit) == (2, 1, 1)
