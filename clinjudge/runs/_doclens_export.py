"""Export a DocLens run's claims, or its pooled scores, to JSONL, CSV or Parquet."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from clinjudge.errors import UserError
from clinjudge.runs._doclens_report import doclens_report
from clinjudge.runs._export import copy_query
from clinjudge.runs._store import RunStore, StoreError

_CLAIMS_QUERY = """
    SELECT c.run_id, c.item_id, c.sample, c.agent, c.section, c.kind, c.idx, c.text, c.verdict,
           c.score, c.explanation, c.citations, c.supporting, {official} AS official, c.status,
           c.error, r.simulated
    FROM claims c JOIN runs r USING (run_id)
    LEFT JOIN items i ON i.run_id = c.run_id AND i.item_id = c.item_id
    WHERE c.run_id = ?
    ORDER BY i.position, c.sample, c.agent, c.kind, c.idx
"""


def export_doclens(
    store: RunStore, run_id: str, out: str | Path, fmt: str, table: str, compat: str | None = None
) -> int:
    """Write a DocLens run's ``claims`` rows or ``doclens`` pooled scores to a file.

    Args:
        store: The run store.
        run_id: Run id or unique prefix.
        out: Output path (appears only once complete).
        fmt: ``jsonl``, ``csv`` or ``parquet``.
        table: ``claims`` or ``doclens``.
        compat: Arithmetic of the ``doclens`` scores: ``clinjudge`` or ``official`` (default:
            the run's own setting); claims rows are the raw verdicts either way.

    Returns:
        Number of rows written.
    """
    report = doclens_report(store, run_id, compat)
    if report is None:
        raise StoreError(f"run {run_id!r} does not use a claim rubric (DocLens); nothing to export")
    rid = store.get_run(run_id)["run_id"].replace("'", "''")
    out = Path(out)
    if table == "claims":
        official = "c.official" if store.has_column("claims", "official") else "NULL"
        query = _CLAIMS_QUERY.replace("?", f"'{rid}'").format(official=official)
        copy_query(store, query, out, fmt)
        count = store.con.execute("SELECT count(*) FROM claims WHERE run_id = ?", [rid]).fetchone()
        return int(count[0]) if count else 0
    if table != "doclens":
        raise UserError(f"unknown export table {table!r}; choose judgments, claims or doclens")
    head = {"agent": report["agent"], "compat": report["compat"]}
    rows = [{**head, **row} for row in report["pooled"]]
    if not rows:
        rows = [{**head, "section": "total"}]
    arrow = pa.Table.from_pylist(rows)
    store.con.register("_doclens_scores", arrow)
    try:
        copy_query(store, "SELECT * FROM _doclens_scores", out, fmt)
    finally:
        store.con.unregister("_doclens_scores")
    return len(rows)
