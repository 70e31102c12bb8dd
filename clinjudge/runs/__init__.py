"""The DuckDB run store, inputs, aggregation, summaries, exports, agreement and reports."""

from clinjudge.runs._aggregate import FINAL_AGENT, final_rows, finalize_run
from clinjudge.runs._agreement import RatingRecord, analyse_ratings, load_ratings_file
from clinjudge.runs._agreement_run import (
    JUDGE_RATER,
    AgreementError,
    agreement_attributes,
    agreement_for_file,
    agreement_for_run,
    binary_attributes,
    mean_abs_difference,
    rubric_categories,
    run_rating_records,
    run_rubric,
)
from clinjudge.runs._compare import SORT_COLUMNS, Comparison, block_summary, compare_runs
from clinjudge.runs._export import EXPORT_FORMATS, export_run
from clinjudge.runs._html_report import ReportFiles, render_report, write_report
from clinjudge.runs._inputs import (
    InputError,
    check_rubric_inputs,
    load_items,
    read_records,
    validate_records,
)
from clinjudge.runs._ratings import (
    HumanRating,
    ImportSummary,
    import_ratings,
    load_human_ratings,
    ratings_overview,
)
from clinjudge.runs._report import list_runs, run_summary
from clinjudge.runs._rows import SampleKey, call_row, item_from_row, item_row, verdict_rows
from clinjudge.runs._stats import (
    added_rater_bootstrap,
    cohen_kappa,
    fleiss_kappa,
    gwet_ac2,
    icc_forms,
    krippendorff_alpha,
    percent_agreement,
    substitution_bootstrap,
    wilcoxon_paired,
)
from clinjudge.runs._store import DEFAULT_DB, FINAL_SAMPLE, RunStore, StoreError, now

__all__ = [
    "AgreementError",
    "Comparison",
    "DEFAULT_DB",
    "EXPORT_FORMATS",
    "FINAL_AGENT",
    "FINAL_SAMPLE",
    "HumanRating",
    "ImportSummary",
    "InputError",
    "JUDGE_RATER",
    "RatingRecord",
    "ReportFiles",
    "RunStore",
    "SORT_COLUMNS",
    "SampleKey",
    "StoreError",
    "added_rater_bootstrap",
    "agreement_attributes",
    "agreement_for_file",
    "agreement_for_run",
    "analyse_ratings",
    "binary_attributes",
    "block_summary",
    "call_row",
    "check_rubric_inputs",
    "cohen_kappa",
    "compare_runs",
    "export_run",
    "final_rows",
    "finalize_run",
    "fleiss_kappa",
    "gwet_ac2",
    "icc_forms",
    "import_ratings",
    "item_from_row",
    "item_row",
    "krippendorff_alpha",
    "list_runs",
    "load_human_ratings",
    "load_items",
    "load_ratings_file",
    "mean_abs_difference",
    "now",
    "percent_agreement",
    "ratings_overview",
    "read_records",
    "render_report",
    "rubric_categories",
    "run_rating_records",
    "run_rubric",
    "run_summary",
    "substitution_bootstrap",
    "validate_records",
    "verdict_rows",
    "wilcoxon_paired",
    "write_report",
]
