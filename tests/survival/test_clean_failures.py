"""Failures that end cleanly: one line naming the file, a non-zero exit, nothing half-written.

* A store cut short inside its body (the header intact, so it opens) makes every command that
  reads it (`runs list`, `runs show`, `export`, `run`) print "database file X is damaged or cut
  short" and exit 2; the Python API raises ``StoreError``. Before, DuckDB's "Could not read
  enough bytes" came out as a traceback.
* A full disk while writing an export or a report says "disk full" and names the file; the
  output is absent or the previous one unchanged. Before, a traceback (for a report whose
  store was on the full disk, DuckDB's "cannot rollback - no transaction is active").
* `judge db merge` checks every input (DuckDB, a run database, a known schema version) before
  it writes, and merges in one transaction: a bad or damaged input leaves the output as it was.
  Replies cached under the same key by disjoint shards are not conflicts (`--strict`).
* `judge export --out FOLDER` gives the same message with or without `--force`.
* The Python API refuses wrong arguments with a ``UserError`` naming the parameter.

The tests that need a really full disk mount a small tmpfs (root, as in CI); the others inject
the error (``ENOSPC``) where the file is written.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

import clinjudge
from clinjudge.cli import app
from clinjudge.errors import ClinJudgeError, UserError
from clinjudge.runs import RunStore, StoreError, export_run
from tests.cli._helpers import WIDE
from tests.factories import make_items, small_tmpfs, write_jsonl
from tests.ratings_data import ratings_matching, write_ratings

# --- helpers -----------------------------------------------------------------------------------


def _judge(*args: str, cwd: Path | None = None) -> Any:
    """`judge ARGS` in-process; exceptions are caught (a traceback is a failed test)."""
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(app, list(args), env=WIDE)
    finally:
        os.chdir(old)


def _one_line(result: Any, *needles: str) -> str:
    """The single ``error:`` line of a command that failed cleanly with exit 2."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}"
    )
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    assert result.exit_code == 2, result.stderr
    return errors[0]


def _tables(db: Path) -> dict[str, list[str]]:
    """Every row of every table, to check that a database was left unchanged."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        return {
            name: sorted(repr(row) for row in con.execute(f'SELECT * FROM "{name}"').fetchall())
            for name in names
        }
    finally:
        con.close()


def _cut(source: Path, dest: Path, fraction: float) -> Path:
    data = source.read_bytes()
    dest.write_bytes(data[: int(len(data) * fraction)])
    return dest


def _opens(db: Path) -> bool:
    try:
        RunStore(db, read_only=True).close()
    except StoreError:
        return False
    return True


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A store holding one finished 30-item run (mock provider): (items, database, run id)."""
    folder = tmp_path_factory.mktemp("judged")
    items = write_jsonl(folder / "items.jsonl", make_items(30))
    db = folder / "runs.duckdb"
    result = _judge("run", "--data", str(items), "--model", "mock/judge", "--db", str(db),
                    "--no-progress")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return items, db, result.stdout.strip()


@pytest.fixture
def store(judged: tuple[Path, Path, str], tmp_path: Path) -> tuple[Path, Path, str]:
    """A private copy of the judged store."""
    items, db, run_id = judged
    copy = tmp_path / "runs.duckdb"
    shutil.copyfile(db, copy)
    return items, copy, run_id


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs (needs root, as in CI) that the test fills with ``_fill``."""
    with small_tmpfs(tmp_path, "8m") as mount:
        yield mount


def _fill(folder: Path, leave: int = 8 * 1024) -> None:
    """Fill the filesystem of ``folder`` but ``leave`` bytes."""
    free = shutil.disk_usage(folder).free
    with open(folder / "filler", "wb") as handle:
        handle.write(b"\0" * max(free - leave, 0))


class _FailingConnection:
    """A DuckDB connection whose statements starting with ``fail_on`` fail as DuckDB fails on a
    full disk (a failed COMMIT has already rolled back); everything else is passed through."""

    def __init__(self, con: duckdb.DuckDBPyConnection, fail_on: str, error: duckdb.Error):
        self._con = con
        self._fail_on = fail_on
        self._error = error

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.lstrip().upper().startswith(self._fail_on):
            if self._fail_on == "COMMIT":
                self._con.execute("ROLLBACK")
            raise self._error
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


# --- finding 6: a store cut short, a full disk ------------------------------------------------

_COMMANDS = {
    "runs list": lambda db, items, rid: ["runs", "list", "--db", db],
    "runs show": lambda db, items, rid: ["runs", "show", rid, "--db", db],
    "export": lambda db, items, rid: ["export", rid, "--out", f"{db}.csv", "--db", db],
    "run": lambda db, items, rid: ["run", "--data", items, "--model", "mock/judge", "--db", db,
                                   "--no-progress"],
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(_COMMANDS))
def test_store_cut_short_in_its_body_is_one_line_naming_the_file(
    judged: tuple[Path, Path, str], tmp_path: Path, command: str
) -> None:
    items, good, run_id = judged
    failed_after_opening = 0
    for fraction in (0.6, 0.8, 0.9):
        db = _cut(good, tmp_path / f"cut{int(fraction * 100)}.duckdb", fraction)
        opens = _opens(db)
        result = _judge(*_COMMANDS[command](str(db), str(items), run_id))
        if result.exit_code == 0:  # the part it read was all there
            assert opens
            continue
        if command == "run" and opens and result.exit_code == 1:
            # The run's own writes failed: the run stops, as for any store that stops taking
            # writes (docs/reliability.md, 2a), with the reason in one line.
            assert "Traceback" not in result.output and "cut short" not in result.stderr
            assert "Could not read enough bytes" in result.stderr
            failed_after_opening += 1
            continue
        _one_line(result, f"database file {db} is damaged or cut short")
        failed_after_opening += opens
    assert failed_after_opening, "no cut made a query fail after the store opened"


def test_api_reports_a_store_cut_short_as_a_store_error(
    judged: tuple[Path, Path, str], tmp_path: Path
) -> None:
    _, good, run_id = judged
    db = _cut(good, tmp_path / "cut.duckdb", 0.8)
    assert _opens(db)
    with pytest.raises(StoreError, match=r"database file .*cut\.duckdb is damaged or cut short"):
        clinjudge.load_run(run_id, db=db).calls()


def test_failed_commit_on_a_full_disk_says_disk_full_not_cannot_rollback(
    store: tuple[Path, Path, str],
) -> None:
    _, db, _ = store
    before = _tables(db)
    full = duckdb.TransactionException(
        f'TransactionContext Error: Failed to commit: Could not write file "{db.absolute()}.wal":'
        " No space left on device"
    )
    with pytest.raises(StoreError) as caught, RunStore(db) as opened:
        opened.con = _FailingConnection(opened.con, "COMMIT", full)  # type: ignore[assignment]
        opened.upsert_rows("human_ratings", [{"item_id": "x", "rater_id": "r", "attribute": "a"}])
    message = str(caught.value)
    assert message.startswith(f"{db}: disk full (no space left on device)")
    assert "cannot rollback" not in message
    assert _tables(db) == before


def test_export_on_a_full_disk_writes_nothing_and_keeps_the_old_file(
    store: tuple[Path, Path, str], tmp_path: Path
) -> None:
    _, db, run_id = store
    out = tmp_path / "out" / "judgments.csv"
    full = duckdb.IOException(
        'IO Error: Async write failed for range [offset=0, size=4096]: {"exception_type":"IO",'
        f'"exception_message":"Could not write file \\"{out.parent}/.judgments.csv.partial\\": '
        'No space left on device","errno":"28"}'
    )
    for existing in (None, "old,export\n"):
        if existing is not None:
            out.write_text(existing)
        with RunStore(db, read_only=True) as opened:
            opened.con = _FailingConnection(opened.con, "COPY", full)  # type: ignore[assignment]
            with pytest.raises(StoreError) as caught:
                export_run(opened, run_id, out, "csv")
        assert str(caught.value).startswith(f"{out}: disk full (no space left on device)")
        assert sorted(p.name for p in out.parent.iterdir()) == (
            ["judgments.csv"] if existing else []
        )
        if existing is not None:
            assert out.read_text() == existing
            assert "unchanged" in str(caught.value)


def test_report_on_a_full_disk_writes_neither_file_and_keeps_the_old_report(
    store: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, db, run_id = store
    out = tmp_path / "report"
    assert _judge("report", run_id, "--db", str(db), "--out", str(out)).exit_code == 0
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    real_fdopen = os.fdopen
    opened: list[int] = []

    class FullFile:
        """The second report file (report.md) meets a full disk."""

        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __enter__(self) -> FullFile:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def write(self, text: str) -> int:
            if len(opened) == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.handle.write(text)

    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        opened.append(fd)
        return FullFile(real_fdopen(fd, *args, **kwargs))

    monkeypatch.setattr(os, "fdopen", fdopen)
    result = _judge("report", run_id, "--db", str(db), "--out", str(out))
    monkeypatch.undo()
    _one_line(result, f"{out / 'report.md'}: disk full (no space left on device)")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old  # the old report, whole

    fresh = tmp_path / "fresh"
    opened.clear()
    monkeypatch.setattr(os, "fdopen", fdopen)
    result = _judge("report", run_id, "--db", str(db), "--out", str(fresh))
    monkeypatch.undo()
    _one_line(result, "disk full")
    assert not fresh.exists()  # the folder it made is gone again


def test_export_and_report_on_a_really_full_disk(
    store: tuple[Path, Path, str], full_disk: Path
) -> None:
    _, db, run_id = store
    _fill(full_disk)
    out = full_disk / "judgments.jsonl"
    result = _judge("export", run_id, "--db", str(db), "--out", str(out))
    _one_line(result, f"{out}: disk full")
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]

    result = _judge("report", run_id, "--db", str(db), "--out", str(full_disk / "report"))
    _one_line(result, "disk full")
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]


def test_report_whose_store_is_on_a_full_disk_says_disk_full(
    store: tuple[Path, Path, str], full_disk: Path, tmp_path: Path
) -> None:
    # `judge report` keeps its agreement analysis in the store: the COMMIT meets the full disk.
    _, db, run_id = store
    ratings = write_ratings(tmp_path / "ratings.jsonl", ratings_matching(db, run_id))
    assert _judge("ratings", "import", str(ratings), "--db", str(db)).exit_code == 0
    on_full = full_disk / "runs.duckdb"
    shutil.copyfile(db, on_full)
    _fill(full_disk, leave=0)
    result = _judge("report", run_id, "--db", str(on_full), "--out", str(tmp_path / "report"))
    line = _one_line(result, f"{on_full}: disk full")
    assert "rollback" not in line
    assert not (tmp_path / "report").exists()


# --- finding 9: judge db merge ---------------------------------------------------------------


def _newer_schema(db: Path) -> Path:
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    return db


def _sqlite(db: Path) -> Path:
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE runs (run_id TEXT)")
    con.commit()
    con.close()
    return db


def _not_a_store(db: Path) -> Path:
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE notes (text VARCHAR)")
    con.close()
    return db


_BAD_INPUTS = {
    "newer schema": (lambda good, bad: _newer_schema(shutil.copyfile(good, bad)),
                     "schema version 99"),
    "sqlite": (lambda good, bad: _sqlite(bad), "not a DuckDB database"),
    "not a store": (lambda good, bad: _not_a_store(bad), "not a clinjudge run database"),
    "cut short": (lambda good, bad: _cut(good, bad, 0.8), "is damaged or cut short"),
}  # fmt: skip


@pytest.mark.parametrize("target_exists", [False, True], ids=["new output", "existing output"])
@pytest.mark.parametrize("kind", sorted(_BAD_INPUTS))
def test_merge_checks_every_input_before_writing(
    judged: tuple[Path, Path, str], tmp_path: Path, kind: str, target_exists: bool
) -> None:
    _, good, _ = judged
    make, needle = _BAD_INPUTS[kind]
    bad = make(good, tmp_path / "bad.duckdb")
    into = tmp_path / "merged.duckdb"
    other = tmp_path / "other.duckdb"
    RunStore(other).close()  # an empty, valid store
    if target_exists:
        shutil.copyfile(other, into)
    before = _tables(into) if target_exists else None
    # The bad input comes last: nothing of the good one may be merged before it fails.
    result = _judge("db", "merge", str(good), str(bad), "--into", str(into))
    _one_line(result, "bad.duckdb", needle)
    if target_exists:
        assert _tables(into) == before
    else:
        assert not into.exists() and not Path(f"{into}.wal").exists()


def _cache_row(db: Path, key: str, run_id: str, text: str) -> None:
    with RunStore(db) as opened:
        row = {
            "key": key,
            "model": "openai/local-judge",
            "created_at": f"2026-01-0{len(run_id) % 9 + 1} 00:00:00+00",
            "response": json.dumps({"text": text}),
            "run_id": run_id,  # ignored where the column does not exist
        }
        opened.insert_rows("response_cache", [row])


def test_strict_merge_keeps_one_cached_reply_per_key(tmp_path: Path) -> None:
    # Disjoint shards that sent the same request each cached a reply under the same key.
    shards = [tmp_path / "s1.duckdb", tmp_path / "s2.duckdb"]
    _cache_row(shards[0], "k-same", "run-a-1", "reply of shard 1")
    _cache_row(shards[1], "k-same", "run-b-22", "reply of shard 2")
    _cache_row(shards[1], "k-other", "run-b-22", "another request")
    into = tmp_path / "merged.duckdb"
    result = _judge("db", "merge", *map(str, shards), "--into", str(into), "--strict")
    assert result.exit_code == 0, result.stderr
    assert "conflicting" not in result.stderr
    con = duckdb.connect(str(into), read_only=True)
    rows = con.execute("SELECT key, response->>'text' FROM response_cache ORDER BY key").fetchall()
    con.close()
    assert rows == [("k-other", "another request"), ("k-same", "reply of shard 1")]


# --- finding 10: export to a folder, the Python API -------------------------------------------


@pytest.mark.parametrize("name", ["results", "results.csv"])
def test_export_to_a_folder_is_one_message_with_or_without_force(
    store: tuple[Path, Path, str], tmp_path: Path, name: str
) -> None:
    _, db, run_id = store
    folder = tmp_path / name
    folder.mkdir()
    lines = {
        _one_line(
            _judge("export", run_id, "--db", str(db), "--out", str(folder), *force),
            f"{folder}: is a folder",
            "name a file path",
        )
        for force in ((), ("--force",))
    }
    assert len(lines) == 1 and "pass --force" not in lines.pop()
    assert list(folder.iterdir()) == []


def _vendor_items(path: Path) -> Path:
    rows = []
    for vendor in ("acme", "zeta"):
        for item in make_items(3):
            rows.append({**item.model_dump(exclude_none=True), "vendor": vendor})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_api_takes_one_path_where_a_list_belongs(tmp_path: Path) -> None:
    data = _vendor_items(tmp_path / "vendors.jsonl")
    result = clinjudge.audit(
        str(data), model="mock/judge", db=tmp_path / "a.duckdb", n_boot=20, rules="accurate<=2"
    )
    assert result.vendors == ["acme", "zeta"] and result.flag_rules == ["accurate<=2"]
    with pytest.raises(ClinJudgeError) as caught:
        clinjudge.audit(str(tmp_path / "a.jsonl"), model="mock/judge", db=tmp_path / "b.duckdb")
    assert str(caught.value).count("no such file") == 1 and "a.jsonl" in str(caught.value)


def _refused(call: Any, setting: str) -> str:
    with pytest.raises(UserError) as caught:
        call()
    assert caught.value.setting == setting, caught.value
    return str(caught.value)


def test_api_refuses_wrong_arguments_naming_the_parameter(
    store: tuple[Path, Path, str], tmp_path: Path
) -> None:
    _, db, run_id = store
    run = clinjudge.load_run(run_id, db=db)
    message = _refused(lambda: clinjudge.load_run(5, db=db), "run_id")  # type: ignore[arg-type]
    assert message == "run_id: expected a non-empty string, got 5"
    _refused(lambda: run.judgments(final="yes"), "final")  # type: ignore[arg-type]
    _refused(lambda: clinjudge.compare([run_id], db=db, seed=-1), "seed")
    _refused(lambda: clinjudge.compare([run_id], db=db, n_boot=0), "n_boot")
    _refused(lambda: run.agreement(n_boot=2.5), "n_boot")  # type: ignore[arg-type]
    _refused(lambda: run.agreement(seed=True), "seed")
    _refused(lambda: clinjudge.resume(run_id, db=db, max_cost=-1.0), "max_cost")
    _refused(lambda: clinjudge.load_run(run_id, db=3), "db")  # type: ignore[arg-type]
    assert clinjudge.compare(run_id, db=db, n_boot=5).rows[0].run_id == run_id


def test_resume_with_a_missing_database_creates_nothing(
    store: tuple[Path, Path, str], tmp_path: Path
) -> None:
    _, _, run_id = store
    missing = tmp_path / "nowhere" / "runs.duckdb"
    message = _refused(lambda: clinjudge.resume(run_id, db=missing), "db")
    assert message == f"no database at {missing}"
    assert not missing.parent.exists()
    _refused(lambda: clinjudge.resume(run_id, db=tmp_path / "x.duckdb"), "db")
    assert not (tmp_path / "x.duckdb").exists()
