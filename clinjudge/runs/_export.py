"""Export a run's judgments (one row per item, sample, agent, attribute), its discussions, its
DocLens claims or its PRM steps, to JSON Lines, a JSON array, CSV or Parquet."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from clinjudge._util.lazy_module import LazyModule
from clinjudge.errors import UserError
from clinjudge.runs._store import (
    RunStore,
    StoreError,
    _owner_only_files,
    disk_full_error,
    disk_full_reason,
)

if TYPE_CHECKING:
    import pyarrow as pa
else:  # loaded on first use: `judge runs list` and `runs show` write no Arrow table
    pa = LazyModule("pyarrow")

EXPORT_FORMATS = ("jsonl", "json", "csv", "parquet")
EXPORT_TABLES = ("judgments", "wide", "transcripts", "claims", "prm_steps", "quality_flags")
"""Tables ``export_run`` writes (a DocLens run's pooled scores come from ``analysis``)."""

# File name endings that name a format; anything else needs an explicit format.
FORMAT_BY_SUFFIX = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}

_COPY_OPTIONS = {
    "jsonl": "FORMAT json",
    # One JSON array, as a `.json` name promises (a JSON Lines file is no JSON document).
    "json": "FORMAT json, ARRAY true",
    "csv": "FORMAT csv, HEADER true",
    "parquet": "FORMAT parquet",
}

_JUDGMENTS_QUERY = """
    SELECT j.run_id, j.item_id,
           CASE WHEN j.final THEN NULL ELSE j.sample END AS sample,
           j.agent, j.attribute, j.value, j.final, j.status, j.error, j.rationale,
           r.simulated, {item_flags} AS item_flags, {suspect} AS suspect_flags
    FROM judgments j JOIN runs r USING (run_id)
    LEFT JOIN items i ON i.run_id = j.run_id AND i.item_id = j.item_id
    WHERE j.run_id = '{run_id}'
    ORDER BY i.position, j.final, j.sample, j.agent, j.attribute
"""

# Discussion turns carry a leading label such as "[round 2] " or "[attempt 2, final] " (magentic).
_LABEL = r"^\[(?:attempt [0-9]+, )?(round [0-9]+|final|briefing|evidence|task)\] "
_TRANSCRIPTS_QUERY = """
    SELECT m.run_id, m.item_id, m.sample, m.seq, m.agent, m.role,
           NULLIF(regexp_extract(m.content, '{label}', 1), '') AS phase,
           TRY_CAST(NULLIF(regexp_extract(regexp_extract(m.content, '{label}', 1),
                                          'round ([0-9]+)', 1), '') AS INTEGER) AS round,
           regexp_replace(m.content, '{label}', '') AS text,
           r.simulated
    FROM messages m JOIN runs r USING (run_id)
    LEFT JOIN items i ON i.run_id = m.run_id AND i.item_id = m.item_id
    WHERE m.run_id = '{run_id}'
    ORDER BY i.position, m.sample, m.seq, m.agent
"""

_PRM_STEPS_QUERY = """
    SELECT run_id, item_id, candidate, step, kind, text, score, flagged, label, model
    FROM prm_steps WHERE run_id = '{run_id}'
    ORDER BY item_id, candidate, step
"""


_CLAIMS_QUERY = """
    SELECT c.run_id, c.item_id, c.sample, c.agent, c.section, c.kind, c.idx, c.text, c.verdict,
           c.score, c.explanation, c.citations, c.supporting, {official} AS official, c.status,
           c.error, r.simulated
    FROM claims c JOIN runs r USING (run_id)
    LEFT JOIN items i ON i.run_id = c.run_id AND i.item_id = c.item_id
    WHERE c.run_id = ?
    ORDER BY i.position, c.sample, c.agent, c.kind, c.idx
"""


def check_output_file(out: Path, *, make_folder: bool = True) -> None:
    """Refuse an output path that is not, or cannot become, a regular file.

    A symbolic link would send the export elsewhere; a FIFO, a device or a socket would be
    replaced or written into; a folder or a path under a file cannot be written. No flag
    overrides this (``--force`` replaces regular files only), so the message says what to do.

    Args:
        out: The output path.
        make_folder: Create the file's folder if absent (False: only check, change nothing).

    Raises:
        StoreError: Naming the path and what it is.
    """
    try:
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:  # e.g. a path under a regular file
        raise StoreError(f"{out}: cannot write there: {exc.strerror or exc}") from exc
    if mode is not None and stat.S_ISDIR(mode):
        raise StoreError(
            f"{out}: is a folder, and a folder cannot be overwritten with a file (not even with "
            "--force): name a file path"
        )
    if mode is not None and not stat.S_ISREG(mode):
        kinds = {
            stat.S_ISLNK: "a symbolic link",
            stat.S_ISFIFO: "a FIFO",
            stat.S_ISCHR: "a device",
            stat.S_ISBLK: "a device",
            stat.S_ISSOCK: "a socket",
        }
        kind = next((name for test, name in kinds.items() if test(mode)), "not a regular file")
        raise StoreError(
            f"{out}: is {kind}; exports are written to regular files only: name a file path"
        )
    if not make_folder:
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"{out}: cannot create its folder {out.parent}: {exc.strerror or exc}"
        ) from exc


def copy_query(store: RunStore, query: str, out: str | Path, fmt: str) -> None:
    """Write a query's rows to ``out``; the file appears only once it is complete.

    Args:
        store: The run store.
        query: A SELECT over the store.
        out: Output path.
        fmt: ``jsonl``, ``json``, ``csv`` or ``parquet``.
    """
    out = Path(out)
    check_output_file(out)
    partial = out.with_name(f".{out.name}.partial")
    target = str(partial).replace("'", "''")
    try:
        # Exports hold clinical text: owner-only, like the store they come from.
        with _owner_only_files():
            store.con.execute(f"COPY ({query}) TO '{target}' ({_COPY_OPTIONS[fmt]})")
        os.chmod(partial, stat.S_IRUSR | stat.S_IWUSR)
        os.replace(partial, out)
    except (OSError, duckdb.Error) as exc:
        partial.unlink(missing_ok=True)
        # DuckDB names the partial file, and may say no more than "IO Error": name the file
        # the user asked for, and what to do.
        reason = disk_full_reason(exc)
        if reason is not None:
            raise disk_full_error(out, reason) from exc
        raise
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_rows(store: RunStore, rows: list[dict[str, Any]], out: str | Path, fmt: str) -> int:
    """Write rows computed outside the store (e.g. pooled scores) like any export.

    Args:
        store: The run store (its connection writes the file).
        rows: The rows, all with the same keys.
        out: Output path (appears only once complete).
        fmt: ``jsonl``, ``json``, ``csv`` or ``parquet``.

    Returns:
        Number of rows written.
    """
    view = f"_export_rows_{uuid.uuid4().hex}"
    store.con.register(view, pa.Table.from_pylist(rows))
    try:
        copy_query(store, f"SELECT * FROM {view}", out, fmt)
    finally:
        store.con.unregister(view)
    return len(rows)


def infer_format(out: str | Path, fmt: str | None = None) -> str:
    """The export format: from ``fmt`` if given, else from the file name's ending.

    Args:
        out: Output path.
        fmt: ``jsonl``, ``json``, ``csv`` or ``parquet``, or None to go by the ending.

    Raises:
        UserError: ``fmt`` is unknown, contradicts the ending, or neither names a format.
    """
    suffix = Path(out).suffix.lower()
    by_name = FORMAT_BY_SUFFIX.get(suffix)
    if fmt is not None:
        if fmt not in EXPORT_FORMATS:
            raise UserError(f"unknown format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
        if by_name is not None and by_name != fmt:
            raise UserError(
                f"{out}: the name ends in {suffix} ({by_name}) but the format is {fmt}; "
                f"rename the file or leave the format out"
            )
        return fmt
    if by_name is None:
        known = ", ".join(sorted(FORMAT_BY_SUFFIX))
        raise UserError(
            f"{out}: cannot tell the format from the name (known endings: {known}); "
            f"give the format: {', '.join(EXPORT_FORMATS)}"
        )
    return by_name


def _count(store: RunStore, table: str, run_id: str) -> int:
    row = store.con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [run_id]).fetchone()
    return int(row[0]) if row else 0


def export_run(
    store: RunStore,
    run_id: str,
    out: str | Path,
    fmt: str,
    table: str = "judgments",
) -> int:
    """Write one table of a run to a file; the file appears only once it is complete.

    ``judgments`` columns: run_id, item_id, sample (null on final rows), agent, attribute, value,
    final, status, error, rationale, simulated (true when the scores came from the mock
    provider), item_flags (what in the item's text addresses the judge, as JSON).
    ``transcripts`` columns: run_id, item_id, sample, seq, agent, role, phase (``round N``,
    ``final``, ``briefing``, ``evidence`` or ``task`` in magentic discussions), round, text,
    simulated.

    Args:
        store: The run store.
        run_id: Run id or unique prefix.
        out: Output path.
        fmt: ``jsonl``, ``json``, ``csv`` or ``parquet``.
        table: ``judgments``; ``wide`` (one row per item: each attribute's final score as
            a column, valid, samples_failed, suspect_flags, item_flags, calls, cost_usd, for
            spreadsheets); ``transcripts`` (every message, discussions included);
            ``claims`` (DocLens claims, statements and verdicts); ``prm_steps`` (PRM step
            scores, of a ``judge prm`` run or a judge run with ``--prm``); ``quality_flags``
            (suspect-judgment flags, docs/trust.md). A DocLens run's
            pooled scores are computed, not stored: ``analysis.export_doclens_scores``.

    Returns:
        Number of rows written.
    """
    if fmt not in EXPORT_FORMATS:
        raise UserError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    if table not in EXPORT_TABLES:
        raise UserError(f"unknown export table {table!r}; choose one of {', '.join(EXPORT_TABLES)}")
    run = store.get_run(run_id)
    rid = str(run["run_id"]).replace("'", "''")
    if table == "claims":
        return export_claims(store, run_id, out, fmt)
    if table == "prm_steps":
        if not _count(store, "prm_steps", run["run_id"]):
            raise StoreError(f"run {run['run_id']} has no PRM steps (it ran without a PRM)")
        copy_query(store, _PRM_STEPS_QUERY.format(run_id=rid), out, fmt)
        return _count(store, "prm_steps", run["run_id"])
    _refuse_prm_run(run)
    if table == "transcripts":
        query = _TRANSCRIPTS_QUERY.format(run_id=rid, label=_LABEL)
        copy_query(store, query, out, fmt)
        return _count(store, "messages", run["run_id"])
    if table == "quality_flags":
        copy_query(store, _FLAGS_QUERY.format(run_id=rid), out, fmt)
        return _count(store, "quality_flags", run["run_id"])
    if table == "wide":
        copy_query(store, _wide_query(store, run), out, fmt)
        return _count(store, "items", run["run_id"])
    # A database opened read-only from before items.flags existed has no such column.
    flags = "i.flags" if store.has_column("items", "flags") else "NULL::JSON"
    # Likewise quality_flags (schema 7): a sample's suspect-judgment flags, by name.
    suspect = _SUSPECT if store.has_table("quality_flags") else "NULL::VARCHAR[]"
    query = _JUDGMENTS_QUERY.format(run_id=rid, item_flags=flags, suspect=suspect)
    copy_query(store, query, out, fmt)
    return _count(store, "judgments", run["run_id"])


_SUSPECT = """(SELECT list(DISTINCT f.flag ORDER BY f.flag) FROM quality_flags f
      WHERE f.run_id = j.run_id AND f.item_id = j.item_id AND f.sample = j.sample
        AND f.agent = j.agent AND NOT j.final)"""

_FLAGS_QUERY = """
    SELECT run_id, NULLIF(item_id, '') AS item_id, CASE WHEN item_id = '' THEN NULL ELSE sample
           END AS sample, NULLIF(agent, '') AS agent, flag, NULLIF(attribute, '') AS attribute,
           detail
    FROM quality_flags WHERE run_id = '{run_id}'
    ORDER BY item_id <> '', item_id, sample, agent, flag, attribute
"""


def _attributes(store: RunStore, run: dict[str, Any]) -> list[str]:
    """The run's attributes with final scores, in its rubric's order (then any others)."""
    rows = store.con.execute(
        "SELECT DISTINCT attribute FROM judgments WHERE run_id = ? AND final ORDER BY attribute",
        [run["run_id"]],
    ).fetchall()
    found = [str(row[0]) for row in rows]
    rubric = run.get("rubric_json")
    if isinstance(rubric, str):
        rubric = json.loads(rubric)
    names = list((rubric or {}).get("attributes") or []) if isinstance(rubric, dict) else []
    order = [n if isinstance(n, str) else str(n.get("key", "")) for n in names]
    return [a for a in order if a in found] + [a for a in found if a not in order]


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _sql_name(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


_WIDE_FIXED = frozenset(
    [
        "run_id",
        "item_id",
        "vendor",
        "valid",
        "samples_failed",
        "suspect_flags",
        "item_flags",
        "calls",
        "cost_usd",
        "simulated",
    ]
)
"""The columns of the wide export besides the scores."""


def _wide_query(store: RunStore, run: dict[str, Any]) -> str:
    """One row per item, for spreadsheets: the final score of each attribute as a column
    (named as the attribute), whether every final score is valid, samples failed, the
    suspect-judgment flags of its samples, what in its text addresses the judge, its calls and
    their cost.
    """
    rid = _sql_text(str(run["run_id"]))
    # An attribute named like a fixed column (``valid``, ``calls``...) gets a ``score_``
    # prefix: a file with two columns of one name does not load into a spreadsheet or pandas.
    scores = "".join(
        f"max(j.value) FILTER (WHERE j.attribute = {_sql_text(a)}) AS "
        f"{_sql_name('score_' + a if a in _WIDE_FIXED else a)}, "
        for a in _attributes(store, run)
    )
    flags = "i.flags" if store.has_column("items", "flags") else "NULL::JSON"
    suspect = (
        "(SELECT list(DISTINCT f.flag ORDER BY f.flag) FROM quality_flags f WHERE f.run_id = "
        "i.run_id AND f.item_id = i.item_id)"
        if store.has_table("quality_flags")
        else "NULL::VARCHAR[]"
    )
    return f"""
        SELECT i.run_id, i.item_id, i.vendor, {scores}
               coalesce(bool_and(j.status = 'ok'), false) AS valid,
               (SELECT count(DISTINCT s.sample) FROM judgments s WHERE s.run_id = i.run_id
                  AND s.item_id = i.item_id AND NOT s.final AND s.status <> 'ok')
                  AS samples_failed,
               {suspect} AS suspect_flags, {flags} AS item_flags,
               (SELECT count(*) FROM calls c WHERE c.run_id = i.run_id
                  AND c.item_id = i.item_id) AS calls,
               (SELECT sum(c.cost_usd) FROM calls c WHERE c.run_id = i.run_id
                  AND c.item_id = i.item_id) AS cost_usd,
               r.simulated
        FROM items i JOIN runs r USING (run_id)
        LEFT JOIN judgments j ON j.run_id = i.run_id AND j.item_id = i.item_id AND j.final
        WHERE i.run_id = {rid}
        GROUP BY i.run_id, i.item_id, i.vendor, i.position, {flags}, r.simulated
        ORDER BY i.position
    """


def _refuse_prm_run(run: dict[str, Any]) -> None:
    if run.get("mode") == "prm":
        raise StoreError(
            f"run {run['run_id']} is a PRM scoring run (judge prm): it has no judgments; "
            "export its steps (table prm_steps)",
            setting="table=prm_steps",
        )


def is_claims_run(run: dict[str, Any]) -> bool:
    """Whether a stored run's rubric computes its attributes from claims (DocLens).

    Args:
        run: The run's row (``RunStore.get_run``).
    """
    rubric = run.get("rubric_json")
    if isinstance(rubric, str):
        rubric = json.loads(rubric)
    return isinstance(rubric, dict) and rubric.get("method") == "claims"


def export_claims(store: RunStore, run_id: str, out: str | Path, fmt: str) -> int:
    """Write a DocLens run's ``claims`` rows (every claim and its verdicts) to a file.

    Args:
        store: The run store.
        run_id: Run id or unique prefix.
        out: Output path (appears only once complete).
        fmt: ``jsonl``, ``json``, ``csv`` or ``parquet``.

    Returns:
        Number of rows written.
    """
    run = store.get_run(run_id)
    if not is_claims_run(run):
        raise StoreError(f"run {run_id!r} does not use a claim rubric (DocLens); nothing to export")
    rid = run["run_id"].replace("'", "''")
    official = "c.official" if store.has_column("claims", "official") else "NULL"
    query = _CLAIMS_QUERY.replace("?", f"'{rid}'").format(official=official)
    copy_query(store, query, out, fmt)
    count = store.con.execute("SELECT count(*) FROM claims WHERE run_id = ?", [rid]).fetchone()
    return int(count[0]) if count else 0
