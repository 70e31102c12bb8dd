"""Export a run's judgments (one row per item, sample, agent, attribute), its DocLens claims or
pooled scores, or its PRM steps, to JSONL, CSV or Parquet."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from clinjudge.runs._store import RunStore, StoreError

EXPORT_FORMATS = ("jsonl", "csv", "parquet")
EXPORT_TABLES = ("judgments", "claims", "doclens", "prm_steps")

_COPY_OPTIONS = {
    "jsonl": "FORMAT json",
    "csv": "FORMAT csv, HEADER true",
    "parquet": "FORMAT parquet",
}

_JUDGMENTS_QUERY = """
    SELECT j.run_id, j.item_id,
           CASE WHEN j.final THEN NULL ELSE j.sample END AS sample,
           j.agent, j.attribute, j.value, j.final, j.status, j.error, j.rationale,
           r.simulated, {item_flags} AS item_flags
    FROM judgments j JOIN runs r USING (run_id)
    LEFT JOIN items i ON i.run_id = j.run_id AND i.item_id = j.item_id
    WHERE j.run_id = '{run_id}'
    ORDER BY i.position, j.final, j.sample, j.agent, j.attribute
"""

_PRM_STEPS_QUERY = """
    SELECT run_id, item_id, candidate, step, kind, text, score, flagged, label, model
    FROM prm_steps WHERE run_id = '{run_id}'
    ORDER BY item_id, candidate, step
"""


def copy_query(store: RunStore, query: str, out: str | Path, fmt: str) -> None:
    """Write a query's rows to ``out``; the file appears only once it is complete.

    Args:
        store: The run store.
        query: A SELECT over the store.
        out: Output path.
        fmt: ``jsonl``, ``csv`` or ``parquet``.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    target = str(partial).replace("'", "''")
    try:
        store.con.execute(f"COPY ({query}) TO '{target}' ({_COPY_OPTIONS[fmt]})")
        os.replace(partial, out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _count(store: RunStore, table: str, run_id: str) -> int:
    row = store.con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [run_id]).fetchone()
    return int(row[0]) if row else 0


def export_run(
    store: RunStore, run_id: str, out: str | Path, fmt: str, table: str = "judgments"
) -> int:
    """Write one table of a run to a file; the file appears only once it is complete.

    ``judgments`` columns: run_id, item_id, sample (null on final rows), agent, attribute, value,
    final, status, error, rationale, simulated (true when the scores came from the mock
    provider), item_flags (what in the item's text addresses the judge, as JSON).

    Args:
        store: The run store.
        run_id: Run id or unique prefix.
        out: Output path.
        fmt: ``jsonl``, ``csv`` or ``parquet``.
        table: ``judgments``; ``claims`` (DocLens claims, statements and verdicts); ``doclens``
            (pooled DocLens scores per section and total); ``prm_steps`` (PRM step scores, of
            a ``judge prm`` run or a judge run with ``--prm``).

    Returns:
        Number of rows written.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(
            f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}"
        )
    if table not in EXPORT_TABLES:
        raise ValueError(
            f"unknown export table {table!r}; choose one of {', '.join(EXPORT_TABLES)}"
        )
    run = store.get_run(run_id)
    rid = str(run["run_id"]).replace("'", "''")
    if table in ("claims", "doclens"):
        from clinjudge.runs._doclens_export import export_doclens

        return export_doclens(store, run_id, out, fmt, table)
    if table == "prm_steps":
        if not _count(store, "prm_steps", run["run_id"]):
            raise StoreError(f"run {run['run_id']} has no PRM steps (it ran without a PRM)")
        copy_query(store, _PRM_STEPS_QUERY.format(run_id=rid), out, fmt)
        return _count(store, "prm_steps", run["run_id"])
    _refuse_prm_run(run)
    # A database opened read-only from before items.flags existed has no such column.
    flags = "i.flags" if store.has_column("items", "flags") else "NULL::JSON"
    copy_query(store, _JUDGMENTS_QUERY.format(run_id=rid, item_flags=flags), out, fmt)
    return _count(store, "judgments", run["run_id"])


def _refuse_prm_run(run: dict[str, Any]) -> None:
    if run.get("mode") == "prm":
        raise StoreError(
            f"run {run['run_id']} is a PRM scoring run (judge prm): it has no judgments; "
            "export its steps with --table prm_steps"
        )
