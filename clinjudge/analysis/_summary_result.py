"""The typed summary of one run (``judge runs show``), its score distributions and its
per-item table."""

from __future__ import annotations

from typing import Any

from clinjudge.analysis._result_base import Result


class AgentCallTotals(Result):
    """Calls, tokens, cost and summed latency of one (role, agent, model)."""

    role: str | None = None
    agent: str | None = None
    model: str | None = None
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    latency_s_sum: float | None = None


class ErrorTally(Result):
    """A failed samples' error message and how many samples gave it."""

    error: str | None = None
    n: int = 0


class RunSummary(Result):
    """Everything ``judge runs show`` prints for a run: identity, counts, calls, tokens, cost,
    latency quantiles, calls per agent, the commonest sample errors and the flagged items."""

    run_id: str
    name: str | None = None
    status: str | None = None
    mode: str | None = None
    rubric: str | None = None
    models: dict[str, str] | None = None
    simulated: bool = False
    created_at: str
    finished_at: str | None = None
    items: int | None = None
    samples_per_item: int | None = None
    items_ok: int = 0
    items_failed: int = 0
    samples_ok: int = 0
    samples_failed: int = 0
    calls: int = 0
    calls_failed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_estimated: bool | None = None
    cost_usd: float | None = None
    calls_unpriced: int = 0
    call_latency_p50_s: float | None = None
    call_latency_p95_s: float | None = None
    item_latency_p50_s: float | None = None
    item_latency_p95_s: float | None = None
    item_cost_p50_usd: float | None = None
    by_agent: list[AgentCallTotals] = []
    top_errors: list[ErrorTally] = []
    flagged_items: list[dict[str, Any]] = []
    """Items whose text addresses the judge: ``item_id`` and its ``flags`` (name, field)."""


class ScoreDistribution(Result):
    """One attribute's final scores over a run's items (:func:`score_distributions`)."""

    key: str
    name: str
    scale: str
    """``likert``, ``binary`` or ``proportion`` (the rubric's scale kind)."""
    min: int
    max: int
    counts: dict[float, int] = {}
    """Score -> items with it, ascending (keys are strings in ``to_dict()``, as in JSON)."""
    n: int = 0
    """Items with a number."""
    null: int = 0
    """Valid judgments without a number (e.g. a gated attribute)."""
    failed: int = 0
    """Items whose judgment failed."""
    mean: float | None = None
    median: float | None = None

    def _old_key(self, key: str) -> Any:
        self._warn_old_key(key)
        # The old dict's scores were numbers; the JSON dump makes them strings.
        return self.counts if key == "counts" else self.to_dict()[key]


class ItemScoreRow(Result):
    """One item of the per-item table: its final scores, status, failure reason and flags."""

    item_id: str
    vendor: str | None = None
    section: str | None = None
    excerpt: str | None = None
    """The start of the item's text."""
    text_chars: int | None = None
    status: str
    """``ok``, ``failed`` or ``not judged``."""
    values: dict[str, float | None] = {}
    """Attribute -> final score (None when null)."""
    reason: str = ""
    """Why the item has no (or a weaker) judgment; empty when nothing failed."""
    flags: list[str] = []
    """Why the item is flagged (text addressing the judge, flag rules that fire)."""


class ItemScores(Result):
    """The per-item table of a run (:func:`item_scores`): items needing attention first, at
    most ``limit`` rows; the counts cover every item."""

    total: int = 0
    failed: int = 0
    unjudged: int = 0
    flagged: int = 0
    injected: int = 0
    """Items whose text addresses the judge (``items.flags``)."""
    partial: int = 0
    """Items with some failed samples."""
    rule_counts: dict[str, int] = {}
    """Flag rule text -> items it flags."""
    rows: list[ItemScoreRow] = []
    limit: int | None = None
