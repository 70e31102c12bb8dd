"""Aggregators, best-of-n selection and PRMScore against hand computation."""

from __future__ import annotations

import math

import pytest

from clinjudge.prm_bridge import AGGREGATES, aggregate, best_candidate, evaluate
from clinjudge.prm_bridge._aggregate import all_aggregates


def test_aggregates_by_hand():
    scores = [0.9, 0.5, None, 0.2, 0.8]  # None: a step cut by truncation is left out
    got = all_aggregates(scores, threshold=0.5)
    assert set(got) == set(AGGREGATES)
    assert got["product"] == pytest.approx(math.log(0.9 * 0.5 * 0.2 * 0.8))
    assert got["min"] == 0.2
    assert got["last"] == 0.8
    assert got["mean"] == pytest.approx(0.6)
    assert got["geomean"] == pytest.approx((0.9 * 0.5 * 0.2 * 0.8) ** 0.25)
    assert got["median"] == pytest.approx(0.65)
    assert got["max"] == 0.9
    assert got["sum"] == pytest.approx(2.4)
    assert got["threshold"] == 3.0  # 0.9, 0.5 and 0.8 are not below 0.5
    assert aggregate([0.0], "product") == pytest.approx(math.log(1e-10))  # floored, not -inf
    assert aggregate([None, None], "min") is None
    with pytest.raises(ValueError, match="unknown aggregate"):
        aggregate([0.5], "mode")


def test_best_candidate_ties_and_missing():
    assert best_candidate([("a", 0.3), ("b", 0.7), ("c", 0.7)]) == 1
    assert best_candidate([("a", None), ("b", -2.0), ("c", -1.0)]) == 2
    assert best_candidate([("a", None)]) is None


def test_prmscore_by_hand():
    # chain 1: labels 1,1,0,0 scored .9 .4 .3 .8 -> TP=1 FN=1 TN=1 FP=1
    # chain 2: labels 1,1 scored .7 .6 -> TP=2
    # chain 3: labels 1,0,1 scored .2 .1 .9 -> FN=1 TN=1 TP=1
    chains = [
        [(1, 0.9, None, "step"), (1, 0.4, None, "step"), (0, 0.3, "A", "step"),
         (0, 0.8, "B", "step")],
        [(1, 0.7, None, "step"), (1, 0.6, None, "step")],
        [(1, 0.2, None, "step"), (0, 0.1, "A", "step"), (1, 0.9, None, "step")],
    ]  # fmt: skip
    report = evaluate(chains, threshold=0.5)
    tp, fn, fp, tn = 4, 2, 1, 2
    f1 = 2 * tp / (2 * tp + fp + fn)
    f1_neg = 2 * tn / (2 * tn + fn + fp)
    o = report.overall
    assert (o.n_steps, o.n_correct, o.n_erroneous) == (9, 6, 3)
    assert o.f1 == pytest.approx(f1) and o.f1_negative == pytest.approx(f1_neg)
    assert o.prm_score == pytest.approx((f1 + f1_neg) / 2)
    assert o.accuracy == pytest.approx(6 / 9)
    assert o.accuracy_erroneous == pytest.approx(2 / 3)
    # first error: chain 1 gold 2, predicted 1 (miss); chain 3 gold 1, predicted 0 (miss);
    # chain 2 has no error and none predicted (hit)
    fe = report.first_error
    assert (fe.n_chains, fe.n_with_error) == (3, 2)
    assert fe.accuracy_with_error == 0.0 and fe.accuracy_without_error == 1.0
    assert fe.f1 == 0.0
    assert fe.accuracy == pytest.approx(1 / 3)
    # type A: its error steps (chain 1 step 3, chain 3 step 2: both caught) against the
    # correct steps of chains 1 and 3 (.9 .4 .2 .9 -> TP=2, FN=2)
    a = report.by_error_type["A"]
    assert (a.n_erroneous, a.n_correct) == (2, 4)
    assert a.accuracy_erroneous == 1.0
    assert a.f1 == pytest.approx(2 * 2 / (2 * 2 + 0 + 2))
    assert a.f1_negative == pytest.approx(2 * 2 / (2 * 2 + 2 + 0))
    b = report.by_error_type["B"]
    assert (b.n_erroneous, b.accuracy_erroneous) == (1, 0.0)


def test_prmscore_undefined_without_both_classes():
    report = evaluate([[(1, 0.9, None, "step"), (1, 0.8, None, "step")]])
    assert report.overall.f1 == 1.0 and report.overall.f1_negative is None
    assert report.overall.prm_score is None
