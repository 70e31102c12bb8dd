"""`judge` with a pause inside a DuckDB write transaction, so a test can SIGKILL it there.

Usage: ``python -m tests.survival._paused_writes MARKER WHICH judge-args...`` where WHICH is
``samples`` (pause in the first batch of finished samples, after its calls, messages, samples
and judgments rows are inserted but before COMMIT) or ``final`` (pause in the write of the final
per-item scores: DuckDB computes and inserts them in one statement, which runs here inside a
transaction left open, as if the process died before that statement committed). The process
writes its pid to MARKER when it pauses.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from clinjudge.cli import main
from clinjudge.runs import RunStore, _aggregate


def _pause(store: RunStore, marker: Path) -> None:
    assert store.con.execute("SELECT 1").fetchone()  # still inside the transaction
    marker.write_text(str(os.getpid()))
    time.sleep(120)


def _install_final(marker: Path) -> None:
    original = _aggregate._statement

    def statement(store: RunStore, sql: str, params: dict[str, Any]) -> None:
        if "INSERT INTO judgments" not in sql or marker.exists():
            original(store, sql, params)
            return
        store.con.execute("BEGIN TRANSACTION")
        original(store, sql, params)
        finals = store.con.execute("SELECT count(*) FROM judgments WHERE final").fetchone()
        assert finals and finals[0] > 0  # the final rows are in, not committed
        _pause(store, marker)

    _aggregate._statement = statement  # type: ignore[assignment]


def _install(marker: Path, which: str) -> None:
    if which == "final":
        _install_final(marker)
        return
    original = RunStore.insert_rows

    def insert_rows(self: RunStore, table: str, rows: Any) -> None:
        original(self, table, rows)
        if table != "judgments" or not rows or marker.exists():
            return
        if not rows[0].get("final"):
            _pause(self, marker)

    RunStore.insert_rows = insert_rows  # type: ignore[method-assign]


if __name__ == "__main__":
    _install(Path(sys.argv[1]), sys.argv[2])
    sys.argv = ["judge", *sys.argv[3:]]
    main()
