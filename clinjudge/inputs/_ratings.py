"""Ratings files: the one reader behind ``judge ratings import``, ``judge agree --ratings``,
``judge audit --ratings`` and the API.

A ratings file (JSONL, CSV or Parquet, read through DuckDB) is long format: one record per
(item, rater, attribute) with a ``score``. The item is named by ``item_id`` (``unit_id``, the
name older files used, is read as an alias), optionally with a ``vendor`` (an audit's item is
then ``VENDOR::item_id``). Other columns are ignored.

Read against a rubric, every record is checked: the attribute must be one of its keys, the score
a point of the attribute's scale, null only where the attribute is nullable, one rating per
(item, rater, attribute), and gated attributes must respect their gate (PDSQI-9: ``synthesized``
is null exactly when the same rater gave ``abstraction`` = 0). Read without one (a standalone
agreement study), the attribute is optional, a score is any finite number or null, and several
records of one (item, rater, attribute) are samples of that rater (a judge's N samples).

Errors name the file, the line (JSONL) or row (CSV, Parquet) and the field; nothing is returned
unless the whole file is valid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clinjudge.inputs._records import InputError, in_file_order, read_records
from clinjudge.inputs._vendors import audit_item_id
from clinjudge.rubrics import Rubric, alias_forms, normalise_key

ITEM_ID_ALIAS = "unit_id"
"""The item column's older name (``judge agree --ratings`` files); read as ``item_id``."""
_NULL_TEXT = {"", "na", "n/a", "nan", "null", "none"}


def is_null_score(raw: Any) -> bool:
    """Whether a rating's score means "no score": null, NaN, or text such as N/A or none.

    Args:
        raw: The score as read from the file.
    """
    if raw is None:
        return True
    if isinstance(raw, float):
        return raw != raw  # NaN
    return isinstance(raw, str) and raw.strip().lower() in _NULL_TEXT


@dataclass(frozen=True)
class HumanRating:
    """One validated rating.

    Args:
        item_id: The rated item (matches ``items.item_id`` of runs).
        rater_id: The physician (any stable pseudonymous id), or a judge in a standalone file.
        attribute: Rubric key; None in a file read without a rubric that names no attribute.
        score: The score, or None (nullable attribute, or no rating).
        where: File location, for messages.
    """

    item_id: str
    rater_id: str
    attribute: str | None
    score: float | None
    where: str = ""


def _text_id(where: str, field: str, value: Any, problems: list[str]) -> str | None:
    if value is None or isinstance(value, bool) or not isinstance(value, str | int):
        kind = "missing" if value is None else f"must be a string, got {value!r}"
        problems.append(f"{where}: field {field}: {kind}")
        return None
    text = str(value).strip()
    if not text:
        problems.append(f"{where}: field {field}: must not be empty")
        return None
    return text


def _item_id(where: str, record: dict[str, Any], problems: list[str]) -> str | None:
    """The record's item id: ``item_id``, else the older ``unit_id``; with a ``vendor``, the
    audit's stored id ``VENDOR::item_id``."""
    field = "item_id"
    if record.get("item_id") is None and ITEM_ID_ALIAS in record:
        field = ITEM_ID_ALIAS
    item_id = _text_id(where, field, record.get(field), problems)
    if item_id is not None and record.get("vendor") not in (None, ""):
        # An audit's outputs are stored as VENDOR::ENCOUNTER; a vendor column says which.
        vendor = _text_id(where, "vendor", record.get("vendor"), problems)
        item_id = audit_item_id(vendor, item_id) if vendor else None
    return item_id


def _attribute_key(where: str, value: Any, rubric: Rubric, problems: list[str]) -> str | None:
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where}: field attribute: missing")
        return None
    key = value.strip()
    if key in rubric.keys:
        return key
    folded = normalise_key(key)
    hint = next((a.key for a in rubric.attributes if folded in alias_forms(a)), None)
    suggestion = f"; did you mean {hint!r}?" if hint else f"; expected one of {rubric.keys}"
    problems.append(
        f"{where}: field attribute: {key!r} is not a key of rubric {rubric.name}{suggestion}"
    )
    return None


def _free_attribute(where: str, value: Any, problems: list[str]) -> tuple[bool, str | None]:
    """A file read without a rubric: any text, or none."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return True, None
    if isinstance(value, bool) or not isinstance(value, str | int):
        problems.append(f"{where}: field attribute: must be a string, got {value!r}")
        return False, None
    return True, str(value).strip()


def _number(where: str, record: dict[str, Any], problems: list[str]) -> tuple[bool, float | None]:
    """The score as a number (None for the null spellings), or a problem."""
    if "score" not in record:
        problems.append(f"{where}: field score: missing (write null where there is no score)")
        return False, None
    raw = record["score"]
    if is_null_score(raw):
        return True, None
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        problems.append(f"{where}: field score: must be a number, got {raw!r}")
        return False, None
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except ValueError:
        problems.append(f"{where}: field score: must be a number, got {raw!r}")
        return False, None
    return True, None if math.isnan(value) else value


def _on_scale(
    where: str, raw: Any, value: float | None, key: str, rubric: Rubric, problems: list[str]
) -> bool:
    attribute = rubric.attribute(key)
    scale = f"a whole number from {attribute.min} to {attribute.max}"
    if value is None:
        if not attribute.nullable:
            problems.append(f"{where}: field score: {key} may not be null; it must be {scale}")
            return False
        return True
    if not math.isfinite(value) or value != int(value) or value not in attribute.values:
        problems.append(f"{where}: field score: {key} must be {scale}, got {raw!r}")
        return False
    return True


def _check_gates(ratings: list[HumanRating], rubric: Rubric, problems: list[str]) -> None:
    by_rater_item: dict[tuple[str, str], dict[str | None, HumanRating]] = {}
    for rating in ratings:
        by_rater_item.setdefault((rating.item_id, rating.rater_id), {})[rating.attribute] = rating
    for (item_id, rater_id), given in by_rater_item.items():
        for attribute in rubric.attributes:
            gate = attribute.gate
            if gate is None or attribute.key not in given or gate.attribute not in given:
                continue
            gated, gating = given[attribute.key], given[gate.attribute]
            closed = gating.score == gate.null_when
            if closed and gated.score is not None:
                problems.append(
                    f"{gated.where}: field score: {attribute.key} must be null when "
                    f"{gate.attribute} is {gate.null_when} (item {item_id!r}, rater "
                    f"{rater_id!r}, {gate.attribute} at {gating.where})"
                )
            elif not closed and gated.score is None and gating.score is not None:
                problems.append(
                    f"{gated.where}: field score: {attribute.key} may be null only when "
                    f"{gate.attribute} is {gate.null_when}, but item {item_id!r} rater "
                    f"{rater_id!r} gave {gate.attribute} = {gating.score:g} at {gating.where}"
                )


def _rubric_rating(
    where: str, record: dict[str, Any], rubric: Rubric, problems: list[str]
) -> HumanRating | None:
    item_id = _item_id(where, record, problems)
    rater_id = _text_id(where, "rater_id", record.get("rater_id"), problems)
    key = _attribute_key(where, record.get("attribute"), rubric, problems)
    if key is None:
        return None  # the score's scale is the attribute's: nothing more to check
    ok, score = _number(where, record, problems)
    ok = ok and _on_scale(where, record.get("score"), score, key, rubric, problems)
    if not ok or item_id is None or rater_id is None:
        return None
    return HumanRating(item_id, rater_id, key, score, where)


def _free_rating(where: str, record: dict[str, Any], problems: list[str]) -> HumanRating | None:
    item_id = _item_id(where, record, problems)
    rater_id = _text_id(where, "rater_id", record.get("rater_id"), problems)
    ok, score = _number(where, record, problems)
    if ok and score is not None and not math.isfinite(score):
        problems.append(f"{where}: field score: must be a finite number, got {record['score']!r}")
        ok = False
    named, attribute = _free_attribute(where, record.get("attribute"), problems)
    if not (ok and named) or item_id is None or rater_id is None:
        return None
    return HumanRating(item_id, rater_id, attribute, score, where)


def load_ratings(path: str | Path, rubric: Rubric | None = None) -> list[HumanRating]:
    """Read and validate a long-format ratings file.

    Args:
        path: JSONL, CSV or Parquet with ``item_id`` (or ``unit_id``), ``rater_id``,
            ``attribute``, ``score`` and optionally ``vendor`` (an audit's item is then
            ``VENDOR::item_id``); other columns are ignored.
        rubric: The rubric the scores follow (attribute keys, scales, gates; one rating per
            item, rater and attribute). None reads a standalone agreement study: the attribute
            is optional and repeated records of a rater are its samples.

    Raises:
        InputError: Listing every problem (file, line or row, field).
    """
    problems: list[str] = []
    # Lines that are not JSON are reported with every other line's problems, not alone.
    records = read_records(path, problems)
    if not records and not problems:
        raise InputError([f"{path}: no ratings"])
    ratings: list[HumanRating] = []
    seen: dict[tuple[str, str, str | None], str] = {}
    for where, record in records:
        if not isinstance(record, dict):
            problems.append(f"{where}: a rating must be a JSON object")
            continue
        if rubric is None:
            rating = _free_rating(where, record, problems)
        else:
            rating = _rubric_rating(where, record, rubric, problems)
        if rating is None:
            continue
        if rubric is not None:
            first = seen.setdefault((rating.item_id, rating.rater_id, rating.attribute), where)
            if first != where:
                problems.append(
                    f"{where}: field attribute: duplicate rating of {rating.attribute!r} for "
                    f"item {rating.item_id!r} by rater {rating.rater_id!r} (first at {first})"
                )
                continue
        ratings.append(rating)
    if rubric is not None:
        _check_gates(ratings, rubric, problems)
    if problems:
        raise InputError(in_file_order(problems))
    return ratings
