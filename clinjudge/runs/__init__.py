"""The DuckDB run store, inputs, aggregation, summaries and exports."""

from clinjudge.runs._aggregate import FINAL_AGENT, final_rows, finalize_run
from clinjudge.runs._export import EXPORT_FORMATS, export_run
from clinjudge.runs._inputs import (
    InputError,
    check_rubric_inputs,
    load_items,
    read_records,
    validate_records,
)
from clinjudge.runs._report import list_runs, run_summary
from clinjudge.runs._rows import SampleKey, call_row, item_from_row, item_row, verdict_rows
from clinjudge.runs._store import DEFAULT_DB, FINAL_SAMPLE, RunStore, StoreError, now

__all__ = [
    "DEFAULT_DB",
    "EXPORT_FORMATS",
    "FINAL_AGENT",
    "FINAL_SAMPLE",
    "InputError",
    "RunStore",
    "SampleKey",
    "StoreError",
    "call_row",
    "check_rubric_inputs",
    "export_run",
    "final_rows",
    "finalize_run",
    "item_from_row",
    "item_row",
    "list_runs",
    "load_items",
    "now",
    "read_records",
    "run_summary",
    "validate_records",
    "verdict_rows",
]
