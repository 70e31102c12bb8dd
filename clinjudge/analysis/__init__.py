"""Statistics over stored runs: agreement with physicians (ICC and friends), comparisons of judge
configurations, vendor audits, DocLens scores and run summaries.

Results are typed (frozen pydantic models with ``to_dict()`` for ``--json``). Names load on first
use: ``judge agree --help`` must not pay for scipy, the store and the model clients.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clinjudge._util.lazy_module import lazy_exports

if TYPE_CHECKING:
    from clinjudge.analysis._agreement import (
        RatingRecord,
        analyse_ratings,
    )
    from clinjudge.analysis._agreement_result import (
        AgreementAnalysis,
        AgreementResult,
        AttributeAgreement,
        ComputedStatistic,
        Interval,
        JudgeVsPhysicians,
        PhysiciansAgreement,
        StatisticRow,
    )
    from clinjudge.analysis._agreement_run import (
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
    from clinjudge.analysis._audit import (
        AUDIT_BOOT,
        NO_PRM_NOTE,
        AuditError,
        audit_for_run,
        audit_plan,
        bootstrap_mean_ci,
        flag_items,
        holm_adjust,
        paired_comparisons,
        run_flag_rules,
        unplaced_ratings,
        vendor_summaries,
    )
    from clinjudge.analysis._audit_result import (
        AuditPlan,
        AuditStatistics,
        PPIMean,
    )
    from clinjudge.analysis._columns import (
        SORT_COLUMNS,
    )
    from clinjudge.analysis._compare import (
        BlockSummary,
        Comparison,
        ComparisonRow,
        block_summary,
        compare_runs,
    )
    from clinjudge.analysis._doclens_official import (
        COMPATS,
        official_pooled,
        run_compat,
    )
    from clinjudge.analysis._doclens_result import (
        DocLensReport,
    )
    from clinjudge.analysis._doclens_scores import (
        METRICS,
        TOTAL,
        doclens_report,
        export_doclens_scores,
        instance_tallies,
        macro_scores,
        pooled_scores,
    )
    from clinjudge.analysis._ppi import expected_half_widths, ppi_means
    from clinjudge.analysis._probe import (
        ProbeCell,
        ProbeComparisonRow,
        ProbeRow,
        ProbeStatistics,
        ProbeVerdict,
        probe_comparison,
        probe_statistics,
        wilson_interval,
    )
    from clinjudge.analysis._statistics import (
        Column,
        Estimate,
        PairedScores,
        Statistic,
        block_rows,
        column_row,
        compare_values,
        computed_statistics,
        get_statistic,
        register_statistic,
        sort_columns,
        statistic_names,
        table_columns,
        unregister_statistic,
    )
    from clinjudge.analysis._stats import (
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
    from clinjudge.analysis._summary import (
        failure_reason,
        failures_by_reason,
        identical_samples_note,
        item_scores,
        run_summary,
        score_distributions,
    )
    from clinjudge.analysis._summary_result import (
        ItemScores,
        RunSummary,
        ScoreDistribution,
    )

    # Plain reads, kept under their old names here: the queries are runs' (#24).
    from clinjudge.runs.analysis_reads import (
        final_score_counts,
        flagged_items,
        has_prm_steps,
        list_runs,
    )

_LAZY: dict[str, str] = {
    "RunSummary": "_summary_result",
    "ScoreDistribution": "_summary_result",
    "ItemScores": "_summary_result",
    "AuditPlan": "_audit_result",
    "AuditStatistics": "_audit_result",
    "DocLensReport": "_doclens_result",
    "PPIMean": "_audit_result",
    "ProbeCell": "_probe",
    "ProbeComparisonRow": "_probe",
    "ProbeRow": "_probe",
    "ProbeStatistics": "_probe",
    "ProbeVerdict": "_probe",
    "probe_comparison": "_probe",
    "probe_statistics": "_probe",
    "wilson_interval": "_probe",
    "AgreementAnalysis": "_agreement_result",
    "AgreementError": "_agreement_run",
    "AgreementResult": "_agreement_result",
    "AttributeAgreement": "_agreement_result",
    "AuditError": "_audit",
    "BlockSummary": "_compare",
    "COMPATS": "_doclens_official",
    "Comparison": "_compare",
    "ComparisonRow": "_compare",
    "Interval": "_agreement_result",
    "ComputedStatistic": "_agreement_result",
    "StatisticRow": "_agreement_result",
    "Column": "_statistics",
    "Estimate": "_statistics",
    "PairedScores": "_statistics",
    "Statistic": "_statistics",
    "block_rows": "_statistics",
    "column_row": "_statistics",
    "compare_values": "_statistics",
    "computed_statistics": "_statistics",
    "get_statistic": "_statistics",
    "register_statistic": "_statistics",
    "sort_columns": "_statistics",
    "statistic_names": "_statistics",
    "table_columns": "_statistics",
    "unregister_statistic": "_statistics",
    "JUDGE_RATER": "_agreement_run",
    "JudgeVsPhysicians": "_agreement_result",
    "METRICS": "_doclens_scores",
    "NO_PRM_NOTE": "_audit",
    "PhysiciansAgreement": "_agreement_result",
    "RatingRecord": "_agreement",
    "SORT_COLUMNS": "_columns",
    "TOTAL": "_doclens_scores",
    "added_rater_bootstrap": "_stats",
    "agreement_attributes": "_agreement_run",
    "agreement_for_file": "_agreement_run",
    "agreement_for_run": "_agreement_run",
    "analyse_ratings": "_agreement",
    "audit_for_run": "_audit",
    "AUDIT_BOOT": "_audit",
    "audit_plan": "_audit",
    "binary_attributes": "_agreement_run",
    "block_summary": "_compare",
    "bootstrap_mean_ci": "_audit",
    "cohen_kappa": "_stats",
    "compare_runs": "_compare",
    "doclens_report": "_doclens_scores",
    "export_doclens_scores": "_doclens_scores",
    "failure_reason": "_summary",
    "failures_by_reason": "_summary",
    "flag_items": "_audit",
    "fleiss_kappa": "_stats",
    "gwet_ac2": "_stats",
    "holm_adjust": "_audit",
    "icc_forms": "_stats",
    "identical_samples_note": "_summary",
    "instance_tallies": "_doclens_scores",
    "item_scores": "_summary",
    "krippendorff_alpha": "_stats",
    "macro_scores": "_doclens_scores",
    "mean_abs_difference": "_agreement_run",
    "official_pooled": "_doclens_official",
    "paired_comparisons": "_audit",
    "percent_agreement": "_stats",
    "ppi_means": "_ppi",  # the rating server's progress page (#38)
    "expected_half_widths": "_ppi",
    "pooled_scores": "_doclens_scores",
    "rubric_categories": "_agreement_run",
    "run_compat": "_doclens_official",
    "run_flag_rules": "_audit",
    "run_rating_records": "_agreement_run",
    "run_rubric": "_agreement_run",
    "run_summary": "_summary",
    "score_distributions": "_summary",
    "substitution_bootstrap": "_stats",
    "unplaced_ratings": "_audit",
    "vendor_summaries": "_audit",
    "wilcoxon_paired": "_stats",
}
_RUNS = {"final_score_counts", "flagged_items", "has_prm_steps", "list_runs"}

__all__ = [
    "RunSummary",
    "ScoreDistribution",
    "ItemScores",
    "AuditPlan",
    "AuditStatistics",
    "DocLensReport",
    "PPIMean",
    "ProbeCell",
    "ProbeComparisonRow",
    "ProbeRow",
    "ProbeStatistics",
    "ProbeVerdict",
    "probe_comparison",
    "probe_statistics",
    "wilson_interval",
    "AgreementAnalysis",
    "AgreementError",
    "AgreementResult",
    "AttributeAgreement",
    "AuditError",
    "BlockSummary",
    "COMPATS",
    "Comparison",
    "ComparisonRow",
    "Interval",
    "ComputedStatistic",
    "StatisticRow",
    "Column",
    "Estimate",
    "PairedScores",
    "Statistic",
    "block_rows",
    "column_row",
    "compare_values",
    "computed_statistics",
    "get_statistic",
    "register_statistic",
    "sort_columns",
    "statistic_names",
    "table_columns",
    "unregister_statistic",
    "JUDGE_RATER",
    "JudgeVsPhysicians",
    "METRICS",
    "NO_PRM_NOTE",
    "PhysiciansAgreement",
    "RatingRecord",
    "SORT_COLUMNS",
    "TOTAL",
    "added_rater_bootstrap",
    "agreement_attributes",
    "agreement_for_file",
    "agreement_for_run",
    "analyse_ratings",
    "audit_for_run",
    "AUDIT_BOOT",
    "audit_plan",
    "binary_attributes",
    "block_summary",
    "bootstrap_mean_ci",
    "cohen_kappa",
    "compare_runs",
    "doclens_report",
    "export_doclens_scores",
    "failure_reason",
    "failures_by_reason",
    "final_score_counts",
    "flag_items",
    "flagged_items",
    "fleiss_kappa",
    "gwet_ac2",
    "has_prm_steps",
    "holm_adjust",
    "icc_forms",
    "identical_samples_note",
    "instance_tallies",
    "item_scores",
    "krippendorff_alpha",
    "list_runs",
    "macro_scores",
    "mean_abs_difference",
    "official_pooled",
    "paired_comparisons",
    "percent_agreement",
    "ppi_means",
    "expected_half_widths",
    "pooled_scores",
    "rubric_categories",
    "run_compat",
    "run_flag_rules",
    "run_rating_records",
    "run_rubric",
    "run_summary",
    "score_distributions",
    "substitution_bootstrap",
    "unplaced_ratings",
    "vendor_summaries",
    "wilcoxon_paired",
]


_load = lazy_exports(__name__, _LAZY, globals())


def __getattr__(name: str) -> Any:
    if name in _RUNS:
        return getattr(importlib.import_module("clinjudge.runs.analysis_reads"), name)
    return _load(name)


def __dir__() -> list[str]:
    return sorted(__all__)
