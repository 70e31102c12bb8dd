"""The typed summary of one run (``judge runs show``)."""

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
