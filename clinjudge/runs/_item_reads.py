"""A run's items read and written a chunk at a time, so that a run's memory does not grow with
its number of items (#27): the runner takes its items from here as its work proceeds, and run
creation writes them chunk by chunk inside one transaction.
"""

from __future__ import annotations

from collections.abc import Callable

from clinjudge.rubrics import Item
from clinjudge.runs._rows import ITEM_COLUMNS, item_from_columns
from clinjudge.runs._store import RunStore, WriteRows


def run_item_keys(store: RunStore, run_id: str) -> tuple[list[str], list[int]]:
    """A run's item ids and positions, in position order (what is small per item).

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.con.execute(
        "SELECT item_id, position FROM items WHERE run_id = ? ORDER BY position", [run_id]
    ).fetchall()
    return [r[0] for r in rows], [int(r[1]) for r in rows]


class StoredItemReader:
    """Reads a run's items, a chunk at a time, on a connection of its own.

    Its own connection (a DuckDB cursor) lets the event loop read items while the runner's
    writer thread writes batches on the store's connection. Close it when done: an open
    cursor keeps the database open.

    Args:
        store: The run store.
        run_id: Full run id.
    """

    def __init__(self, store: RunStore, run_id: str):
        self.run_id = run_id
        self._con = store.con.cursor()

    def read(self, start: int, count: int, last: int | None = None) -> list[Item]:
        """Up to ``count`` items from position ``start`` on, in position order.

        Args:
            start: The first position to read (the item there, or the next one).
            count: How many items at most.
            last: The last position to read, when the caller knows it (the positions of a
                run's items are held): DuckDB then reads that range only, not every row from
                ``start`` to the run's end (~40% less CPU per item at 16,000 items).
        """
        # Only the columns an item is built from (not the flags' JSON), in a fixed order.
        if last is None:
            rows = self._con.execute(
                f"SELECT {ITEM_COLUMNS} FROM items WHERE run_id = ? AND position >= ? "
                "ORDER BY position LIMIT ?",
                [self.run_id, start, count],
            ).fetchall()
        else:
            rows = self._con.execute(
                f"SELECT {ITEM_COLUMNS} FROM items WHERE run_id = ? AND position BETWEEN ? AND ? "
                "ORDER BY position LIMIT ?",
                [self.run_id, start, last, count],
            ).fetchall()
        return [item_from_columns(*row) for row in rows]

    def close(self) -> None:
        """Close its connection (the store's stays open)."""
        self._con.close()

    def __enter__(self) -> StoredItemReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_in_one_transaction(store: RunStore, produce: Callable[[WriteRows], None]) -> None:
    """:meth:`RunStore.write_rows` (one transaction, rows whose key exists ignored, ``produce``
    run again when it must) with DuckDB's cache bounded meanwhile: measured on run creation,
    the bound halves the memory growth per item; a transaction that does not fit lifts it.

    Args:
        store: The run store.
        produce: Called with the write function; writes every row.
    """
    with store.bounded_cache():
        store.write_rows(produce)
