"""Physicians' ratings: read a long-format file, validate it against a rubric, store it.

A ratings file (JSONL, CSV or Parquet, read through DuckDB) has one record per
(item_id, rater_id, attribute) with a ``score``. Every record is checked against the rubric: the
attribute must be one of its keys, the score a point of the attribute's scale, null only where
the attribute is nullable, and gated attributes must respect their gate (PDSQI-9: ``synthesized``
is null exactly when the same rater gave ``abstraction`` = 0). Errors name the file, the line
(JSONL) or row (CSV, Parquet) and the field; nothing is written unless the whole file is valid.

Ratings live in the ``human_ratings`` table, independent of runs and keyed by
(item_id, rater_id, attribute); importing a rating again replaces it, so re-imports are
idempotent and corrections overwrite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clinjudge.inputs import InputError, audit_item_id, read_records
from clinjudge.rubrics import Rubric, alias_forms, normalise_key
from clinjudge.runs._store import RunStore, now

RATING_FIELDS = ("item_id", "rater_id", "attribute", "score")
_NULL_TEXT = {"", "na", "n/a", "nan", "null", "none"}


def is_null_score(raw: Any) -> bool:
    """Whether a rating's score means "no score": null, NaN, or text such as N/A or none.

    Both ratings readers (``judge ratings import`` and ``judge agree --ratings``) use it, so a
    file means the same to both.

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
        rater_id: The physician (any stable pseudonymous id).
        attribute: Rubric key.
        score: Scale point, or None where the attribute is nullable.
        where: File location, for messages.
    """

    item_id: str
    rater_id: str
    attribute: str
    score: float | None
    where: str = ""


@dataclass(frozen=True)
class ImportSummary:
    """What an import did.

    Args:
        source: The file imported.
        rubric: The rubric the ratings were validated against.
        rows: Ratings in the file.
        new: Ratings that were not stored before.
        changed: Stored ratings whose score the file changed.
        unchanged: Stored ratings the file repeated as they were.
        items: Distinct items in the file.
        raters: Distinct raters in the file.
    """

    source: str
    rubric: str
    rows: int
    new: int
    changed: int
    unchanged: int
    items: int
    raters: int


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


def _score(
    where: str, record: dict[str, Any], key: str, rubric: Rubric, problems: list[str]
) -> tuple[bool, float | None]:
    attribute = rubric.attribute(key)
    if "score" not in record:
        problems.append(f"{where}: field score: missing (write null for not applicable)")
        return False, None
    raw = record["score"]
    value: float | None
    if is_null_score(raw):
        value = None
    elif isinstance(raw, bool):
        problems.append(f"{where}: field score: must be a number, got {raw!r}")
        return False, None
    elif isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            problems.append(f"{where}: field score: must be a number, got {raw!r}")
            return False, None
    else:
        problems.append(f"{where}: field score: must be a number, got {raw!r}")
        return False, None
    if value is not None and math.isnan(value):
        value = None
    scale = f"a whole number from {attribute.min} to {attribute.max}"
    if value is None:
        if not attribute.nullable:
            problems.append(f"{where}: field score: {key} may not be null; it must be {scale}")
            return False, None
        return True, None
    if not math.isfinite(value) or value != int(value) or value not in attribute.values:
        problems.append(f"{where}: field score: {key} must be {scale}, got {raw!r}")
        return False, None
    return True, value


def _check_gates(ratings: list[HumanRating], rubric: Rubric, problems: list[str]) -> None:
    by_rater_item: dict[tuple[str, str], dict[str, HumanRating]] = {}
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


def load_human_ratings(path: str | Path, rubric: Rubric) -> list[HumanRating]:
    """Read and validate a long-format ratings file.

    Args:
        path: JSONL, CSV or Parquet with ``item_id``, ``rater_id``, ``attribute``, ``score``
            and optionally ``vendor`` (an audit's item is then ``VENDOR::item_id``); other
            columns are ignored.
        rubric: The rubric the scores follow.

    Raises:
        InputError: Listing every problem (file, line or row, field).
    """
    records = read_records(path)
    if not records:
        raise InputError([f"{path}: no ratings"])
    problems: list[str] = []
    ratings: list[HumanRating] = []
    seen: dict[tuple[str, str, str], str] = {}
    for where, record in records:
        if not isinstance(record, dict):
            problems.append(f"{where}: a rating must be a JSON object")
            continue
        item_id = _text_id(where, "item_id", record.get("item_id"), problems)
        if item_id is not None and record.get("vendor") not in (None, ""):
            # An audit's outputs are stored as VENDOR::ENCOUNTER; a vendor column says which.
            vendor = _text_id(where, "vendor", record.get("vendor"), problems)
            item_id = audit_item_id(vendor, item_id) if vendor else None
        rater_id = _text_id(where, "rater_id", record.get("rater_id"), problems)
        key = _attribute_key(where, record.get("attribute"), rubric, problems)
        if key is None:
            continue
        ok, score = _score(where, record, key, rubric, problems)
        if not ok or item_id is None or rater_id is None:
            continue
        first = seen.setdefault((item_id, rater_id, key), where)
        if first != where:
            problems.append(
                f"{where}: field attribute: duplicate rating of {key!r} for item {item_id!r} "
                f"by rater {rater_id!r} (first at {first})"
            )
            continue
        ratings.append(HumanRating(item_id, rater_id, key, score, where))
    _check_gates(ratings, rubric, problems)
    if problems:
        raise InputError(problems)
    return ratings


def import_ratings(store: RunStore, path: str | Path, rubric: Rubric) -> ImportSummary:
    """Validate a ratings file and upsert it into ``human_ratings`` in one transaction.

    Args:
        store: The run store (opened for writing).
        path: The ratings file.
        rubric: The rubric the scores follow.

    Raises:
        InputError: When the file has any problem; nothing is written then.
    """
    ratings = load_human_ratings(path, rubric)
    existing = {
        (r["item_id"], r["rater_id"], r["attribute"]): r["score"]
        for r in store.query(
            "SELECT item_id, rater_id, attribute, score FROM human_ratings "
            "WHERE item_id IN (SELECT unnest(?))",
            [sorted({r.item_id for r in ratings})],
        )
    }
    new = changed = 0
    for rating in ratings:
        key = (rating.item_id, rating.rater_id, rating.attribute)
        if key not in existing:
            new += 1
        elif existing[key] != rating.score:
            changed += 1
    stamp = now()
    source = str(path)
    store.upsert_rows(
        "human_ratings",
        [
            {
                "item_id": r.item_id,
                "rater_id": r.rater_id,
                "attribute": r.attribute,
                "score": r.score,
                "rubric": rubric.name,
                "source": source,
                "imported_at": stamp,
            }
            for r in ratings
        ],
    )
    return ImportSummary(
        source=source,
        rubric=rubric.name,
        rows=len(ratings),
        new=new,
        changed=changed,
        unchanged=len(ratings) - new - changed,
        items=len({r.item_id for r in ratings}),
        raters=len({r.rater_id for r in ratings}),
    )


def ratings_overview(store: RunStore) -> list[dict[str, Any]]:
    """Stored ratings per rubric and rater: counts of items and ratings, last import."""
    if not store.has_table("human_ratings"):
        return []
    return store.query(
        """
        SELECT rubric, rater_id, count(DISTINCT item_id) AS items, count(*) AS ratings,
               count(*) FILTER (WHERE score IS NULL) AS null_scores,
               max(imported_at) AS last_import
        FROM human_ratings GROUP BY rubric, rater_id ORDER BY rubric, rater_id
        """
    )


def stored_ratings_for_run(store: RunStore, run_id: str) -> list[HumanRating]:
    """Physicians' ratings stored (``judge ratings import``) for a run's items.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    if not store.has_table("human_ratings"):
        return []
    rows = store.query(
        "SELECT item_id, rater_id, attribute, score FROM human_ratings WHERE item_id IN "
        "(SELECT item_id FROM items WHERE run_id = ?) ORDER BY item_id, rater_id, attribute",
        [run_id],
    )
    return [HumanRating(r["item_id"], r["rater_id"], r["attribute"], r["score"]) for r in rows]
