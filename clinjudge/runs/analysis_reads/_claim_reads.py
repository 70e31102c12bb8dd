"""Reads of the DocLens ``claims`` table: tallies per section and per item, and the rows the
official evaluator's arithmetic needs (``analysis`` computes the scores)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clinjudge.runs._store import RunStore

_CLAIM_COUNTS = """
    count(DISTINCT item_id) AS items,
    count(*) FILTER (WHERE kind = 'recall') AS reference_claims,
    count(*) FILTER (WHERE kind = 'recall' AND verdict = 'entailed') AS reference_entailed,
    count(*) FILTER (WHERE kind = 'recall' AND verdict = 'failed') AS reference_failed,
    count(*) FILTER (WHERE kind = 'precision') AS output_claims,
    count(*) FILTER (WHERE kind = 'precision' AND verdict = 'entailed') AS output_entailed,
    count(*) FILTER (WHERE kind = 'precision' AND verdict = 'failed') AS output_failed,
    count(*) FILTER (WHERE kind = 'citation') AS statements,
    count(*) FILTER (WHERE kind = 'citation' AND verdict = 'entailed') AS statements_entailed,
    count(*) FILTER (WHERE kind = 'citation' AND verdict = 'failed') AS statements_failed,
    coalesce(sum(json_array_length(citations)) FILTER (WHERE kind = 'citation'), 0)
        AS citations,
    coalesce(sum(json_array_length(supporting))
        FILTER (WHERE kind = 'citation' AND verdict = 'entailed'), 0) AS citations_counted,
    count(*) FILTER (WHERE kind = 'extraction' AND status = 'failed') AS extraction_failed
"""
"""Tallies of claims rows (verdicts ``entailed`` and ``failed`` as ``judges.doclens`` stores
them): claims, statements and citations, entailed and failed, and failed extractions."""

_POOLED_SQL = f"""
SELECT coalesce(section, ?) AS section, grouping(section) AS is_total, {_CLAIM_COUNTS}
FROM claims WHERE run_id = ? AND agent = ?
GROUP BY GROUPING SETS ((section), ())
ORDER BY is_total, section
"""

_INSTANCE_SQL = f"""
SELECT item_id, {_CLAIM_COUNTS}
FROM claims WHERE run_id = ? AND agent = ? AND item_id IN (SELECT unnest(?::VARCHAR[]))
GROUP BY item_id
"""


def claim_extraction_agents(store: RunStore, run_id: str) -> list[str]:
    """The agents with claim extraction rows in a run (the deciding agent's, when one).

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        "SELECT DISTINCT agent FROM claims WHERE run_id = ? AND kind = 'extraction'", [run_id]
    )
    return [r["agent"] for r in rows]


def pooled_claim_counts(
    store: RunStore, run_id: str, agent: str, total: str
) -> list[dict[str, Any]]:
    """Claim tallies of one agent per section (sorted), then over every section: ``section``
    (``total`` on the last row), ``is_total`` and the counts of :data:`_CLAIM_COUNTS`.

    Args:
        store: The run store.
        run_id: Full run id.
        agent: Whose verdicts.
        total: The section name of the overall row.
    """
    return store.query(_POOLED_SQL, [total, run_id, agent])


def item_claim_counts(
    store: RunStore, run_id: str, agent: str, item_ids: Sequence[str]
) -> list[dict[str, Any]]:
    """Claim tallies of one agent per listed item (pooled over its samples): ``item_id`` and
    the counts of :data:`_CLAIM_COUNTS`.

    Args:
        store: The run store.
        run_id: Full run id.
        agent: Whose verdicts.
        item_ids: The items.
    """
    return store.query(_INSTANCE_SQL, [run_id, agent, list(item_ids)])


def claim_rows(store: RunStore, run_id: str, agent: str) -> list[dict[str, Any]]:
    """One agent's claims rows: ``section``, ``item_id``, ``kind``, ``verdict``, ``status``,
    ``citations``, ``supporting`` and ``official`` (null in stores from before that column).

    Args:
        store: The run store.
        run_id: Full run id.
        agent: Whose verdicts.
    """
    official = "official" if store.has_column("claims", "official") else "NULL"
    return store.query(
        "SELECT section, item_id, kind, verdict, status, citations, supporting, "
        f"{official} AS official FROM claims WHERE run_id = ? AND agent = ?",
        [run_id, agent],
    )
