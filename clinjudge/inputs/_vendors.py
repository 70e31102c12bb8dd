"""Vendor files of an audit: each vendor's outputs on the same encounters, as one run's items.

The stored item id is ``f"{vendor}::{encounter_id}"``, ``item.vendor`` names the vendor and
``meta.encounter_id`` the encounter, so vendors are matched by encounter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clinjudge.inputs._records import (
    InputError,
    check_rubric_inputs,
    in_file_order,
    iter_records,
    iter_validated,
)
from clinjudge.rubrics import Item, Rubric

ID_SEPARATOR = "::"


@dataclass
class AuditItems:
    """What checking an audit's vendor files keeps: each item's stored id and encounter, in
    file order, and how the vendors match. The items themselves are read again when needed
    (:func:`iter_audit_items`), so an audit does not hold them all."""

    ids: list[str]
    encounter_ids: list[str]
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


def iter_audit_items(
    paths: Sequence[str | Path], rubric: Rubric, problems: list[str]
) -> Generator[tuple[str, Item], None, None]:
    """Every vendor file's items as an audit stores them, streamed in file order with their
    locations: the id ``vendor::encounter``, ``vendor`` set, ``meta.encounter_id`` the record's
    id. With one file every record must name its ``vendor``; with several, a record's vendor
    is its ``vendor`` field or else the file's stem.

    Problems (invalid records, a missing vendor, an encounter twice for one vendor, an empty or
    unreadable file) go to ``problems`` as they are met; the items are only usable when it stays
    empty at the end, which the caller checks.

    Args:
        paths: Vendor files (JSONL, CSV or Parquet).
        rubric: The rubric the items will be judged with.
        problems: Collects error messages.
    """
    seen: dict[str, str] = {}
    for path in paths:
        before = len(problems)
        records_read = 0
        try:
            with contextlib.closing(iter_records(path, problems)) as records:
                for where, item in iter_validated(records, Item, problems):
                    records_read += 1
                    audited = _audited(where, item, path, len(paths), rubric, problems, seen)
                    if audited is not None:
                        yield where, audited
        except InputError as exc:
            problems.extend(exc.problems)
            continue
        if not records_read and len(problems) == before:
            problems.append(f"{path}: no records")


def _audited(
    where: str,
    item: Item,
    path: str | Path,
    files: int,
    rubric: Rubric,
    problems: list[str],
    seen: dict[str, str],
) -> Item | None:
    """One record as the audit stores it, or None after recording why it cannot be."""
    check_rubric_inputs(where, item, rubric, problems)
    vendor = item.vendor or (Path(path).stem if files > 1 else None)
    if not vendor:
        problems.append(
            f"{where}: field vendor: one input file needs a vendor on every record "
            "(or pass one file per vendor)"
        )
        return None
    if ID_SEPARATOR in vendor or ID_SEPARATOR in item.id:
        problems.append(f"{where}: field id: {ID_SEPARATOR!r} is reserved")
        return None
    stored_id = audit_item_id(vendor, item.id)
    first = seen.setdefault(stored_id, where)
    if first is not where:
        problems.append(
            f"{where}: field id: vendor {vendor!r} has encounter {item.id!r} twice "
            f"(first at {first})"
        )
        return None
    meta = {**item.meta, "encounter_id": item.id}
    return item.model_copy(update={"id": stored_id, "vendor": vendor, "meta": meta})


def load_audit_items(
    paths: Sequence[str | Path],
    rubric: Rubric,
    check_item: Callable[[str, Item], str | None] | None = None,
) -> AuditItems:
    """Read and check every vendor's file, keeping each item's id and encounter (not the
    items: :func:`iter_audit_items` reads them again).

    Args:
        paths: Vendor files (JSONL, CSV or Parquet).
        rubric: The rubric the items will be judged with.
        check_item: A further check of each valid item (given its location and the item as
            stored), returning its problem or None; its problems are reported when the
            records have none (e.g. a prompt beyond the judge's context window).

    Raises:
        InputError: Listing every problem found (file, line or row, field).
    """
    if not paths:
        raise InputError(["no input data: give one file per vendor"], setting="data")
    problems: list[str] = []
    ids: list[str] = []
    encounter_ids: list[str] = []
    vendors: list[str] = []
    presence: dict[str, set[str]] = {}
    later: list[str] = []
    with contextlib.closing(iter_audit_items(paths, rubric, problems)) as items:
        for where, item in items:
            if check_item is not None and not problems:
                problem = check_item(where, item)
                if problem is not None:
                    later.append(problem)
            vendor, encounter = str(item.vendor), item.meta["encounter_id"]
            ids.append(item.id)
            encounter_ids.append(encounter)
            if vendor not in vendors:
                vendors.append(vendor)
            presence.setdefault(encounter, set()).add(vendor)
    if problems:
        raise InputError(in_file_order(problems))
    if later:
        raise InputError(later)
    if len(vendors) < 2:
        raise InputError([f"an audit needs at least two vendors; found {vendors or 'none'}"])
    return AuditItems(
        ids, encounter_ids, vendors, sorted(presence), unmatched_encounters(presence, vendors)
    )
