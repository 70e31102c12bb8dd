"""The DuckDB run store, its core: the schema, its version and migrations, every write (runs,
items, samples, calls, judgments, final scores, flags, ratings, provider batches, caches), run
management, exports and merges, and the reads the CLI and the public API make.

What one consumer alone reads lives behind its own front door (docs/architecture.md):
:mod:`clinjudge.runs.analysis_reads` (the statistics), :mod:`clinjudge.runs.report_reads` (the
pages) and :mod:`clinjudge.runs.orchestration_reads` (the runner). Each consumer imports this
core and its own door only (tests/test_architecture.py).
"""

from clinjudge.runs._aggregate import FINAL_AGENT, finalize_run
from clinjudge.runs._agreement_cache import save_agreement
from clinjudge.runs._export import (
    EXPORT_TABLES,
    check_output_file,
    export_run,
    infer_format,
    is_claims_run,
    write_rows,
)
from clinjudge.runs._item_reads import (
    StagedItemRows,
    WriteRows,
    insert_staged_items,
    write_in_one_transaction,
)
from clinjudge.runs._manage import (
    delete_run,
    record_audit_settings,
    rename_run,
    run_counts,
    runs_overview,
    status_label,
)
from clinjudge.runs._merge import merge_databases
from clinjudge.runs._prm_runs import (
    add_prm_results,
    begin_prm_run,
    end_prm_run,
    stored_prm_calls,
    stored_prm_scores,
    write_prm_run,
)
from clinjudge.runs._probes import ProbeSkipRow, ProbeVariantRow, write_probe_rows
from clinjudge.runs._prompt_cache_reads import prompt_cache_by_agent, prompt_cache_totals
from clinjudge.runs._provider_batches import (
    ensure_batch_tables,
    is_batch_run,
    provider_batch_rows,
    queue_requests,
    record_ingested_batch,
    record_submitted_batch,
    return_refused_batch,
    update_batch,
)
from clinjudge.runs._quality_flags import (
    FLAG_MEANINGS,
    flag_run_scores,
    flag_samples,
    quality_flag_rows,
    quality_summary,
)
from clinjudge.runs._rating_plan import PlanError, plan_rating
from clinjudge.runs._rating_store import (
    RATE_SOURCE,
    SavedRating,
    add_session,
    add_token,
    all_human_ratings,
    ensure_rating_tables,
    rating_history_rows,
    record_save,
    revoke_tokens,
)
from clinjudge.runs._ratings import (
    HumanRating,
    ImportSummary,
    import_ratings,
    load_human_ratings,
    ratings_overview,
    stored_ratings_for_run,
)
from clinjudge.runs._response_cache import save_response_cache
from clinjudge.runs._rows import SampleKey, call_row, item_row, verdict_rows, workflow_rows
from clinjudge.runs._run_reads import gate_coercions, run_item_rows, run_table
from clinjudge.runs._store import DB_ENV, DEFAULT_DB, RunStore, StoreError, default_db, now

__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "EXPORT_TABLES",
    "FINAL_AGENT",
    "FLAG_MEANINGS",
    "HumanRating",
    "ImportSummary",
    "PlanError",
    "ProbeSkipRow",
    "ProbeVariantRow",
    "RATE_SOURCE",
    "RunStore",
    "SampleKey",
    "SavedRating",
    "StagedItemRows",
    "StoreError",
    "WriteRows",
    "add_prm_results",
    "add_session",
    "add_token",
    "all_human_ratings",
    "begin_prm_run",
    "call_row",
    "check_output_file",
    "default_db",
    "delete_run",
    "end_prm_run",
    "ensure_batch_tables",
    "ensure_rating_tables",
    "export_run",
    "finalize_run",
    "flag_run_scores",
    "flag_samples",
    "gate_coercions",
    "import_ratings",
    "infer_format",
    "insert_staged_items",
    "is_batch_run",
    "is_claims_run",
    "item_row",
    "load_human_ratings",
    "merge_databases",
    "now",
    "plan_rating",
    "prompt_cache_by_agent",
    "prompt_cache_totals",
    "provider_batch_rows",
    "quality_flag_rows",
    "quality_summary",
    "queue_requests",
    "rating_history_rows",
    "ratings_overview",
    "record_audit_settings",
    "record_ingested_batch",
    "record_save",
    "record_submitted_batch",
    "rename_run",
    "return_refused_batch",
    "revoke_tokens",
    "run_counts",
    "run_item_rows",
    "run_table",
    "runs_overview",
    "save_agreement",
    "save_response_cache",
    "status_label",
    "stored_prm_calls",
    "stored_prm_scores",
    "stored_ratings_for_run",
    "update_batch",
    "verdict_rows",
    "workflow_rows",
    "write_in_one_transaction",
    "write_prm_run",
    "write_probe_rows",
    "write_rows",
]
