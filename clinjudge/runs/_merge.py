"""Merge run databases (e.g. the shards of ``judge run --shard i/n``) into one.

Every table of every input is copied by its primary key with ``INSERT OR IGNORE``, so merging
the same file twice adds nothing. A row whose key already exists with different content is a
conflict: it is counted and reported, and the first-seen row is kept. Cached replies
(``response_cache``) are the exception: shards that sent the same request each cached a reply
under the same key (a hash of the request), and any one of them will do, so equal keys are kept
once and are never conflicts. Transcript messages are copied as the rows their ``messages``
view (or, in stores before schema version 6, table) reads, and stored in the output's layout
(system messages once per run); ``meta`` (each store's own schema version) is not copied.
The ``runs`` rows of one run id coming from several shards are
combined into one row; the shards themselves are listed in the ``run_shards`` table (run,
shard, status, items, times), so a later merge still knows which shards the run has and whether
all of them completed.

Every input is checked (a DuckDB file, a run database, a schema version this clinjudge reads)
before the output is opened, and all inputs are merged in one transaction: an input that fails
half-way (a file cut short) leaves the output as it was, or absent if the merge created it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from clinjudge.runs._message_texts import shared_sql
from clinjudge.runs._store import (
    RunStore,
    StoreError,
    _owner_only_files,
    rollback,
    store_failure,
)

RUN_SHARDS_DDL = """
CREATE TABLE IF NOT EXISTS run_shards (
    run_id VARCHAR,
    shard VARCHAR,
    status VARCHAR,
    n_items INTEGER,
    created_at TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    source VARCHAR,
    PRIMARY KEY (run_id, shard)
);
"""

# Columns of a runs row that legitimately differ between the shards of one run.
_RUN_PER_SHARD = {"created_at", "updated_at", "finished_at", "status", "n_items", "data_source"}
# Config settings that legitimately differ between machines (see ``sharded_run_id``).
_CONFIG_PER_SHARD = {"shard", "db", "data", "concurrency"}
# When shards disagree, the run shows the least finished status.
_STATUS_RANK = {
    "failed": 0,
    "interrupted": 1,
    "budget_exhausted": 1,
    "running": 2,
    "incomplete": 3,
    "completed": 4,
}
_EXAMPLES = 5
_SHARD = re.compile(r"^(\d+)/(\d+)$")
# Tables whose rows are interchangeable when these columns are equal: the first one kept is as
# good as any, whichever run wrote it, so a duplicate is skipped and is no conflict.
_SAME_BY = {"response_cache": ("key",)}


@dataclass
class TableMerge:
    """What one table received."""

    added: int = 0
    conflicts: int = 0
    examples: list[str] = field(default_factory=list)


@dataclass
class MergeSummary:
    """What a merge did, per table."""

    into: str
    tables: dict[str, TableMerge] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)

    @property
    def conflicts(self) -> int:
        """Conflicting rows over all tables (first-seen rows were kept)."""
        return sum(t.conflicts for t in self.tables.values())

    def table(self, name: str) -> TableMerge:
        """The tally of one table (created on first use)."""
        return self.tables.setdefault(name, TableMerge())


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _here(con: duckdb.DuckDBPyConnection) -> str:
    row = con.execute("SELECT current_database()").fetchone()
    assert row is not None
    return str(row[0])


def _tables(con: duckdb.DuckDBPyConnection, catalog: str) -> list[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' "
        "ORDER BY table_name",
        [catalog],
    ).fetchall()
    return [r[0] for r in rows]


def _columns(con: duckdb.DuckDBPyConnection, catalog: str, table: str) -> list[str]:
    rows = con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = 'main' "
        "AND table_name = ? ORDER BY column_index",
        [catalog, table],
    ).fetchall()
    return [r[0] for r in rows]


def _primary_key(con: duckdb.DuckDBPyConnection, catalog: str, table: str) -> list[str]:
    rows = con.execute(
        "SELECT constraint_column_names FROM duckdb_constraints() WHERE database_name = ? "
        "AND schema_name = 'main' AND table_name = ? AND constraint_type = 'PRIMARY KEY'",
        [catalog, table],
    ).fetchall()
    return list(rows[0][0]) if rows else []


def _create_sql(con: duckdb.DuckDBPyConnection, catalog: str, table: str) -> str:
    row = con.execute(
        "SELECT sql FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' "
        "AND table_name = ?",
        [catalog, table],
    ).fetchone()
    assert row is not None
    return str(row[0])


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()) -> list[dict]:
    cursor = con.execute(sql, list(params))
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _config(row: dict[str, Any]) -> dict[str, Any]:
    value = row.get("config")
    if isinstance(value, str):
        value = json.loads(value)
    return dict(value or {})


def _identity(row: dict[str, Any]) -> dict[str, Any]:
    """The part of a runs row every shard of the run must agree on."""
    same = {k: v for k, v in row.items() if k not in _RUN_PER_SHARD and k != "config"}
    for key in ("rubric_json", "models", "versions"):
        if isinstance(same.get(key), str):
            same[key] = json.loads(same[key])
    config = {k: v for k, v in _config(row).items() if k not in _CONFIG_PER_SHARD}
    return {**same, "config": config}


def _copy_table(
    con: duckdb.DuckDBPyConnection, source: str, table: str, summary: MergeSummary, label: str
) -> None:
    """Copy one table of an attached source into the output, reporting key conflicts."""
    here = _here(con)
    target_columns = _columns(con, here, table)
    columns = [c for c in _columns(con, source, table) if c in target_columns]
    key = [c for c in _primary_key(con, here, table) if c in columns]
    cols = ", ".join(_quote(c) for c in columns)
    src = f"{_quote(source)}.main.{_quote(table)}"
    dst = f"main.{_quote(table)}"
    tally = summary.table(table)
    same_by = [c for c in _SAME_BY.get(table, ()) if c in columns]
    if same_by and len(same_by) == len(_SAME_BY[table]):
        on = " AND ".join(f"s.{_quote(c)} IS NOT DISTINCT FROM d.{_quote(c)}" for c in same_by)
        by = ", ".join(f"s.{_quote(c)}" for c in same_by)
        fresh = (
            f"SELECT {cols} FROM {src} s WHERE NOT EXISTS (SELECT 1 FROM {dst} d WHERE {on}) "
            f"QUALIFY row_number() OVER (PARTITION BY {by}) = 1"
        )
    elif key:
        on = " AND ".join(f"s.{_quote(c)} IS NOT DISTINCT FROM d.{_quote(c)}" for c in key)
        other = [c for c in columns if c not in key]
        if other:
            differs = " OR ".join(f"s.{_quote(c)} IS DISTINCT FROM d.{_quote(c)}" for c in other)
            clash = f"FROM {src} s JOIN {dst} d ON {on} WHERE {differs}"
            _count_conflicts(con, clash, key, tally, label)
        fresh = f"SELECT {cols} FROM {src} s WHERE NOT EXISTS (SELECT 1 FROM {dst} d WHERE {on})"
    else:
        fresh = f"SELECT {cols} FROM {src} EXCEPT SELECT {cols} FROM {dst}"
    before = con.execute(f"SELECT count(*) FROM {dst}").fetchone()
    ignore = "OR IGNORE " if key else ""
    con.execute(f"INSERT {ignore}INTO {dst} ({cols}) {fresh}")
    after = con.execute(f"SELECT count(*) FROM {dst}").fetchone()
    tally.added += int(after[0] if after else 0) - int(before[0] if before else 0)


def _count_conflicts(
    con: duckdb.DuckDBPyConnection,
    clash: str,
    key: Sequence[str],
    tally: TableMerge,
    label: str,
) -> None:
    """Count the rows ``clash`` (a FROM ... WHERE over source ``s``) finds and keep examples.

    Args:
        con: The connection.
        clash: FROM and WHERE clauses selecting source rows that differ from the output's.
        key: The table's key columns (shown in the examples).
        tally: The table's merge tally (conflicts and examples).
        label: The source's name in the examples.
    """
    count = con.execute(f"SELECT count(*) {clash}").fetchone()
    n = int(count[0]) if count else 0
    if not n:
        return
    tally.conflicts += n
    shown = ", ".join(f"s.{_quote(c)}" for c in key)
    for row in con.execute(f"SELECT {shown} {clash} LIMIT {_EXAMPLES}").fetchall():
        if len(tally.examples) < _EXAMPLES:
            where = ", ".join(f"{c}={v!r}" for c, v in zip(key, row, strict=True))
            tally.examples.append(f"{label}: {where}")


_MESSAGE_DIFFERS = "s.role IS DISTINCT FROM d.role OR s.content IS DISTINCT FROM d.content"
# The tables behind ``messages`` (or, in stores before schema version 6, the table itself):
# copied by _copy_messages, never as tables.
_MESSAGE_TABLES = {"messages", "message_rows", "message_texts"}


def _copy_messages(
    con: duckdb.DuckDBPyConnection, source: str, summary: MergeSummary, label: str
) -> None:
    """Copy a source's transcript messages into ``message_rows`` and ``message_texts``.

    The source's ``messages`` reads the same whether it is a table (a store from before
    schema version 6) or the view over its two tables; its rows are stored here as a run
    writes them (system messages once per run, keyed by their SHA-256, which DuckDB's
    ``sha256()`` computes as the writer does), and compared with the output's ``messages``
    for conflicts (same key, different role or text).
    """
    tally = summary.table("messages")
    src = f"{_quote(source)}.main.messages"
    key = ("run_id", "item_id", "sample", "agent", "seq")
    on = " AND ".join(f"s.{c} = d.{c}" for c in key)
    clash = f"FROM {src} s JOIN main.messages d ON {on} WHERE {_MESSAGE_DIFFERS}"
    _count_conflicts(con, clash, key, tally, label)
    fresh = f"FROM {src} s WHERE NOT EXISTS (SELECT 1 FROM main.message_rows d WHERE {on})"
    shared = shared_sql("s")
    # Texts first, only those of rows that go in: no row names a missing text, no text is
    # left that no row names.
    con.execute(
        "INSERT OR IGNORE INTO main.message_texts (run_id, text_id, content) "
        "SELECT run_id, text_id, any_value(content) FROM ("
        f"SELECT s.run_id, sha256(s.content) AS text_id, s.content {fresh} AND {shared}"
        ") GROUP BY run_id, text_id"
    )
    before = con.execute("SELECT count(*) FROM main.message_rows").fetchone()
    con.execute(
        "INSERT OR IGNORE INTO main.message_rows "
        "(run_id, item_id, sample, agent, seq, role, content, text_id) "
        "SELECT s.run_id, s.item_id, s.sample, s.agent, s.seq, s.role, "
        f"CASE WHEN {shared} THEN NULL ELSE s.content END, "
        f"CASE WHEN {shared} THEN sha256(s.content) END {fresh}"
    )
    after = con.execute("SELECT count(*) FROM main.message_rows").fetchone()
    tally.added += int(after[0] if after else 0) - int(before[0] if before else 0)


def _shard_rows(
    con: duckdb.DuckDBPyConnection, source: str, source_tables: list[str], label: str
) -> list[dict[str, Any]]:
    """The shards a source holds: its own sharded runs plus any shards it merged earlier."""
    shards = []
    if "run_shards" in source_tables:
        shards += _rows(con, f"SELECT * FROM {_quote(source)}.main.run_shards")
    for run in _rows(con, f"SELECT * FROM {_quote(source)}.main.runs"):
        shard = _config(run).get("shard")
        if shard:
            shards.append(
                {
                    "run_id": run["run_id"],
                    "shard": shard,
                    "status": run["status"],
                    "n_items": run["n_items"],
                    "created_at": run["created_at"],
                    "finished_at": run["finished_at"],
                    "source": label,
                }
            )
    return shards


def _add_shards(con: duckdb.DuckDBPyConnection, shards: list[dict[str, Any]]) -> None:
    """Record shards; a completed shard replaces an unfinished record of itself."""
    for shard in shards:
        old = con.execute(
            "SELECT status FROM run_shards WHERE run_id = ? AND shard = ?",
            [shard["run_id"], shard["shard"]],
        ).fetchone()
        if old is not None and (old[0] == "completed" or shard["status"] != "completed"):
            continue
        columns = ["run_id", "shard", "status", "n_items", "created_at", "finished_at", "source"]
        con.execute(
            f"INSERT OR REPLACE INTO run_shards ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' for _ in columns)})",
            [shard[c] for c in columns],
        )


def _combine_run(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Rewrite one run's row from its shards: status, times and item count."""
    shards = _rows(con, "SELECT * FROM run_shards WHERE run_id = ?", [run_id])
    if not shards:
        return
    counts = set()
    for shard in shards:
        match = _SHARD.match(str(shard["shard"]))
        if match:
            counts.add(int(match.group(2)))
    seen = {str(s["shard"]) for s in shards}
    covered = len(counts) == 1 and all(f"{i}/{n}" in seen for n in counts for i in range(1, n + 1))
    statuses = [str(s["status"]) for s in shards]
    status = min(statuses, key=lambda s: _STATUS_RANK.get(s, 0))
    if status == "completed" and not covered:
        status = "incomplete"
    created = min((s["created_at"] for s in shards if s["created_at"] is not None), default=None)
    finished = [s["finished_at"] for s in shards if s["finished_at"] is not None]
    n_items_row = con.execute("SELECT count(*) FROM items WHERE run_id = ?", [run_id]).fetchone()
    run = _rows(con, "SELECT config FROM runs WHERE run_id = ?", [run_id])[0]
    config = _config(run)
    if len(shards) > 1 or covered:
        config.pop("shard", None)  # the shards are listed in run_shards
    con.execute(
        "UPDATE runs SET status = ?, created_at = ?, finished_at = ?, "
        "updated_at = greatest(updated_at, ?), n_items = ?, config = ? WHERE run_id = ?",
        [
            status,
            created,
            max(finished) if finished and status == "completed" else None,
            max(finished) if finished else created,
            int(n_items_row[0]) if n_items_row else 0,
            json.dumps(config),
            run_id,
        ],
    )


def _check_source(path: Path, target: Path) -> None:
    """Refuse an input that cannot be merged, before anything is written.

    Opening it as a store refuses what is not a DuckDB file (an SQLite file), a schema version
    this clinjudge does not read and a file cut short before its tables; one without a runs
    table is a DuckDB file but not a run database.
    """
    if not path.is_file():
        raise StoreError(f"{path}: no such database")
    if target.exists() and path.resolve() == target.resolve():
        raise StoreError(f"{path}: cannot merge a database into itself")
    with RunStore(path, read_only=True) as source:
        if not source.has_table("runs"):
            raise StoreError(
                f"{path}: not a clinjudge run database (it has no runs table); nothing merged"
            )


def merge_databases(sources: Sequence[str | Path], into: str | Path) -> MergeSummary:
    """Merge run databases into one (created owner-only if absent).

    Every input is checked first, and all are merged in one transaction: when any input cannot
    be merged, the output is left as it was (and not created).

    Args:
        sources: Databases to read (opened read-only, never changed).
        into: Output database; may already hold runs (merging again adds nothing).

    Returns:
        What each table received and the conflicts found (first-seen rows kept).

    Raises:
        StoreError: An input is missing, not a run database, of an unknown schema version, or
            damaged; or the output cannot be written (e.g. a full disk).
    """
    target = Path(into)
    paths = [Path(s) for s in sources]
    if not paths:
        raise StoreError("nothing to merge: name at least one database")
    for path in paths:
        _check_source(path, target)
    created = not target.exists()
    summary = MergeSummary(into=str(target))
    try:
        with RunStore(target) as store, _owner_only_files():
            _merge_all(store, paths, summary)
    except BaseException:
        if created:  # a merge that failed leaves no output behind
            for leftover in (target, target.with_name(target.name + ".wal")):
                leftover.unlink(missing_ok=True)
        raise
    return summary


def _merge_all(store: RunStore, paths: list[Path], summary: MergeSummary) -> None:
    """Attach every input and merge them all in one transaction."""
    con = store.con
    aliases: list[str] = []
    try:
        for number, path in enumerate(paths):
            alias = f"merge_source_{number}"
            try:
                con.execute(f"ATTACH {_sql_string(str(path))} AS {alias} (READ_ONLY)")
            except duckdb.Error as exc:
                failure = store_failure(path, exc)
                raise failure or StoreError(f"{path}: cannot open database: {exc}") from exc
            aliases.append(alias)
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(RUN_SHARDS_DDL)
            for alias, path in zip(aliases, paths, strict=True):
                _merge_one(con, alias, str(path), summary)
            con.execute("COMMIT")
        except BaseException:
            rollback(con)
            raise
    except duckdb.Error as exc:
        # Name the input (or the output) that is damaged or whose disk is full.
        failure = store_failure(store.path, exc, paths)
        if failure is None:
            raise
        raise failure from exc
    finally:
        for alias in aliases:
            with contextlib.suppress(duckdb.Error):  # the error above is the one to report
                con.execute(f"DETACH {alias}")


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _merge_one(
    con: duckdb.DuckDBPyConnection, alias: str, label: str, summary: MergeSummary
) -> None:
    tables = _tables(con, alias)
    present = set(_tables(con, _here(con)))
    for table in tables:
        if table not in present and table not in _MESSAGE_TABLES:
            con.execute(_create_sql(con, alias, table))
    shards = _shard_rows(con, alias, tables, label) if "runs" in tables else []
    incoming_runs = _rows(con, f"SELECT * FROM {alias}.main.runs") if "runs" in tables else []
    existing = {
        r["run_id"]: r
        for r in _rows(con, "SELECT * FROM runs")
        if r["run_id"] in {i["run_id"] for i in incoming_runs}
    }
    sharded = {s["run_id"] for s in shards}
    runs_tally = summary.table("runs")
    for run in incoming_runs:
        old = existing.get(run["run_id"])
        if old is None:
            continue
        if run["run_id"] in sharded and _identity(old) != _identity(run):
            runs_tally.conflicts += 1
            if len(runs_tally.examples) < _EXAMPLES:
                runs_tally.examples.append(
                    f"{label}: run_id={run['run_id']!r} (shards disagree on settings)"
                )
    for table in tables:
        # meta records each store's own schema version: an older input's is no conflict.
        if table in ("run_shards", "meta"):
            continue
        if table == "runs":
            _copy_runs(con, alias, label, summary, sharded)
            continue
        if table in _MESSAGE_TABLES:
            # Once, where the table sorts: a store before version 6 has ``messages``, a
            # later one ``message_rows`` (and the view).
            if table in ("messages", "message_rows"):
                _copy_messages(con, alias, summary, label)
            continue
        _copy_table(con, alias, table, summary, label)
    _add_shards(con, shards)
    for run_id in sorted(sharded):
        _combine_run(con, run_id)
    summary.runs = sorted({*summary.runs, *(r["run_id"] for r in incoming_runs)})


def _copy_runs(
    con: duckdb.DuckDBPyConnection,
    alias: str,
    label: str,
    summary: MergeSummary,
    sharded: set[str],
) -> None:
    """Copy runs rows: unsharded runs like any table, sharded ones combined later."""
    tally = summary.table("runs")
    # Sharded runs already present are combined from run_shards, not reported as conflicts.
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _merge_runs AS SELECT * FROM {alias}.main.runs "
        f"WHERE run_id NOT IN (SELECT unnest(?::VARCHAR[]))",
        [sorted(sharded)],
    )
    try:
        target = _columns(con, _here(con), "runs")
        columns = [c for c in _columns(con, alias, "runs") if c in target]
        cols = ", ".join(_quote(c) for c in columns)
        other = [c for c in columns if c != "run_id"]
        differs = " OR ".join(f"s.{_quote(c)} IS DISTINCT FROM d.{_quote(c)}" for c in other)
        for (run_id,) in con.execute(
            f"SELECT s.run_id FROM temp.main._merge_runs s JOIN main.runs d "
            f"ON s.run_id = d.run_id WHERE {differs}"
        ).fetchall():
            tally.conflicts += 1
            if len(tally.examples) < _EXAMPLES:
                tally.examples.append(f"{label}: run_id={run_id!r}")
        before = con.execute("SELECT count(*) FROM main.runs").fetchone()
        con.execute(
            f"INSERT OR IGNORE INTO main.runs ({cols}) SELECT {cols} FROM temp.main._merge_runs"
        )
        con.execute(
            f"INSERT OR IGNORE INTO main.runs ({cols}) SELECT {cols} FROM {alias}.main.runs "
            f"WHERE run_id IN (SELECT unnest(?::VARCHAR[]))",
            [sorted(sharded)],
        )
        after = con.execute("SELECT count(*) FROM main.runs").fetchone()
        tally.added += int(after[0] if after else 0) - int(before[0] if before else 0)
    finally:
        con.execute("DROP TABLE IF EXISTS temp.main._merge_runs")
