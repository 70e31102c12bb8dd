"""Named reads that several consumers share (the statistics, the pages, the runner), and the
query helpers every read module uses.

``runs`` owns the schema, so it owns every query of it. Column data that feeds numeric work
(ratings, final scores: see ``_ratings``) comes back as Arrow tables, without per-row Python
objects; small results come back as rows typed by ``TypedDict`` (plain dicts, so they pass into
JSON output unchanged).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict, cast

from clinjudge.runs._aggregate import FINAL_AGENT
from clinjudge.runs._manage import DECIDING_AGENT_SQL
from clinjudge.runs._store import FINAL_SAMPLE, RunStore

if TYPE_CHECKING:  # Arrow loads with the first table read, not with the store
    import pyarrow as pa


def query_arrow(store: RunStore, sql: str, params: list[Any]) -> pa.Table:
    """A query's result as an Arrow table, without a row-by-row copy.

    It runs on its own cursor: the store's connection may hold a half-read result (a
    ``fetchone``), which DuckDB 2 refuses to interleave with another query.
    """
    cursor = store.con.cursor()
    try:
        relation = cursor.sql(sql, params=params)
        fetch = getattr(relation, "to_arrow_table", None) or relation.arrow  # DuckDB 2 / 1.x
        return fetch()
    finally:
        cursor.close()


def count_query(store: RunStore, sql: str, params: list[Any]) -> int:
    return int(store.query(sql, params)[0]["n"])


class SampleCounts(TypedDict):
    """Samples of the deciding agent (see ``runs.DECIDING_AGENTS``): all, valid, not valid."""

    total: int
    ok: int
    failed: int


def sample_counts(store: RunStore, run_id: str) -> SampleCounts:
    """The run's samples (deciding agent, sample > 0): all of them, valid, and not valid.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        """
        SELECT count(*) AS total, count(*) FILTER (WHERE status = 'ok') AS ok,
               count(*) FILTER (WHERE status <> 'ok') AS failed
        FROM samples WHERE run_id = ? AND sample > 0 AND """
        + DECIDING_AGENT_SQL,
        [run_id],
    )
    return cast(SampleCounts, rows[0])


class AgentCalls(TypedDict):
    """Calls of one (role, agent, model) of a run."""

    role: str
    agent: str
    model: str
    calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float | None
    latency_s_sum: float


def calls_by_agent(store: RunStore, run_id: str) -> list[AgentCalls]:
    """Calls, tokens, cost and summed latency per role, agent and model, in that order.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        """
        SELECT role, agent, model, count(*) AS calls,
               coalesce(sum(prompt_tokens), 0) AS tokens_in,
               coalesce(sum(completion_tokens), 0) AS tokens_out,
               sum(cost_usd) AS cost_usd,
               coalesce(sum(latency_s), 0) AS latency_s_sum
        FROM calls WHERE run_id = ?
        GROUP BY role, agent, model ORDER BY role, agent, model""",
        [run_id],
    )
    return cast(list[AgentCalls], rows)


def calls_of_agent(
    store: RunStore,
    run_id: str,
    agent: str,
    samples: Sequence[tuple[str, int]] | None = None,
) -> list[dict[str, Any]]:
    """Every ``calls`` row of one agent of a run, in call order (``seq``).

    Args:
        store: The run store.
        run_id: Full run id.
        agent: The agent (``judge``, a panel member, ...).
        samples: Only the calls of these (item id, sample) pairs.
    """
    if samples is None:
        return store.query(
            "SELECT * FROM calls WHERE run_id = ? AND agent = ? ORDER BY seq", [run_id, agent]
        )
    return store.query(
        "SELECT * FROM calls WHERE run_id = ? AND agent = ? AND (item_id, sample) IN "
        "(SELECT unnest(?::VARCHAR[]), unnest(?::INTEGER[])) ORDER BY seq",
        [run_id, agent, [item for item, _ in samples], [sample for _, sample in samples]],
    )


_FINAL_WHERE = "run_id = ? AND final AND sample = ? AND agent = ?"


class ScoreCount(TypedDict):
    """How many items got one final value of one attribute, with one status."""

    attribute: str
    value: float | None
    status: str
    n: int


def final_score_counts(store: RunStore, run_id: str) -> list[ScoreCount]:
    """One scan of a run's final judgments: rows of ``attribute``, ``value``, ``status``, ``n``.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        f"SELECT attribute, value, status, count(*) AS n FROM judgments WHERE {_FINAL_WHERE} "
        "GROUP BY attribute, value, status",
        [run_id, FINAL_SAMPLE, FINAL_AGENT],
    )
    return cast(list[ScoreCount], rows)
