"""Opening the run store: schema versions, hostile files and names, no extension downloads.

Every case ends in one line naming the file (``StoreError`` in the library, exit 1 and no
traceback in the CLI), never a half-opened store:

* a store recording a newer schema version (written by a newer clinjudge, or altered) is
  refused, read-only too, with both versions named; before, it was written into silently;
* an older store (version 1: meta says so, or no meta table at all, missing columns added
  since) is migrated when opened for writing, and the new version is recorded;
* an SQLite file, a truncated DuckDB file, ``:memory:``, a folder, a path under a file;
* DuckDB never installs or loads extensions on its own (an SQLite file used to make it
  download ``sqlite_scanner``): the settings are checked on the store's connection.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from clinjudge._util.offline import connect_duckdb
from clinjudge.cli import app
from clinjudge.runs import RunStore, StoreError
from clinjudge.runs._store import SCHEMA_VERSION
from tests.factories import make_items, write_jsonl


def _version(db: Path) -> str:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        con.close()


def _cli_fails_in_one_line(db: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(cwd)
    result = CliRunner().invoke(app, ["runs", "list", "--db", db])
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    return result.output


@pytest.mark.parametrize("read_only", [False, True])
def test_newer_schema_is_refused_naming_both_versions(tmp_path: Path, read_only: bool) -> None:
    db = tmp_path / "runs.duckdb"
    RunStore(db).close()
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])
    con.close()
    with pytest.raises(StoreError) as caught:
        RunStore(db, read_only=read_only)
    message = str(caught.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in message and f"{SCHEMA_VERSION}" in message
    assert _version(db) == str(SCHEMA_VERSION + 1)  # not touched


def test_unreadable_schema_version_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    RunStore(db).close()
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = 'two' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(StoreError, match="schema version unreadable"):
        RunStore(db)


@pytest.mark.parametrize("drop_meta", [False, True])
def test_older_store_is_migrated_and_the_version_recorded(tmp_path: Path, drop_meta: bool) -> None:
    db = tmp_path / "runs.duckdb"
    RunStore(db).close()
    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE runs DROP COLUMN status_reason")
    con.execute("ALTER TABLE calls DROP COLUMN cached")
    con.execute("DROP TABLE response_cache")
    if drop_meta:
        con.execute("DROP TABLE meta")
    else:
        con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    with RunStore(db) as store:
        assert store.has_column("runs", "status_reason")
        assert store.has_column("calls", "cached")
        assert store.has_table("response_cache")
    assert _version(db) == str(SCHEMA_VERSION)


def test_new_store_records_the_current_version(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    RunStore(db).close()
    assert _version(db) == str(SCHEMA_VERSION)


def test_connections_never_fetch_extensions(tmp_path: Path) -> None:
    query = (
        "SELECT current_setting('autoinstall_known_extensions'), "
        "current_setting('autoload_known_extensions')"
    )
    with RunStore(tmp_path / "runs.duckdb") as store:
        assert store.con.execute(query).fetchone() == (False, False)
    con = connect_duckdb()
    assert con.execute(query).fetchone() == (False, False)
    con.close()


def test_sqlite_file_is_not_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "lite.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="not a DuckDB database"):
        RunStore(db)
    assert "not a DuckDB database" in _cli_fails_in_one_line(str(db), tmp_path, monkeypatch)


def test_truncated_store_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = tmp_path / "good.duckdb"
    RunStore(good).close()
    data = good.read_bytes()
    for cut in (100, len(data) // 2):
        db = tmp_path / f"cut{cut}.duckdb"
        db.write_bytes(data[:cut])
        with pytest.raises(StoreError, match=str(db.name)):
            RunStore(db)
        _cli_fails_in_one_line(str(db), tmp_path, monkeypatch)


@pytest.mark.parametrize("name", [":memory:", "folder", "file/runs.duckdb"])
def test_names_that_cannot_hold_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match=name.split("/")[0]):
        RunStore(name)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    result = CliRunner().invoke(
        app, ["run", "--data", str(data), "--model", "mock/judge", "--db", name]
    )
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert name.split("/")[0] in result.output


def test_remote_looking_name_is_a_local_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    RunStore("md:runs.duckdb").close()  # DuckDB alone would dial MotherDuck
    assert (tmp_path / "md:runs.duckdb").is_file()
