"""The DuckDB run store: every run, item, judgment, call and message.

Primary keys make every write idempotent: a batch goes in with a plain ``INSERT`` and, when a
key already exists (a resumed run writing what a killed one stored), again with ``INSERT OR
IGNORE``, so a run can never duplicate a judgment. Each batch of finished samples is written in
one transaction through Arrow tables, so a crash leaves whole samples or nothing. Physicians'
ratings (``human_ratings``) do not belong to a run; re-importing a rating replaces it (upsert).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import repeat
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import duckdb

from clinjudge._util.lazy_module import LazyModule
from clinjudge._util.offline import connect_duckdb
from clinjudge._util.secrets import redact_secrets
from clinjudge._util.timestamps import now
from clinjudge.errors import UserError
from clinjudge.runs._message_texts import TextIds, migrate_messages, split_messages

WriteRows = Callable[[str, Sequence[dict[str, Any]]], None]
"""Inserts rows into a table inside :meth:`RunStore.write_rows`' transaction."""

if TYPE_CHECKING:
    import pyarrow as pa
else:  # loaded on first use: `judge runs list` and `runs show` write no Arrow table
    pa = LazyModule("pyarrow")

DEFAULT_DB = Path("runs") / "clinjudge.duckdb"
DB_ENV = "CLINJUDGE_DB"
"""Environment variable naming the default database."""
_STORED_TEXTS = 4096
_BOUND_VALUES = 20_000
"""Upserts of at most this many values are bound as statement parameters (no Arrow table)."""
"""Committed shared texts a store object remembers (see ``RunStore._stored_texts``)."""


def default_db() -> str:
    """The database used when none is given: ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb."""
    return os.environ.get(DB_ENV) or str(DEFAULT_DB)


SCHEMA_VERSION = 7
"""Version of the tables below. 1: stores from before the version was checked (columns added
since: items.flags, runs.status_reason, calls.cached; newer tables). 2: the first recorded
version. 3: response_cache.run_id (the run that wrote each reply; earlier rows keep NULL) and
cache keys of format 2, which hold the endpoint (an older clinjudge would write rows no run
owns, under keys that ignore the endpoint). 4: calls.output_mode (how each call constrained its
reply: json_schema, json_object or off; earlier rows and local model calls keep NULL).
5: calls.cached_input_tokens, calls.cache_write_tokens and calls.cache_saving_usd (the
provider's prompt cache: tokens read, tokens written, dollars saved; earlier rows keep NULL).
6: ``messages`` is a view over ``message_rows`` and ``message_texts``, which hold each system
message once per run (``runs/_message_texts.py``; the old table is renamed, its rows unchanged).
7: ``quality_flags`` (suspect-judgment flags of samples and runs), ``calls.max_tokens``,
``probe_variants`` and ``probe_skips`` (the edited items of ``judge probe`` runs); earlier runs
have no flags until ``judge runs flag`` computes them.
Opening an older store for writing migrates it and records this version; a newer one is
refused."""


_DDL = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    name VARCHAR,
    created_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    status VARCHAR,
    mode VARCHAR,
    rubric VARCHAR,
    rubric_version VARCHAR,
    rubric_json JSON,
    models JSON,
    config JSON,
    versions JSON,
    data_source VARCHAR,
    simulated BOOLEAN,
    n_items INTEGER,
    n_samples INTEGER
);
CREATE TABLE IF NOT EXISTS items (
    run_id VARCHAR,
    item_id VARCHAR,
    position INTEGER,
    notes JSON,
    summary VARCHAR,
    specialty VARCHAR,
    reference VARCHAR,
    vendor VARCHAR,
    meta JSON,
    flags JSON,
    PRIMARY KEY (run_id, item_id)
);
CREATE TABLE IF NOT EXISTS samples (
    run_id VARCHAR,
    item_id VARCHAR,
    sample INTEGER,
    agent VARCHAR,
    status VARCHAR,
    error VARCHAR,
    raw_text VARCHAR,
    rationale VARCHAR,
    n_calls INTEGER,
    latency_s DOUBLE,
    finished_at TIMESTAMPTZ,
    PRIMARY KEY (run_id, item_id, sample, agent)
);
CREATE TABLE IF NOT EXISTS judgments (
    run_id VARCHAR,
    item_id VARCHAR,
    sample INTEGER,
    agent VARCHAR,
    attribute VARCHAR,
    value DOUBLE,
    final BOOLEAN,
    status VARCHAR,
    error VARCHAR,
    rationale VARCHAR,
    raw_value DOUBLE,
    PRIMARY KEY (run_id, item_id, sample, agent, attribute)
);
CREATE TABLE IF NOT EXISTS calls (
    call_id VARCHAR PRIMARY KEY,
    run_id VARCHAR,
    item_id VARCHAR,
    sample INTEGER,
    seq INTEGER,
    role VARCHAR,
    agent VARCHAR,
    model VARCHAR,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    tokens_estimated BOOLEAN,
    cost_usd DOUBLE,
    latency_s DOUBLE,
    status VARCHAR,
    error VARCHAR,
    finish_reason VARCHAR,
    started_at TIMESTAMPTZ
);
-- quality_flags (7): evidence that a judgment may not be trustworthy (docs/trust.md). A
-- sample's flag names its item, sample and agent; a run's flag has item_id '' and sample 0;
-- attribute is '' when the flag is about no one attribute.
CREATE TABLE IF NOT EXISTS quality_flags (
    run_id VARCHAR,
    item_id VARCHAR,
    sample INTEGER,
    agent VARCHAR,
    flag VARCHAR,
    attribute VARCHAR,
    detail VARCHAR,
    PRIMARY KEY (run_id, item_id, sample, agent, flag, attribute)
);
-- probe_variants (7): items of a `judge probe` run made by a seeded edit of another item of
-- the run (original_id); edit describes the change (for the side-by-side view).
CREATE TABLE IF NOT EXISTS probe_variants (
    run_id VARCHAR,
    item_id VARCHAR,
    original_id VARCHAR,
    probe VARCHAR,
    seed INTEGER,
    edit JSON,
    PRIMARY KEY (run_id, item_id)
);
-- probe_skips (7): originals a probe could not edit, with the reason (counted, never silent).
CREATE TABLE IF NOT EXISTS probe_skips (
    run_id VARCHAR,
    original_id VARCHAR,
    probe VARCHAR,
    reason VARCHAR,
    PRIMARY KEY (run_id, original_id, probe)
);
CREATE TABLE IF NOT EXISTS human_ratings (
    item_id VARCHAR,
    rater_id VARCHAR,
    attribute VARCHAR,
    score DOUBLE,
    rubric VARCHAR,
    source VARCHAR,
    imported_at TIMESTAMPTZ,
    PRIMARY KEY (item_id, rater_id, attribute)
);
CREATE TABLE IF NOT EXISTS claims (
    run_id VARCHAR,
    item_id VARCHAR,
    sample INTEGER,
    agent VARCHAR,
    kind VARCHAR,
    idx INTEGER,
    section VARCHAR,
    text VARCHAR,
    verdict VARCHAR,
    score DOUBLE,
    explanation VARCHAR,
    citations JSON,
    supporting JSON,
    status VARCHAR,
    error VARCHAR,
    official JSON,
    PRIMARY KEY (run_id, item_id, sample, agent, kind, idx)
);
-- Databases written by earlier versions gain the newer columns (inserts go by column name).
ALTER TABLE claims ADD COLUMN IF NOT EXISTS supporting JSON;
ALTER TABLE claims ADD COLUMN IF NOT EXISTS official JSON;
ALTER TABLE judgments ADD COLUMN IF NOT EXISTS raw_value DOUBLE;
ALTER TABLE items ADD COLUMN IF NOT EXISTS flags JSON;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS status_reason VARCHAR;
-- calls.cached: answered from response_cache (judge run --cache), no provider call, cost 0.
ALTER TABLE calls ADD COLUMN IF NOT EXISTS cached BOOLEAN;
-- calls.output_mode: the structured output the request asked for (json_schema, json_object or
-- off; a json_schema call an endpoint refused and resent in JSON mode records json_object).
ALTER TABLE calls ADD COLUMN IF NOT EXISTS output_mode VARCHAR;
-- calls.cached_input_tokens / cache_write_tokens: of prompt_tokens, those the provider read
-- from / wrote to its prompt cache (billed at their own prices); cache_saving_usd: dollars
-- that saved against full input prices (negative when writes cost more).
ALTER TABLE calls ADD COLUMN IF NOT EXISTS cached_input_tokens INTEGER;
ALTER TABLE calls ADD COLUMN IF NOT EXISTS cache_write_tokens INTEGER;
ALTER TABLE calls ADD COLUMN IF NOT EXISTS cache_saving_usd DOUBLE;
-- calls.max_tokens (7): the cap on generated tokens the call was sent with (a reply at it is
-- flagged at_token_cap); NULL where unknown and for rows written before.
ALTER TABLE calls ADD COLUMN IF NOT EXISTS max_tokens INTEGER;
-- response_cache.run_id: the run that wrote the reply (`judge runs delete` removes it with the
-- run); NULL for rows written before the column existed.
CREATE TABLE IF NOT EXISTS response_cache (
    key VARCHAR PRIMARY KEY,
    model VARCHAR,
    created_at TIMESTAMPTZ,
    response JSON,
    run_id VARCHAR
);
ALTER TABLE response_cache ADD COLUMN IF NOT EXISTS run_id VARCHAR;
CREATE TABLE IF NOT EXISTS prm_steps (
    run_id VARCHAR,
    item_id VARCHAR,
    candidate VARCHAR,
    step INTEGER,
    kind VARCHAR,
    text VARCHAR,
    score DOUBLE,
    flagged BOOLEAN,
    label INTEGER,
    model VARCHAR,
    PRIMARY KEY (run_id, item_id, candidate, step)
);
-- Agreement analyses of runs against human_ratings, reused while the fingerprint of their
-- input (ratings, judgments, rubric) and the settings (resamples, seed, version) are unchanged.
CREATE TABLE IF NOT EXISTS agreement_cache (
    run_id VARCHAR,
    settings VARCHAR,
    fingerprint VARCHAR,
    analysis JSON,
    computed_at TIMESTAMPTZ,
    PRIMARY KEY (run_id, settings)
);
"""

WRITE_CACHE_LIMIT = "128MB"
"""DuckDB's memory limit while a run writes its batches (:meth:`RunStore.bounded_cache`)."""

FINAL_SAMPLE = 0
"""Sample number of the aggregated per-item judgment; real samples count from 1."""


class StoreError(UserError, RuntimeError):
    """The database cannot be opened or does not hold what was asked for."""


# What DuckDB says when a file's body is missing or garbled (cut short by a full disk or an
# interrupted copy, bits flipped): the header may be intact, so it often opens, then fails
# on the first query that reads the missing part.
_DAMAGED = (
    "Could not read enough bytes",
    "Corrupt database file",
    "Failed to deserialize",
)
_DISK_FULL = {
    "No space left on device": "no space left on device",
    "Disk quota exceeded": "disk quota exceeded",
    '"errno":"28"': "no space left on device",
    '"errno":"122"': "disk quota exceeded",
}
_NAMED_FILE = re.compile(r'file \\?"([^"\\]+)\\?"')


def disk_full_reason(exc: BaseException) -> str | None:
    """Why a write failed when the disk is full (or the quota spent); None for other errors.

    Args:
        exc: An ``OSError`` or a DuckDB error.
    """
    if isinstance(exc, OSError):
        if exc.errno == errno.ENOSPC:
            return "no space left on device"
        return "disk quota exceeded" if exc.errno == errno.EDQUOT else None
    text = str(exc)
    return next((reason for mark, reason in _DISK_FULL.items() if mark in text), None)


def disk_full_error(path: Path, reason: str) -> StoreError:
    """The one-line error of an output file that could not be written for lack of space.

    Args:
        path: The output file (its partial copy was removed; an older file is unchanged).
        reason: What :func:`disk_full_reason` said.
    """
    kept = " (the file already there is unchanged)" if path.exists() else ""
    return StoreError(
        f"{path}: disk full ({reason}): nothing was written{kept}; free some space or write "
        "elsewhere"
    )


def store_failure(path: Path, exc: duckdb.Error, files: Sequence[Path] = ()) -> StoreError | None:
    """Our error for a DuckDB error that says a database file is damaged or its disk full.

    Args:
        path: The database the connection opened (named when DuckDB names no file).
        exc: DuckDB's error.
        files: Other databases the connection has attached, named as the caller gave them.

    Returns:
        A one-line ``StoreError``, or None for any other error (a fault: it keeps its
        traceback).
    """
    text = " ".join(str(exc).split())
    full = disk_full_reason(exc)
    damaged = isinstance(exc, duckdb.SerializationException) or any(m in text for m in _DAMAGED)
    if full is None and not damaged:
        return None
    where = path
    named = _NAMED_FILE.search(text)
    if named:
        # DuckDB names absolute paths, and the WAL beside a database: name the database as
        # the user wrote it.
        where = Path(named.group(1).removesuffix(".wal"))
        for known in (path, *files):
            if known.absolute() == where:
                where = known
    if full is not None:
        return StoreError(
            f"{where}: disk full ({full}): the database could not be written; free some space "
            "on its disk and try again"
        )
    return StoreError(
        f"database file {where} is damaged or cut short: {text}; restore it from a backup "
        "(or the shards it was merged from)"
    )


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back after a failure without hiding it: DuckDB has already rolled back a
    transaction whose COMMIT failed (e.g. on a full disk) and refuses a second ROLLBACK, whose
    "cannot rollback" error would replace the real one."""
    with contextlib.suppress(duckdb.Error):
        con.execute("ROLLBACK")


def _make_parent(path: Path) -> None:
    try:
        if not path.parent.exists():
            path.parent.mkdir(parents=True, mode=0o700)
    except OSError as exc:
        raise StoreError(
            f"{path}: cannot create its folder {path.parent}: {exc.strerror or exc}"
        ) from exc
    if not path.parent.is_dir():
        raise StoreError(f"{path}: {path.parent} is not a folder")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise StoreError(f"{path}: folder {path.parent} is not writable")


def _check_path(path: Path) -> None:
    if str(path).startswith(":memory:"):
        raise StoreError(
            f"{path}: an in-memory database would lose every run when the process ends; "
            "give the database a file name"
        )
    if path.is_dir():
        raise StoreError(f"{path}: is a folder, not a database file")


def _stored_version(con: duckdb.DuckDBPyConnection) -> int | None:
    """The schema version a store records; None for a new, empty file."""
    tables = {row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    if not tables:
        return None
    if "meta" not in tables:
        return 1 if "runs" in tables else None
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        return 1
    try:
        return int(row[0])
    except (TypeError, ValueError):
        return -1


def _prepare_schema(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> None:
    """Refuse a store from a newer clinjudge; bring an older one up to date, explicitly."""
    version = _stored_version(con)
    if version is not None and (version > SCHEMA_VERSION or version < 1):
        shown = version if version > 0 else "unreadable"
        raise StoreError(
            f"{path}: schema version {shown} is not one this clinjudge knows (it reads versions "
            f"1 to {SCHEMA_VERSION}); it was written by a newer clinjudge or altered: upgrade "
            "clinjudge or use another database"
        )
    if read_only:
        return
    _refuse_shadowing_names(con, path)
    # Version 1 stores lack columns and tables added since; every statement of _DDL is
    # additive (IF NOT EXISTS), so running it is the migration. Recorded in the same
    # transaction, so a store is never marked migrated without being so.
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(_DDL)
        migrate_messages(con)
        con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
        )
        con.execute("COMMIT")
    except BaseException:
        rollback(con)
        raise


INCOMING_ROWS = "_clinjudge_incoming"
"""The name under which the store's batch inserts read their Arrow rows (a DuckDB replacement
scan, which a table or view of the same name in the database would take the place of)."""


def _refuse_shadowing_names(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Refuse to write to a database holding a table or view named :data:`INCOMING_ROWS`:
    every batch would insert its rows instead of the run's."""
    found = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE lower(table_name) = $name "
        "UNION ALL SELECT view_name FROM duckdb_views() WHERE lower(view_name) = $name",
        {"name": INCOMING_ROWS},
    ).fetchone()
    if found is not None:
        raise StoreError(
            f"{path}: holds a table or view named {found[0]!r}, a name clinjudge reserves for the "
            "rows it is writing (it is not one of clinjudge's tables); rename or drop it, or "
            "use another database"
        )


@contextmanager
def _owner_only_files() -> Iterator[None]:
    """Make files created meanwhile (the database, and the WAL DuckDB creates on a write after
    each checkpoint) readable by the owner only."""
    old_umask = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old_umask)


def _open_error(path: Path, exc: duckdb.Error) -> str:
    """One line saying why the database cannot be opened."""
    failure = store_failure(path, exc)
    if failure is not None:
        return str(failure)
    text = " ".join(str(exc).split())
    if "Could not set lock" in text or "Conflicting lock" in text:
        holder = re.search(r"\(PID (\d+)\)", text)
        by = f" (PID {holder.group(1)})" if holder else ""
        server = _rating_server(path, holder.group(1) if holder else None)
        if server:
            return server
        return (
            f"{path}: database is in use by another process{by}; DuckDB allows one writer at a "
            "time: wait for it to finish or use another database"
        )
    if "Extension" in text and ("not found" in text or "autoload" in text.lower()):
        kind = " (it looks like an SQLite file)" if "sqlite" in text.lower() else ""
        return (
            f"{path}: not a DuckDB database{kind}; clinjudge stores runs in DuckDB files and "
            "never loads DuckDB extensions"
        )
    return f"{path}: cannot open database: {text}"


def _rating_server(path: Path, pid: str | None) -> str | None:
    """The message when the process holding the file is `judge rate serve` (the note it
    writes beside the database names its PID and address), else None."""
    try:
        note = json.loads(path.with_name(path.name + ".rating-server").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(note, dict) or pid is None or str(note.get("pid")) != pid:
        return None
    return (
        f"{path}: the rating server (`judge rate serve`, PID {pid}, {note.get('url')}) holds "
        "this database while physicians rate; DuckDB allows one writer at a time: stop it "
        "(Ctrl-C in its terminal; every saved rating is kept and the raters' pages retry), "
        "run this command, then start it again"
    )


class RunStore:
    """A DuckDB file holding runs.

    Args:
        path: Database file; created owner-only (0600) if absent.
        read_only: Open without write access.
    """

    def __init__(self, path: str | Path = DEFAULT_DB, *, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        self._columns: dict[str, list[str]] = {}
        self._ignore_existing = True
        """insert_rows ignores rows whose key exists (write_batch tries without first)."""
        self._text_ids = TextIds()
        """Memo of shared message texts' keys (see _message_texts)."""
        self._stored_texts: set[tuple[Any, str]] = set()
        """(run_id, text_id) of shared texts this object's transactions committed within the
        current :meth:`bounded_cache` block (a run's writes): a batch leaves them out (each
        statement costs DuckDB ~1-2 ms)."""
        self._write_blocks = 0
        """:meth:`bounded_cache` blocks open (nested ones count)."""
        self._transaction_texts: list[tuple[Any, str]] | None = None
        """Texts written by the transaction in progress in :meth:`_transaction`."""
        self._split_messages: bool | None = None if read_only else True
        self._cache_bound: str | None = None
        """The memory limit to restore while :meth:`bounded_cache` holds DuckDB's cache."""
        _check_path(self.path)
        if read_only and not self.path.exists():
            raise StoreError(f"{self.path}: no such database")
        if not read_only:
            _make_parent(self.path)
        # The umask makes DuckDB create the file and its WAL readable by the owner only.
        with _owner_only_files():
            try:
                # An absolute name: DuckDB reads "md:..." or "s3://..." as remote databases.
                self.con = connect_duckdb(str(self.path.absolute()), read_only=read_only)
            except duckdb.Error as exc:
                raise StoreError(_open_error(self.path, exc)) from exc
            try:
                _prepare_schema(self.con, self.path, read_only)
            except duckdb.Error as exc:
                self.con.close()
                raise StoreError(_open_error(self.path, exc)) from exc
            except StoreError:
                self.con.close()
                raise
        if not read_only:
            try:
                os.chmod(self.path, stat.S_IRUSR | stat.S_IWUSR)
            except OSError as exc:
                self.con.close()
                raise StoreError(
                    f"{self.path}: cannot set owner-only mode: {exc.strerror}"
                ) from exc

    def close(self) -> None:
        """Close the connection."""
        self.con.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Every `with RunStore(...)` block (each command, each API call) reports a damaged
        # file or a full disk met by any query as one line naming the file.
        try:
            self.close()
        except duckdb.Error:
            if exc is None:
                raise
        if isinstance(exc, duckdb.Error):
            failure = store_failure(self.path, exc)
            if failure is not None:
                raise failure from exc

    def insert_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """Insert rows through one Arrow table, ignoring rows whose key already exists.

        Rows of ``messages`` (a view) go into ``message_rows`` and ``message_texts``, texts
        first: call this in a transaction (as :meth:`write_batch` does) so that they go in
        together.

        Args:
            table: Target table.
            rows: Dicts whose keys are the table's columns.
        """
        if not rows:
            return
        ignore = getattr(self, "_ignore_existing", True)
        if table == "messages":
            known = self._stored_texts if self._write_blocks else ()
            message_rows, message_texts = split_messages(rows, self._text_ids, stored=known)
            # A text recurs in every batch of its run: written again (and ignored) until a
            # transaction of the run's write block has committed it; then left out.
            if self._transaction_texts is not None and self._write_blocks:
                self._transaction_texts.extend(
                    zip(message_texts["run_id"], message_texts["text_id"], strict=True)
                )
            self._insert_columns("message_texts", message_texts, ignore=True)
            self._insert_columns("message_rows", message_rows, ignore=ignore)
            return
        columns = self._columns.get(table)
        if columns is None:
            columns = [c[0] for c in self.con.execute(f"DESCRIBE {table}").fetchall()]
            self._columns[table] = columns
        get = dict.get
        # map over the rows in C: a batch is ~200 column values per sample.
        self._insert_columns(table, {c: list(map(get, rows, repeat(c))) for c in columns}, ignore)

    def _insert_columns(self, table: str, columns: dict[str, list[Any]], ignore: bool) -> None:
        if not next(iter(columns.values()), None):
            return
        # DuckDB reads this local by its name in the statement (a replacement scan): no
        # register/unregister pair, ~1 ms of DuckDB's CPU per table per batch. Its name is
        # INCOMING_ROWS, which no table of a store we write may take (_refuse_shadowing_names).
        _clinjudge_incoming = pa.table(columns)  # noqa: F841 - read by the statement
        verb = "INSERT OR IGNORE" if ignore else "INSERT"
        names = ", ".join(columns)
        with _owner_only_files():
            self.con.execute(f"{verb} INTO {table} ({names}) SELECT {names} FROM {INCOMING_ROWS}")

    def upsert_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """Insert rows in one transaction, replacing rows whose key already exists.

        Args:
            table: Target table (it must have a primary key).
            rows: Dicts whose keys are the table's columns; keys must be unique among them.
        """
        if not rows:
            return
        columns = [c[0] for c in self.con.execute(f"DESCRIBE {table}").fetchall()]
        if len(rows) * len(columns) <= _BOUND_VALUES:
            # A few hundred ratings: bound as parameters, without loading pyarrow and numpy
            # (#39: a third of `judge ratings import`'s start-up).
            one = f"({', '.join('?' * len(columns))})"
            values = [row.get(c) for row in rows for c in columns]
            self._upsert(
                f"INSERT OR REPLACE INTO {table} VALUES {', '.join([one] * len(rows))}", values
            )
            return
        arrow = pa.table({c: [row.get(c) for row in rows] for c in columns})
        self.con.register("_incoming", arrow)
        try:
            self._upsert(f"INSERT OR REPLACE INTO {table} SELECT * FROM _incoming")
        finally:
            with contextlib.suppress(duckdb.TransactionException):  # as in insert_rows
                self.con.unregister("_incoming")

    def _upsert(self, statement: str, values: list[Any] | None = None) -> None:
        """Run one upserting statement in its own transaction."""
        with _owner_only_files():
            self.con.execute("BEGIN TRANSACTION")
            try:
                self.con.execute(statement, values)
                self.con.execute("COMMIT")
            except BaseException:
                rollback(self.con)
                raise

    def has_table(self, table: str) -> bool:
        """Whether the database holds ``table`` (older files may lack newer tables)."""
        rows = self.con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table]
        ).fetchone()
        return bool(rows and rows[0])

    def messages_split(self) -> bool:
        """Whether ``messages`` is the view over ``message_rows`` and ``message_texts``
        (schema version 6 on); a store from before, opened read-only, keeps its table."""
        if self._split_messages is None:
            self._split_messages = self.has_table("message_rows")
        return self._split_messages

    def has_column(self, table: str, column: str) -> bool:
        """Whether ``table`` has ``column`` (files from older versions may lack newer ones)."""
        rows = self.con.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_name = ? AND column_name = ?",
            [table, column],
        ).fetchone()
        return bool(rows and rows[0])

    def write_batch(self, batch: Mapping[str, Sequence[dict[str, Any]]]) -> None:
        """Write rows to several tables in one transaction, ignoring rows whose key exists.

        Args:
            batch: Table name to rows.
        """

        def produce(insert: WriteRows) -> None:
            for table, rows in batch.items():
                insert(table, rows)

        self.write_rows(produce)

    def write_rows(self, produce: Callable[[WriteRows], None]) -> None:
        """Write what ``produce`` hands its insert function (table, rows), as many times as it
        likes, in one transaction: committed when it returns, nothing written when it raises.

        Rows whose key exists are ignored. They first go in with a plain INSERT, which costs
        DuckDB a third to a half less CPU than INSERT OR IGNORE; when a key already exists
        (rows a killed run stored, written again) the transaction is rolled back and written
        again ignoring them. Under :meth:`bounded_cache`, a transaction DuckDB cannot fit in
        the bound lifts it and goes in again. So ``produce`` must be able to run more than
        once.

        Args:
            produce: Called with the insert function; writes every row.
        """
        self.lift_bound_on_overflow(lambda: self._write_ignoring_existing(produce))

    def lift_bound_on_overflow(self, write: Callable[[], None]) -> None:
        """Run ``write`` (one transaction or one statement); under :meth:`bounded_cache`, a
        write DuckDB cannot fit in the bound (rolled back, so it changed nothing) lifts the
        bound and runs again.

        Args:
            write: The write; it must be able to run twice.
        """
        try:
            write()
        except duckdb.OutOfMemoryException:
            if self._cache_bound is None:
                raise
            self._lift_cache_bound()
            write()

    def _write_ignoring_existing(self, produce: Callable[[WriteRows], None]) -> None:
        try:
            self._transaction(produce, ignore_existing=False)
        except duckdb.ConstraintException:
            self._transaction(produce, ignore_existing=True)

    @contextmanager
    def bounded_cache(self, limit: str = WRITE_CACHE_LIMIT) -> Iterator[None]:
        """Bound DuckDB's memory while the block writes batch after batch (a run).

        DuckDB keeps every block it wrote cached up to its memory limit (most of the
        machine's memory by default), so a long run's memory grew with the rows it stored.
        Within the bound the cache is evicted instead; what DuckDB must hold in memory (the
        key indexes) still grows with the rows, and a batch that does not fit lifts the bound
        (see :meth:`write_batch`). The previous limit is restored when the block ends.

        Within the block (the outermost, when nested), a batch also leaves out the shared
        message texts that the block's own committed transactions stored; they are forgotten
        when it ends, so rows written after a run was deleted name texts written again.

        Args:
            limit: DuckDB memory limit for the block, e.g. ``"256MB"``.
        """
        self._write_blocks += 1
        try:
            with self._bounded_cache(limit):
                yield
        finally:
            self._write_blocks -= 1
            if not self._write_blocks:
                self._stored_texts.clear()

    @contextmanager
    def _bounded_cache(self, limit: str) -> Iterator[None]:
        if self.read_only or self._cache_bound is not None:
            yield
            return
        row = self.con.execute("SELECT current_setting('memory_limit')").fetchone()
        try:
            self.con.execute(f"SET memory_limit = '{limit}'")
        except duckdb.Error:  # already holding more than the bound: leave it as it is
            yield
            return
        self._cache_bound = str(row[0]) if row else ""
        try:
            yield
        finally:
            self._lift_cache_bound()

    def _lift_cache_bound(self) -> None:
        previous, self._cache_bound = self._cache_bound, None
        if previous is None:
            return
        with contextlib.suppress(duckdb.Error):  # a closed or failed connection
            # DuckDB shows the limit rounded: the default comes back exactly with RESET.
            self.con.execute("RESET memory_limit")
            row = self.con.execute("SELECT current_setting('memory_limit')").fetchone()
            if previous and (row is None or str(row[0]) != previous):
                self.con.execute(f"SET memory_limit = '{previous}'")

    def _transaction(self, produce: Callable[[WriteRows], None], *, ignore_existing: bool) -> None:
        self._ignore_existing = ignore_existing
        written: list[tuple[Any, str]] = []
        self._transaction_texts = written
        try:
            self.con.execute("BEGIN TRANSACTION")
            try:
                produce(self.insert_rows)
                with _owner_only_files():
                    self.con.execute("COMMIT")
            except BaseException:
                rollback(self.con)
                raise
            # Committed: these texts are stored (a rolled-back transaction adds none).
            if written and self._write_blocks:
                if len(self._stored_texts) + len(written) > _STORED_TEXTS:
                    self._stored_texts.clear()
                self._stored_texts.update(written)
        finally:
            self._ignore_existing = True
            self._transaction_texts = None

    def query(self, sql: str, params: Iterable[Any] | None = None) -> list[dict[str, Any]]:
        """Run a query and return rows as dicts."""
        cursor = self.con.execute(sql, list(params or []))
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def get_run(self, run_id: str) -> dict[str, Any]:
        """One run's row; accepts any unique part of the run id (an exact id always wins)."""
        rows = self.query("SELECT * FROM runs WHERE run_id = ?", [run_id])
        if not rows:
            rows = self.query(
                "SELECT * FROM runs WHERE contains(run_id, ?) ORDER BY run_id", [run_id]
            )
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        if len(rows) > 1:
            shown = ", ".join(r["run_id"] for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
            raise StoreError(f"run id {run_id!r} is ambiguous in {self.path}: it matches {shown}")
        row = rows[0]
        for key in ("rubric_json", "models", "config", "versions"):
            if isinstance(row.get(key), str):
                row[key] = json.loads(row[key])
        return row

    def set_run_status(
        self, run_id: str, status: str, *, finished: bool = False, reason: str | None = None
    ) -> None:
        """Update a run's status (and finish time).

        Args:
            run_id: The run.
            status: New status (running, completed, failed, interrupted, budget_exhausted).
            finished: Stamp the finish time.
            reason: Why the run stopped (kept until the next status change).
        """
        stamp = now()
        with _owner_only_files():
            self.con.execute(
                "UPDATE runs SET status = ?, updated_at = ?, finished_at = ?, status_reason = ? "
                "WHERE run_id = ?",
                [status, stamp, stamp if finished else None, _clean(reason), run_id],
            )


def _clean(reason: str | None) -> str | None:
    # A reason can quote a provider's error, which can quote the key or URL it was sent.
    return redact_secrets(reason) if reason else reason
