"""Input files: items to judge, vendors' outputs for audits and physicians' ratings, read from
JSONL, CSV or Parquet and validated, with every problem reported by file, line and field; and
flag rules as written.
"""

from clinjudge.inputs._flag_rules import (
    DEFAULT_FLAG_RULES,
    PRM_ATTRIBUTE,
    FlagRule,
    FlagRuleError,
    default_flag_rules,
    number_text,
    parse_flag_rule,
)
from clinjudge.inputs._ratings import (
    ITEM_ID_ALIAS,
    HumanRating,
    is_null_score,
    load_ratings,
)
from clinjudge.inputs._records import (
    MAX_REPORTED_ERRORS,
    InputError,
    check_rubric_inputs,
    load_items,
    read_records,
    validate_records,
)
from clinjudge.inputs._vendors import (
    ID_SEPARATOR,
    AuditItems,
    audit_item_id,
    load_audit_items,
    unmatched_encounters,
)

__all__ = [
    "AuditItems",
    "DEFAULT_FLAG_RULES",
    "FlagRule",
    "FlagRuleError",
    "HumanRating",
    "ITEM_ID_ALIAS",
    "PRM_ATTRIBUTE",
    "default_flag_rules",
    "number_text",
    "parse_flag_rule",
    "ID_SEPARATOR",
    "InputError",
    "MAX_REPORTED_ERRORS",
    "audit_item_id",
    "check_rubric_inputs",
    "is_null_score",
    "load_audit_items",
    "load_items",
    "load_ratings",
    "read_records",
    "unmatched_encounters",
    "validate_records",
]
