"""What the statistics (``analysis``) read of stored runs: run lists, counts, cost and latency,
final scores, item pages, claims, ratings beside final scores, probe variants, audit settings and
cached agreement results. Only ``analysis`` imports this front door (tests/test_architecture.py).
"""

from clinjudge.runs._agreement_cache import load_agreement
from clinjudge.runs._manage import audit_settings
from clinjudge.runs._probes import (
    is_probe_run,
    probe_skip_rows,
    probe_variant_rows,
    valid_final_values,
)
from clinjudge.runs._ratings import final_scores_of_rated, human_ratings_of_run, rated_item_count
from clinjudge.runs._reads import ScoreCount, calls_by_agent, final_score_counts, sample_counts
from clinjudge.runs.analysis_reads._claim_reads import (
    claim_extraction_agents,
    claim_rows,
    item_claim_counts,
    pooled_claim_counts,
)
from clinjudge.runs.analysis_reads._reads import (
    AuditScoreRow,
    audit_score_rows,
    call_totals,
    failed_samples_by_reason,
    final_item_counts,
    final_means,
    final_values,
    flagged_items,
    has_prm_steps,
    item_call_means,
    item_call_quantiles,
    item_page,
    list_runs,
    lowest_prm_scores,
    reply_copies,
    run_item_count,
    top_sample_errors,
    vendor_call_totals,
)

__all__ = [
    "AuditScoreRow",
    "ScoreCount",
    "audit_score_rows",
    "audit_settings",
    "call_totals",
    "calls_by_agent",
    "claim_extraction_agents",
    "claim_rows",
    "failed_samples_by_reason",
    "final_item_counts",
    "final_means",
    "final_score_counts",
    "final_scores_of_rated",
    "final_values",
    "flagged_items",
    "has_prm_steps",
    "human_ratings_of_run",
    "is_probe_run",
    "item_call_means",
    "item_call_quantiles",
    "item_claim_counts",
    "item_page",
    "list_runs",
    "load_agreement",
    "lowest_prm_scores",
    "pooled_claim_counts",
    "probe_skip_rows",
    "probe_variant_rows",
    "rated_item_count",
    "reply_copies",
    "run_item_count",
    "sample_counts",
    "top_sample_errors",
    "valid_final_values",
    "vendor_call_totals",
]
