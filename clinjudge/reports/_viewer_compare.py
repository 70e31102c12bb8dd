"""Data of the compare page (runs side by side per item) and of an audit's page.

Disagreement between runs is computed in DuckDB over the final scores: per item, the sum over
attributes of the spread (max minus min) of the runs' final values; the page shows the items
with the largest disagreement first. The agreement, cost and latency table is
:func:`clinjudge.runs.compare_runs`, the same as ``judge compare``; audit statistics are
:func:`clinjudge.runs.audit_for_run`, the same as ``judge audit``.
"""

from __future__ import annotations

from typing import Any

from clinjudge.reports._viewer_paging import clamp_page
from clinjudge.runs import FINAL_AGENT, FINAL_SAMPLE, RunStore


def compare_items(
    store: RunStore, run_ids: list[str], *, page: int = 1, per_page: int = 50
) -> dict[str, Any]:
    """Items the runs share, largest disagreement first, with each run's final scores.

    Args:
        store: The run store.
        run_ids: Full run ids (two or more).
        page: Page number.
        per_page: Items per page.
    """
    base = """
        WITH f AS (
            SELECT run_id, item_id, attribute, value FROM judgments
            WHERE run_id IN (SELECT unnest($runs)) AND final AND sample = $sample
              AND agent = $agent),
        shared AS (
            SELECT item_id FROM f GROUP BY item_id
            HAVING count(DISTINCT run_id) = len($runs)),
        spread AS (
            SELECT item_id, attribute, max(value) - min(value) AS spread,
                   count(value) AS n
            FROM f WHERE item_id IN (SELECT item_id FROM shared)
            GROUP BY item_id, attribute),
        ranked AS (
            SELECT item_id, coalesce(sum(spread) FILTER (WHERE n >= 2), 0) AS disagreement,
                   coalesce(max(spread) FILTER (WHERE n >= 2), 0) AS largest,
                   count(*) FILTER (WHERE n < len($runs)) AS unscored
            FROM spread GROUP BY item_id)
    """
    params = {"runs": run_ids, "sample": FINAL_SAMPLE, "agent": FINAL_AGENT}
    counted = store.con.execute(base + "SELECT count(*) FROM ranked", params).fetchone()
    total = counted[0] if counted else 0
    paging = clamp_page(page, total, per_page)
    cursor = store.con.execute(
        base
        + """SELECT item_id, disagreement, largest, unscored FROM ranked
             ORDER BY disagreement DESC, largest DESC, item_id LIMIT $limit OFFSET $offset""",
        {**params, "limit": paging.per_page, "offset": paging.offset},
    )
    ranked = [
        dict(zip(("item_id", "disagreement", "largest", "unscored"), row, strict=True))
        for row in cursor.fetchall()
    ]
    ids = [r["item_id"] for r in ranked]
    values: dict[str, dict[str, dict[str, float | None]]] = {i: {} for i in ids}
    if ids:
        for row in store.query(
            """SELECT run_id, item_id, attribute, value FROM judgments
               WHERE run_id IN (SELECT unnest(?)) AND final
                 AND item_id IN (SELECT unnest(?))""",
            [run_ids, ids],
        ):
            values[row["item_id"]].setdefault(row["attribute"], {})[row["run_id"]] = row["value"]
    for row in ranked:
        row["values"] = values[row["item_id"]]
    only = store.query(
        """SELECT run_id, count(*) AS items FROM items WHERE run_id IN (SELECT unnest(?))
           GROUP BY run_id""",
        [run_ids],
    )
    return {
        "items": ranked,
        "paging": paging,
        "items_per_run": {r["run_id"]: r["items"] for r in only},
    }
