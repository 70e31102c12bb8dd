"""While a run writes (``RunStore.bounded_cache``), a batch leaves out the shared texts the
block's own committed transactions stored (issue 27: each statement costs DuckDB a millisecond
or two), and only those: a text whose transaction was rolled back, that another store object
wrote, or that was stored before the block (its run since deleted, perhaps) goes in again.
Whatever was left out, every transcript reads back whole through the ``messages`` view."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from clinjudge.runs import RunStore, delete_run
from tests.runs.test_message_texts import message_rows

SYSTEM = "You grade clinical summaries. " * 300


def _expected(run_id: str, system: str, items: range) -> list[tuple[str, int, str, str]]:
    return [
        (f"i{n}", seq, role, text)
        for n in items
        for seq, (role, text) in enumerate(
            (("system", system), ("user", f"item {n}"), ("assistant", "{}"))
        )
    ]


def _read(store: RunStore, run_id: str) -> list[tuple[str, int, str, str]]:
    rows = store.con.execute(
        "SELECT item_id, seq, role, content FROM messages WHERE run_id = ? ORDER BY item_id, seq",
        [run_id],
    ).fetchall()
    return [tuple(row) for row in rows]


@pytest.fixture
def text_writes(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The text keys of every ``message_texts`` insert the store makes."""
    writes: list[list[str]] = []
    real = RunStore._insert_columns

    def spy(self: RunStore, table: str, columns: dict[str, list[Any]], ignore: bool) -> None:
        if table == "message_texts" and columns["text_id"]:
            writes.append(list(columns["run_id"]))
        real(self, table, columns, ignore)

    monkeypatch.setattr(RunStore, "_insert_columns", spy)
    return writes


def test_committed_texts_are_not_written_again(tmp_path: Path, text_writes: list) -> None:
    with RunStore(tmp_path / "runs.duckdb") as store, store.bounded_cache():
        for start in range(0, 12, 3):
            store.write_batch({"messages": message_rows("r", SYSTEM, range(start, start + 3))})
        assert text_writes == [["r"]]  # the first batch only
        # Another run's copy of the text, and another text, are new.
        store.write_batch({"messages": message_rows("r2", SYSTEM, range(2))})
        store.write_batch({"messages": message_rows("r", SYSTEM + "v2", range(12, 13))})
        assert text_writes == [["r"], ["r2"], ["r"]]
        # A batch written from another thread (as the runner's writer does) reads it the same.
        worker = threading.Thread(
            target=store.write_batch, args=({"messages": message_rows("r", SYSTEM, range(13, 15))},)
        )
        worker.start()
        worker.join()
        assert len(text_writes) == 3
        assert _read(store, "r") == sorted(
            _expected("r", SYSTEM, range(12))
            + _expected("r", SYSTEM + "v2", range(12, 13))
            + _expected("r", SYSTEM, range(13, 15))
        )
        assert _read(store, "r2") == _expected("r2", SYSTEM, range(2))
        assert store.query("SELECT count(*) AS n FROM message_texts") == [{"n": 3}]


def test_a_rolled_back_text_is_written_again(tmp_path: Path, text_writes: list) -> None:
    bad = {"run_id": "r", "item_id": "x", "sample": "not a number", "agent": "a"}
    with RunStore(tmp_path / "runs.duckdb") as store, store.bounded_cache():
        # The texts go in first, then the batch fails: nothing of it stays, its text included.
        with pytest.raises(Exception):  # noqa: B017 - DuckDB's conversion error
            store.write_batch({"messages": message_rows("r", SYSTEM, range(2)), "samples": [bad]})
        assert store.query("SELECT count(*) AS n FROM message_texts") == [{"n": 0}]
        store.write_batch({"messages": message_rows("r", SYSTEM, range(2, 4))})
        assert text_writes == [["r"], ["r"]]
        assert _read(store, "r") == _expected("r", SYSTEM, range(2, 4))


def test_texts_of_a_batch_written_again_after_a_key_conflict(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    with RunStore(path) as store:
        store.write_batch({"messages": message_rows("r", SYSTEM, range(2))})
    with RunStore(path) as store, store.bounded_cache():  # a resumed run: it knows no texts
        # Item 1 exists: the plain INSERT fails, the batch goes in again ignoring it.
        store.write_batch({"messages": message_rows("r", SYSTEM, range(1, 4))})
        store.write_batch({"messages": message_rows("r", SYSTEM, range(4, 5))})
        assert _read(store, "r") == _expected("r", SYSTEM, range(5))
        assert store.query("SELECT count(*) AS n FROM message_texts") == [{"n": 1}]


def test_texts_are_remembered_only_within_a_write_block(tmp_path: Path, text_writes: list) -> None:
    run_row = {"run_id": "r", "status": "completed"}
    with RunStore(tmp_path / "runs.duckdb") as store:
        # Outside a block every batch writes its texts (ignored when stored).
        store.write_batch({"messages": message_rows("r", SYSTEM, range(2))})
        store.write_batch({"messages": message_rows("r", SYSTEM, range(2, 4))})
        assert text_writes == [["r"], ["r"]]
        with store.bounded_cache():
            with store.bounded_cache():  # nested: the outer block decides
                store.write_batch({"messages": message_rows("r", SYSTEM, range(4, 5))})
            store.write_batch({"messages": message_rows("r", SYSTEM, range(5, 6))})
        assert text_writes == [["r"], ["r"], ["r"]]
        # The run is deleted and written again under the same id by the same store object:
        # its text must go in again, or its rows would name a missing text.
        store.write_batch({"runs": [run_row]})
        delete_run(store, "r")
        assert store.query("SELECT count(*) AS n FROM message_texts") == [{"n": 0}]
        with store.bounded_cache():
            store.write_batch({"runs": [run_row], "messages": message_rows("r", SYSTEM, range(3))})
        assert _read(store, "r") == _expected("r", SYSTEM, range(3))
