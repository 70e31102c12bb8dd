"""Export a run's judgments: one row per (item, sample, agent, attribute)."""

from __future__ import annotations

import os
from pathlib import Path

from clinjudge.runs._store import FINAL_SAMPLE, RunStore

EXPORT_FORMATS = ("jsonl", "csv", "parquet")
EXPORT_TABLES = ("judgments", "claims", "doclens")

_COPY_OPTIONS = {
    "jsonl": "FORMAT json",
    "csv": "FORMAT csv, HEADER true",
    "parquet": "FORMAT parquet",
}


def export_run(
    store: RunStore, run_id: str, out: str | Path, fmt: str, table: str = "judgments"
) -> int:
    """Write a run's judgments to a file; the file appears only once it is complete.

    Columns: run_id, item_id, sample (null on final rows), agent, attribute, value, final, status,
    error, rationale, simulated (true when the scores came from the mock provider).

    Args:
        store: The run store.
        run_id: Run id or unique prefix.
        out: Output path.
        fmt: ``jsonl``, ``csv`` or ``parquet``.
        table: ``judgments``; ``claims`` (DocLens claims, statements and verdicts) or
            ``doclens`` (pooled DocLens scores per section and total).

    Returns:
        Number of rows written.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(
            f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}"
        )
    if table != "judgments":
        from clinjudge.runs._doclens_export import export_doclens

        return export_doclens(store, run_id, out, fmt, table)
    run = store.get_run(run_id)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    query = f"""
        SELECT j.run_id, j.item_id,
               CASE WHEN j.final THEN NULL ELSE j.sample END AS sample,
               j.agent, j.attribute, j.value, j.final, j.status, j.error, j.rationale,
               r.simulated
        FROM judgments j JOIN runs r USING (run_id)
        LEFT JOIN items i ON i.run_id = j.run_id AND i.item_id = j.item_id
        WHERE j.run_id = '{run["run_id"]}'
        ORDER BY i.position, j.final, j.sample, j.agent, j.attribute
    """
    target = str(partial).replace("'", "''")
    try:
        store.con.execute(f"COPY ({query}) TO '{target}' ({_COPY_OPTIONS[fmt]})")
        os.replace(partial, out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    count = store.con.execute(
        "SELECT count(*) FROM judgments WHERE run_id = ?", [run["run_id"]]
    ).fetchone()
    assert FINAL_SAMPLE == 0
    return int(count[0]) if count else 0
