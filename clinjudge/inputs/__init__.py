"""Input files: items to judge, vendors' outputs for audits and physicians' ratings, read from
JSONL, CSV or Parquet and validated, with every problem reported by file, line and field; and
flag rules as written.
"""

from clinjudge.inputs._flag_rules import (
    PRM_ATTRIBUTE,
    FlagRule,
    FlagRuleError,
    default_flag_rules,
    number_text,
    parse_flag_rule,
)
from clinjudge.inputs._probe_edits import (
    INVARIANCE_PROBES,
    PROBES,
    ProbeSkip,
    make_variant,
    parse_probes,
)
from clinjudge.inputs._probe_expect import Expectation, probe_expectations
from clinjudge.inputs._rating_checks import RatingRefused, check_item_scores
from clinjudge.inputs._ratings import HumanRating, load_ratings
from clinjudge.inputs._records import (
    InputError,
    check_rubric_inputs,
    in_file_order,
    iter_items,
    load_items,
    parse_json,
    read_records,
    validate_records,
)
from clinjudge.inputs._vendors import (
    AuditItems,
    audit_item_id,
    iter_audit_items,
    load_audit_items,
    unmatched_encounters,
)

__all__ = [
    "AuditItems",
    "Expectation",
    "INVARIANCE_PROBES",
    "PROBES",
    "ProbeSkip",
    "make_variant",
    "parse_probes",
    "probe_expectations",
    "FlagRule",
    "FlagRuleError",
    "HumanRating",
    "PRM_ATTRIBUTE",
    "default_flag_rules",
    "number_text",
    "parse_flag_rule",
    "InputError",
    "audit_item_id",
    "check_rubric_inputs",
    "in_file_order",
    "iter_items",
    "iter_audit_items",
    "load_audit_items",
    "load_items",
    "load_ratings",
    "parse_json",
    "read_records",
    "unmatched_encounters",
    "validate_records",
    "RatingRefused",
    "check_item_scores",
]
