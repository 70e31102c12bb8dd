"""The state of a run's item list in the address: sort, search and filters, read and checked.

Every value of the query string is checked against a whitelist (sort kinds, the run's
attribute keys, two comparisons) or parsed as a number before it reaches the store's reads,
which bind it as a parameter; anything else is a :class:`BadRequest` naming what is wrong.
The same state rides on the links to item pages, so their previous and next links (and the
j/k keys) step through the list as sorted and filtered.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from clinjudge.errors import ClinJudgeError
from clinjudge.runs.report_reads import (
    ATTRIBUTE_SORTS,
    ITEM_SORT_KINDS,
    SCORED_SORT_KINDS,
    ItemFilter,
    ItemSort,
)


class BadRequest(ClinJudgeError, ValueError):
    """The address asks for something no page can show (a comparison of one run, an unknown
    sort key or attribute)."""


MAX_SEARCH = 500
"""Longest search text accepted (characters)."""

_WHERE = re.compile(r"(?P<attribute>[^<>=]+?)\s*(?P<op><=|>=)\s*(?P<value>[^<>=]+)")
_TRUE = ("1", "true", "on", "yes")
_FALSE = ("", "0", "false", "off", "no")

LIST_PARAMS = (
    "sort", "desc", "q", "in_notes", "failed", "reason", "flagged", "suspect", "rated", "where",
    "show",
)  # fmt: skip
"""Query parameters of a run's item list (with ``page`` and the filter form's fields)."""
_FORM_PARAMS = ("where_attribute", "where_op", "where_value")

# Sorts whose natural first view is largest first (a reviewer looks for the worst).
_DESC_FIRST = ("absdiff", "cost", "latency")


@dataclass(frozen=True)
class ItemQuery:
    """A run's item list as the address asks for it.

    Args:
        sort: ``position``, ``item``, ``prm_min``, ``cost``, ``latency``, ``absdiff``, or
            ``score:KEY``, ``diff:KEY``, ``absdiff:KEY`` for an attribute key.
        desc: Largest first.
        q: Search text (item id, text under evaluation, reference, rationales).
        in_notes: Search the source notes too.
        failed: Only items with a failed sample (of ``reason``, if given).
        reason: A failure reason.
        flagged: Only items whose text addresses the judge.
        suspect: Only items with a suspect-judgment flag.
        rated: Only items with physicians' ratings.
        where: ``(attribute, "<=" or ">=", value)`` conditions on final scores.
    """

    sort: str = "position"
    desc: bool = False
    q: str = ""
    in_notes: bool = False
    failed: bool = False
    reason: str | None = None
    flagged: bool = False
    suspect: bool = False
    rated: bool = False
    where: tuple[tuple[str, str, float], ...] = ()

    @property
    def kind(self) -> str:
        """The sort kind, without its attribute."""
        return self.sort.split(":", 1)[0]

    @property
    def attribute(self) -> str | None:
        """The attribute the list is sorted by, if any."""
        return self.sort.split(":", 1)[1] if ":" in self.sort else None

    @property
    def is_default(self) -> bool:
        """The run page's own list: every item by position."""
        return self == ItemQuery()

    def item_sort(self) -> ItemSort:
        """The order, as the store's reads take it."""
        return ItemSort(self.kind, self.attribute, self.desc)

    def item_filter(self) -> ItemFilter:
        """The conditions, as the store's reads take them."""
        return ItemFilter(
            text=self.q,
            in_notes=self.in_notes and bool(self.q),
            failed=self.failed,
            reason=self.reason if self.failed else None,
            flagged=self.flagged,
            suspect=self.suspect,
            rated=self.rated,
            bounds=self.where,
        )

    def params(self, **changes: Any) -> dict[str, Any]:
        """Query parameters of this state (defaults left out), with ``changes`` applied first.

        Args:
            changes: Fields of :class:`ItemQuery` to change.
        """
        state = replace(self, **changes) if changes else self
        return {
            "sort": None if state.sort == "position" else state.sort,
            "desc": "1" if state.desc else None,
            "q": state.q or None,
            "in_notes": "1" if state.in_notes and state.q else None,
            "failed": "1" if state.failed else None,
            "reason": state.reason if state.failed else None,
            "flagged": "1" if state.flagged else None,
            "suspect": "1" if state.suspect else None,
            "rated": "1" if state.rated else None,
            "where": [f"{a}{op}{v:g}" for a, op, v in state.where] or None,
        }

    def toggle_sort(self, sort: str) -> dict[str, Any]:
        """Parameters of the list sorted by ``sort``: the other way round when it already is,
        else in the sort's natural first direction."""
        if sort == self.sort:
            return self.params(sort=sort, desc=not self.desc)
        return self.params(sort=sort, desc=sort.split(":", 1)[0] in _DESC_FIRST)

    def without_where(self, index: int) -> dict[str, Any]:
        """Parameters of the list without its ``index``-th score condition."""
        return self.params(where=self.where[:index] + self.where[index + 1 :])


def sort_label(sort: str) -> str:
    """Words for a sort key (the sort menu, the column of the sort value)."""
    kind, _, attribute = sort.partition(":")
    labels = {
        "position": "position in the run",
        "item": "item id",
        "prm_min": "lowest PRM step score",
        "cost": "cost of the item's calls",
        "latency": "latency of the item's calls (sum)",
        "score": f"final score: {attribute}",
        "diff": f"judge − physicians' median: {attribute}",
        "absdiff": f"|judge − physicians' median|: {attribute}"
        if attribute
        else "|judge − physicians' median|, mean over attributes",
    }
    return labels.get(kind, sort)


def sort_choices(keys: Sequence[str], *, rated: bool, steps: bool, scored: bool) -> list[str]:
    """The sorts a run's list offers (its menu): those that can order its items."""
    if scored:
        return list(SCORED_SORT_KINDS)
    out = ["position", "item", *(f"score:{k}" for k in keys)]
    if rated:
        out += ["absdiff", *(f"absdiff:{k}" for k in keys), *(f"diff:{k}" for k in keys)]
    if steps:
        out.append("prm_min")
    return [*out, "cost", "latency"]


def _flag(name: str, values: Sequence[str]) -> bool:
    value = values[-1].strip().lower() if values else ""
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadRequest(f"{name}={values[-1]!r}: say 1 or 0")


def _one(params: Mapping[str, Sequence[str]], name: str) -> str:
    values = params.get(name) or []
    return values[-1] if values else ""


def _number(text: str, where: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise BadRequest(f"{where}: {text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise BadRequest(f"{where}: {text.strip()!r} is not a finite number")
    return value


def _attribute(key: str, keys: Sequence[str], where: str) -> str:
    if key not in keys:
        known = ", ".join(keys) if keys else "none: this run has no rubric attributes"
        raise BadRequest(f"{where}: unknown attribute {key!r} (this run's attributes: {known})")
    return key


def _sort(value: str, keys: Sequence[str], scored: bool) -> str:
    value = value.strip() or "position"
    kind, colon, attribute = value.partition(":")
    kinds = SCORED_SORT_KINDS if scored else ITEM_SORT_KINDS
    if kind not in kinds:
        with_attribute = ", ".join(f"{k}:ATTRIBUTE" for k in ATTRIBUTE_SORTS)
        attr_kinds = "" if scored else f", or {with_attribute}"
        raise BadRequest(
            f"unknown sort key {value!r}: sort by one of {', '.join(kinds)}{attr_kinds}"
        )
    if kind in ATTRIBUTE_SORTS and colon:
        return f"{kind}:{_attribute(attribute, keys, f'sort={value}')}"
    if kind in ("score", "diff"):
        raise BadRequest(f"sort={value}: name the attribute, as {kind}:ATTRIBUTE")
    if colon:
        raise BadRequest(f"sort={value}: {kind} takes no attribute")
    return kind


def parse_item_query(
    params: Mapping[str, Sequence[str]], keys: Sequence[str], *, scored: bool = False
) -> ItemQuery:
    """A run's item list state from its query string, every value checked.

    Args:
        params: Each query parameter's values (``page`` is left to the caller).
        keys: The run's attribute keys (the attributes a sort or filter may name).
        scored: The run is a `judge prm score` run (only item order, lowest step score and
            search apply).

    Raises:
        BadRequest: An unknown parameter, sort key or attribute, a filter that is not
            ``ATTRIBUTE<=VALUE`` or ``ATTRIBUTE>=VALUE``, or a search text too long.
    """
    unknown = sorted(set(params) - {*LIST_PARAMS, *_FORM_PARAMS, "page"})
    if unknown:
        raise BadRequest(
            f"unknown query parameter {unknown[0]!r}: the item list takes "
            f"{', '.join(LIST_PARAMS)} and page"
        )
    q = _one(params, "q").strip()
    if len(q) > MAX_SEARCH:
        raise BadRequest(f"search text is {len(q):,} characters; at most {MAX_SEARCH}")
    show = _one(params, "show").strip() or "all"
    if show not in ("all", "failed", "flagged"):
        raise BadRequest(f"show={show!r}: one of all, failed, flagged")
    failed = _flag("failed", params.get("failed") or []) or show == "failed"
    flagged = _flag("flagged", params.get("flagged") or []) or show == "flagged"
    suspect = _flag("suspect", params.get("suspect") or [])
    rated = _flag("rated", params.get("rated") or [])
    where = [_condition(text, keys) for text in params.get("where") or [] if text.strip()]
    value = _one(params, "where_value").strip()
    if value:  # the filter form's three fields
        attribute = _attribute(_one(params, "where_attribute"), keys, "filter")
        op = _one(params, "where_op").strip()
        if op not in ("<=", ">="):
            raise BadRequest(f"filter: comparison {op!r} is not one of <=, >=")
        where.append((attribute, op, _number(value, f"filter {attribute} {op}")))
    state = ItemQuery(
        sort=_sort(_one(params, "sort"), keys, scored),
        desc=_flag("desc", params.get("desc") or []),
        q=q,
        in_notes=_flag("in_notes", params.get("in_notes") or []) and bool(q),
        failed=failed,
        reason=(_one(params, "reason") or None) if failed else None,
        flagged=flagged,
        suspect=suspect,
        rated=rated,
        where=tuple(dict.fromkeys(where)),
    )
    if scored and (state.failed or state.flagged or state.suspect or state.rated or state.where):
        raise BadRequest(
            "a `judge prm score` run holds only step scores: its items can be searched and "
            "sorted, not filtered by failures, flags, ratings or scores"
        )
    return state


def _condition(text: str, keys: Sequence[str]) -> tuple[str, str, float]:
    match = _WHERE.fullmatch(text.strip())
    if match is None:
        raise BadRequest(f"where={text!r}: write ATTRIBUTE<=VALUE or ATTRIBUTE>=VALUE")
    attribute = _attribute(match["attribute"].strip(), keys, f"where={text}")
    return attribute, match["op"], _number(match["value"], f"where={text}")
