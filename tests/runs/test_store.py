"""RunStore: owner-only files, schema, idempotent and atomic writes, run lookup."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from clinjudge.runs import RunStore, StoreError, now
from clinjudge.runs._store import SCHEMA_VERSION

TABLES = {"meta", "runs", "items", "samples", "judgments", "calls", "messages"}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _run_row(run_id: str) -> dict:
    return {"run_id": run_id, "status": "running", "created_at": now(), "n_items": 0}


def _judgment(item: str, attribute: str, value: float) -> dict:
    return {
        "run_id": "r1",
        "item_id": item,
        "sample": 1,
        "agent": "judge",
        "attribute": attribute,
        "value": value,
        "final": False,
        "status": "ok",
    }


def test_creates_owner_only_file_and_parent(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "store.duckdb"
    with RunStore(path):
        pass
    assert path.is_file()
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700


def test_wal_is_owner_only_even_in_a_shared_directory(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    path = shared / "store.duckdb"
    with RunStore(path) as store:
        store.con.execute("CHECKPOINT")  # drops the WAL; the next write creates a new one
        store.write_batch({"items": [{"run_id": "r", "item_id": "i", "summary": "PHI"}]})
        created = list(shared.iterdir())
        assert created, "expected the database (and a WAL) in the directory"
        for file in created:
            assert _mode(file) & 0o077 == 0, f"{file.name} is readable by others"
    assert _mode(path) == 0o600


def test_tables_exist(db_path: Path) -> None:
    with RunStore(db_path) as store:
        names = {
            r["table_name"] for r in store.query("SELECT table_name FROM information_schema.tables")
        }
        version = store.query("SELECT value FROM meta WHERE key = 'schema_version'")
    assert names >= TABLES
    assert version == [{"value": str(SCHEMA_VERSION)}]


def test_reopening_keeps_data(db_path: Path) -> None:
    with RunStore(db_path) as store:
        store.insert_rows("runs", [_run_row("r1")])
    with RunStore(db_path) as store:
        assert store.get_run("r1")["status"] == "running"


def test_insert_rows_is_idempotent(db_path: Path) -> None:
    with RunStore(db_path) as store:
        store.insert_rows("judgments", [_judgment("i1", "accurate", 4)])
        store.insert_rows("judgments", [_judgment("i1", "accurate", 2)])  # same key: ignored
        rows = store.query("SELECT value FROM judgments")
    assert rows == [{"value": 4.0}]


def test_write_batch_is_idempotent(db_path: Path) -> None:
    batch = {
        "runs": [_run_row("r1")],
        "judgments": [_judgment("i1", "accurate", 4), _judgment("i1", "thorough", 3)],
        "samples": [
            {"run_id": "r1", "item_id": "i1", "sample": 1, "agent": "judge", "status": "ok"}
        ],
    }
    with RunStore(db_path) as store:
        store.write_batch(batch)
        store.write_batch(batch)
        counts = {
            t: store.query(f"SELECT count(*) AS n FROM {t}")[0]["n"]
            for t in ("runs", "judgments", "samples")
        }
    assert counts == {"runs": 1, "judgments": 2, "samples": 1}


def test_insert_of_nothing_is_a_no_op(db_path: Path) -> None:
    with RunStore(db_path) as store:
        store.insert_rows("judgments", [])
        store.write_batch({"judgments": [], "samples": []})
        assert store.query("SELECT count(*) AS n FROM judgments") == [{"n": 0}]


def test_write_batch_rolls_back_wholly(db_path: Path) -> None:
    with RunStore(db_path) as store:
        with pytest.raises(Exception, match="no_such_table"):
            store.write_batch(
                {
                    "runs": [_run_row("r1")],
                    "judgments": [_judgment("i1", "accurate", 4)],
                    "no_such_table": [{"x": 1}],
                }
            )
        assert store.query("SELECT count(*) AS n FROM runs") == [{"n": 0}]
        assert store.query("SELECT count(*) AS n FROM judgments") == [{"n": 0}]
        # The connection is usable afterwards (no transaction left open).
        store.write_batch({"runs": [_run_row("r2")]})
        assert store.get_run("r2")["run_id"] == "r2"


def test_write_batch_rolls_back_on_bad_value(db_path: Path) -> None:
    with RunStore(db_path) as store:
        bad = _judgment("i2", "accurate", 4) | {"value": "not a number"}
        with pytest.raises(Exception):  # noqa: B017 - any DuckDB/Arrow conversion error
            store.write_batch(
                {"runs": [_run_row("r1")], "judgments": [_judgment("i1", "accurate", 4), bad]}
            )
        assert store.query("SELECT count(*) AS n FROM runs") == [{"n": 0}]
        assert store.query("SELECT count(*) AS n FROM judgments") == [{"n": 0}]


def test_get_run_by_unique_prefix(db_path: Path) -> None:
    with RunStore(db_path) as store:
        store.insert_rows(
            "runs",
            [_run_row("20250101-aaa111"), _run_row("20250101-bbb222"), _run_row("20250202-ccc333")],
        )
        assert store.get_run("20250101-b")["run_id"] == "20250101-bbb222"
        assert store.get_run("20250202")["run_id"] == "20250202-ccc333"
        assert store.get_run("20250101-aaa111")["run_id"] == "20250101-aaa111"
        with pytest.raises(StoreError, match="ambiguous"):
            store.get_run("20250101")
        with pytest.raises(StoreError, match="no run 'zzz'"):
            store.get_run("zzz")


def test_get_run_decodes_json_columns(db_path: Path) -> None:
    with RunStore(db_path) as store:
        store.insert_rows(
            "runs",
            [_run_row("r1") | {"models": '{"judge": "mock/judge"}', "config": '{"samples": 3}'}],
        )
        run = store.get_run("r1")
    assert run["models"] == {"judge": "mock/judge"}
    assert run["config"] == {"samples": 3}


def test_set_run_status(db_path: Path) -> None:
    with RunStore(db_path) as store:
        store.insert_rows("runs", [_run_row("r1")])
        store.set_run_status("r1", "interrupted")
        assert store.get_run("r1")["finished_at"] is None
        store.set_run_status("r1", "completed", finished=True)
        run = store.get_run("r1")
    assert run["status"] == "completed"
    assert run["finished_at"] is not None


def test_read_only_on_missing_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "missing.duckdb"
    with pytest.raises(StoreError, match="no such database"):
        RunStore(path, read_only=True)
    assert not path.exists()
    assert not path.parent.exists()


def test_read_only_cannot_write(db_path: Path) -> None:
    with RunStore(db_path) as store:
        store.insert_rows("runs", [_run_row("r1")])
    with RunStore(db_path, read_only=True) as store:
        assert store.get_run("r1")["run_id"] == "r1"
        with pytest.raises(Exception):  # noqa: B017 - DuckDB refuses writes
            store.insert_rows("runs", [_run_row("r2")])


def test_unopenable_file_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "not-a-db.duckdb"
    path.write_text("this is not a duckdb file, just text " * 200)
    with pytest.raises(StoreError, match="cannot open database"):
        RunStore(path)
