"""Step-level evaluation of a PRM against gold labels (PRMBench and ProcessBench conventions).

A step is predicted correct when its score is at least the threshold and erroneous below it.
With "positive" meaning a correct step: F1 is the positive-class F1 and F1_neg the
erroneous-class F1, both micro-averaged over all labelled steps; PRMScore is their unweighted
mean (binary macro-F1). First-error accuracy compares, per chain, the first step predicted
erroneous with the first gold erroneous step (none when all are correct), reported on chains
with an error, chains without one, and their harmonic mean (ProcessBench's F1).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel


class Confusion(BaseModel):
    """Step counts; positive = a correct step."""

    tp: int = 0
    fn: int = 0
    fp: int = 0
    tn: int = 0

    def add(self, label: int, score: float, threshold: float) -> None:
        """Count one labelled step."""
        predicted_ok = score >= threshold
        if label == 1:
            self.tp += predicted_ok
            self.fn += not predicted_ok
        else:
            self.fp += predicted_ok
            self.tn += not predicted_ok


def _f1(hit: int, miss_a: int, miss_b: int) -> float | None:
    denominator = 2 * hit + miss_a + miss_b
    return 2 * hit / denominator if denominator else None


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


class StepMetrics(BaseModel):
    """Step-level metrics of one group of steps."""

    n_steps: int
    n_correct: int
    n_erroneous: int
    f1: float | None
    f1_negative: float | None
    prm_score: float | None
    accuracy: float | None
    accuracy_erroneous: float | None
    accuracy_correct: float | None

    @classmethod
    def of(cls, c: Confusion) -> StepMetrics:
        """Metrics of a confusion table."""
        f1 = _f1(c.tp, c.fp, c.fn)
        f1_negative = _f1(c.tn, c.fn, c.fp)
        both = [v for v in (f1, f1_negative) if v is not None]
        total = c.tp + c.fn + c.fp + c.tn
        return cls(
            n_steps=total,
            n_correct=c.tp + c.fn,
            n_erroneous=c.fp + c.tn,
            f1=f1,
            f1_negative=f1_negative,
            prm_score=(sum(both) / 2 if len(both) == 2 else None),
            accuracy=_ratio(c.tp + c.tn, total),
            accuracy_erroneous=_ratio(c.tn, c.fp + c.tn),
            accuracy_correct=_ratio(c.tp, c.tp + c.fn),
        )


class FirstErrorMetrics(BaseModel):
    """Chain-level first-error accuracy."""

    n_chains: int
    n_with_error: int
    accuracy_with_error: float | None
    accuracy_without_error: float | None
    f1: float | None
    accuracy: float | None


class EvalReport(BaseModel):
    """Everything ``judge prm eval`` reports."""

    threshold: float
    overall: StepMetrics
    first_error: FirstErrorMetrics
    by_error_type: dict[str, StepMetrics]
    by_kind: dict[str, StepMetrics]


def first_index(flags: Sequence[bool]) -> int:
    """0-based index of the first True, or -1."""
    return next((i for i, flag in enumerate(flags) if flag), -1)


LabelledStep = tuple[int, float, str | None, str]
"""(label, score, error type, step kind) of one scored, labelled step."""


def evaluate(chains: Sequence[Sequence[LabelledStep]], threshold: float = 0.5) -> EvalReport:
    """Step-level and first-error metrics.

    Args:
        chains: Per chain, its labelled steps that have a score, in order.
        threshold: Scores below it predict an erroneous step.
    """
    overall = Confusion()
    kinds: dict[str, Confusion] = {}
    types: dict[str, Confusion] = {}
    hits = {True: 0, False: 0}
    counts = {True: 0, False: 0}
    for steps in chains:
        if not steps:
            continue
        for label, score, _, kind in steps:
            overall.add(label, score, threshold)
            kinds.setdefault(kind, Confusion()).add(label, score, threshold)
        # Per error type: that type's erroneous steps against the correct steps of the chains
        # where it occurs.
        for error_type in {t for label, _, t, _ in steps if label == 0 and t}:
            table = types.setdefault(error_type, Confusion())
            for label, score, t, _ in steps:
                if label == 1 or t == error_type:
                    table.add(label, score, threshold)
        gold = first_index([label == 0 for label, _, _, _ in steps])
        predicted = first_index([score < threshold for _, score, _, _ in steps])
        has_error = gold >= 0
        counts[has_error] += 1
        hits[has_error] += gold == predicted
    with_error = _ratio(hits[True], counts[True])
    without_error = _ratio(hits[False], counts[False])
    f1 = (
        2 * with_error * without_error / (with_error + without_error)
        if with_error is not None and without_error is not None and with_error + without_error
        else None
    )
    return EvalReport(
        threshold=threshold,
        overall=StepMetrics.of(overall),
        first_error=FirstErrorMetrics(
            n_chains=counts[True] + counts[False],
            n_with_error=counts[True],
            accuracy_with_error=with_error,
            accuracy_without_error=without_error,
            f1=f1,
            accuracy=_ratio(hits[True] + hits[False], counts[True] + counts[False]),
        ),
        by_error_type={t: StepMetrics.of(c) for t, c in sorted(types.items())},
        by_kind={k: StepMetrics.of(c) for k, c in sorted(kinds.items())},
    )
