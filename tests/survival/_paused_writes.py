"""`judge` with a pause inside a DuckDB write transaction, so a test can SIGKILL it there.

Usage: ``python -m tests.survival._paused_writes MARKER WHICH judge-args...`` where WHICH is
``samples`` (pause in the first batch of finished samples, after its calls, messages, samples
and judgments rows are inserted but before COMMIT) or ``final`` (pause in the write of the final
per-item scores). The process writes its pid to MARKER when it pauses.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from clinjudge.cli import main
from clinjudge.runs import RunStore


def _install(marker: Path, which: str) -> None:
    original = RunStore.insert_rows

    def insert_rows(self: RunStore, table: str, rows: Any) -> None:
        original(self, table, rows)
        if table != "judgments" or not rows or marker.exists():
            return
        if bool(rows[0].get("final")) == (which == "final"):
            assert self.con.execute("SELECT 1").fetchone()  # still inside the transaction
            marker.write_text(str(os.getpid()))
            time.sleep(120)

    RunStore.insert_rows = insert_rows  # type: ignore[method-assign]


if __name__ == "__main__":
    _install(Path(sys.argv[1]), sys.argv[2])
    sys.argv = ["judge", *sys.argv[3:]]
    main()
