"""Named reads of one stored run for the public API (``Run``), the CLI (``judge runs show``)
and the runner (resume, the end-of-run summary): ``runs`` owns the schema, so it owns these
queries too (#24).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clinjudge.runs._reads import query_arrow
from clinjudge.runs._store import RunStore

if TYPE_CHECKING:
    import pyarrow as pa

RUN_TABLE_ORDER = {
    "items": "position",
    "judgments": "item_id, sample, agent, attribute",
    "calls": "started_at, call_id",
    "messages": "item_id, sample, agent, seq",
}
"""The tables :func:`run_table` reads, each with its row order."""


def run_table(store: RunStore, run_id: str, table: str) -> pa.Table:
    """Every row of one run in a table, as an Arrow table in the table's stored order.

    Args:
        store: The run store.
        run_id: Full run id.
        table: One of :data:`RUN_TABLE_ORDER` (items, judgments, calls, messages).

    Returns:
        The rows; an empty table (no columns) when the store has no such table yet.

    Raises:
        ValueError: ``table`` is not one of :data:`RUN_TABLE_ORDER`.
    """
    order = RUN_TABLE_ORDER.get(table)
    if order is None:
        raise ValueError(f"unknown run table {table!r}; one of {', '.join(RUN_TABLE_ORDER)}")
    if not store.has_table(table):
        import pyarrow as pa

        return pa.table({})
    # Both names come from the fixed table above, never from the caller's text.
    return query_arrow(store, f"SELECT * FROM {table} WHERE run_id = ? ORDER BY {order}", [run_id])


def run_item_rows(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """A run's stored items in their position order (rows of ``items``).

    Args:
        store: The run store.
        run_id: Full run id.
    """
    return store.query("SELECT * FROM items WHERE run_id = ? ORDER BY position", [run_id])


def stored_samples(store: RunStore, run_id: str, agent: str) -> set[tuple[str, int]]:
    """The (item id, sample number) pairs an agent has a stored sample row for.

    Args:
        store: The run store.
        run_id: Full run id.
        agent: The agent (a resumed run asks about its mode's deciding agent).
    """
    rows = store.query(
        "SELECT item_id, sample FROM samples WHERE run_id = ? AND agent = ?", [run_id, agent]
    )
    return {(r["item_id"], r["sample"]) for r in rows}


def calls_with_error(store: RunStore, run_id: str, error: str) -> int:
    """How many of a run's model calls (attempts) ended with this error.

    Args:
        store: The run store.
        run_id: Full run id.
        error: The stored error text (``calls.error``), e.g. the timeout marker.
    """
    rows = store.query(
        "SELECT count(*) AS n FROM calls WHERE run_id = ? AND error = ?", [run_id, error]
    )
    return int(rows[0]["n"] or 0) if rows else 0


def gate_coercions(store: RunStore, run_id: str) -> dict[str, int]:
    """Per attribute, replies whose score was stored as null because the rubric's gate says
    null (empty for a store that predates the ``raw_value`` column).

    Args:
        store: The run store.
        run_id: Full run id.
    """
    if not store.has_column("judgments", "raw_value"):
        return {}
    rows = store.query(
        "SELECT attribute, count(*) AS n FROM judgments WHERE run_id = ? "
        "AND raw_value IS NOT NULL AND value IS NULL GROUP BY attribute ORDER BY attribute",
        [run_id],
    )
    return {r["attribute"]: int(r["n"]) for r in rows}
