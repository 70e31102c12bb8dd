"""Vendor files of an audit: each vendor's outputs on the same encounters, as one run's items.

The stored item id is ``f"{vendor}::{encounter_id}"``, ``item.vendor`` names the vendor and
``meta.encounter_id`` the encounter, so vendors are matched by encounter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clinjudge.inputs._records import (
    InputError,
    check_rubric_inputs,
    in_file_order,
    read_records,
    validate_records,
)
from clinjudge.rubrics import Item, Rubric

ID_SEPARATOR = "::"


@dataclass
class AuditItems:
    """The combined items of an audit and how they match across vendors."""

    items: list[Item]
    vendors: list[str]
    encounters: list[str]
    unmatched: list[dict[str, Any]]


def audit_item_id(vendor: str, encounter_id: str) -> str:
    """The stored item id of one vendor's output for one encounter."""
    return f"{vendor}{ID_SEPARATOR}{encounter_id}"


def unmatched_encounters(
    presence: dict[str, set[str]], vendors: Sequence[str]
) -> list[dict[str, Any]]:
    """Encounters that some vendors lack, with who has them and who does not.

    Args:
        presence: encounter id -> vendors that have an output for it.
        vendors: All vendors, in report order.
    """
    rows = []
    for encounter in sorted(presence):
        have = [v for v in vendors if v in presence[encounter]]
        if len(have) < len(vendors):
            missing = [v for v in vendors if v not in presence[encounter]]
            rows.append({"encounter_id": encounter, "present": have, "missing": missing})
    return rows


def load_audit_items(paths: Sequence[str | Path], rubric: Rubric) -> AuditItems:
    """Read every vendor's file and combine them into one run's items.

    With one file every record must name its ``vendor``; with several, a record's vendor is its
    ``vendor`` field or else the file's stem. The record ``id`` is the encounter id.

    Args:
        paths: Vendor files (JSONL, CSV or Parquet).
        rubric: The rubric the items will be judged with.

    Raises:
        InputError: Listing every problem found (file, line or row, field).
    """
    if not paths:
        raise InputError(["no input data: give one file per vendor"], setting="data")
    problems: list[str] = []
    items: list[Item] = []
    vendors: list[str] = []
    presence: dict[str, set[str]] = {}
    seen: dict[str, str] = {}
    for path in paths:
        before = len(problems)
        try:
            records = read_records(path, problems)
        except InputError as exc:
            problems.extend(exc.problems)
            continue
        if not records and len(problems) == before:
            problems.append(f"{path}: no records")
            continue
        for where, item in validate_records(records, Item, problems):
            check_rubric_inputs(where, item, rubric, problems)
            vendor = item.vendor or (Path(path).stem if len(paths) > 1 else None)
            if not vendor:
                problems.append(
                    f"{where}: field vendor: one input file needs a vendor on every record "
                    "(or pass one file per vendor)"
                )
                continue
            if ID_SEPARATOR in vendor or ID_SEPARATOR in item.id:
                problems.append(f"{where}: field id: {ID_SEPARATOR!r} is reserved")
                continue
            stored_id = audit_item_id(vendor, item.id)
            if stored_id in seen:
                problems.append(
                    f"{where}: field id: vendor {vendor!r} has encounter {item.id!r} twice "
                    f"(first at {seen[stored_id]})"
                )
                continue
            seen[stored_id] = where
            if vendor not in vendors:
                vendors.append(vendor)
            presence.setdefault(item.id, set()).add(vendor)
            meta = {**item.meta, "encounter_id": item.id}
            items.append(item.model_copy(update={"id": stored_id, "vendor": vendor, "meta": meta}))
    if problems:
        raise InputError(in_file_order(problems))
    if len(vendors) < 2:
        raise InputError([f"an audit needs at least two vendors; found {vendors or 'none'}"])
    return AuditItems(items, vendors, sorted(presence), unmatched_encounters(presence, vendors))
