"""Input files: items to judge and vendors' outputs for audits, read from JSONL, CSV or Parquet
and validated, with every problem reported by file, line and field.
"""

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
    "ID_SEPARATOR",
    "InputError",
    "MAX_REPORTED_ERRORS",
    "audit_item_id",
    "check_rubric_inputs",
    "load_audit_items",
    "load_items",
    "read_records",
    "unmatched_encounters",
    "validate_records",
]
