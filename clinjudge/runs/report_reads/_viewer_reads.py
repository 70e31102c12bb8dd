"""What `judge view` and its static export read from the store, as named reads.

Every page reads only the rows it shows (a window of an ordered list) or lets DuckDB aggregate,
so a run of 100,000 items opens as fast as a small one. Each function takes the
:class:`RunStore` a page reads (the viewer's private copy of the database, or the database
itself). Rows are plain dicts, typed by ``TypedDict`` where every row has the same columns.
Item pages read one item per query; the export reads the same columns, in the same order, for
many items at once (the ``*_by_item`` functions), so its pages are the live ones.

Listings read their count and one window of their rows in one call: ``window`` gets the count
and answers which rows to read (``per_page`` and ``offset``), so paging stays the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol, TypedDict, TypeVar, cast

from clinjudge._util.offline import connect_duckdb
from clinjudge.runs._aggregate import FINAL_AGENT
from clinjudge.runs._message_texts import messages_select
from clinjudge.runs._store import FINAL_SAMPLE, RunStore


class Window(Protocol):
    """The rows of a listing one page shows."""

    @property
    def per_page(self) -> int:
        """Rows to read."""
        ...

    @property
    def offset(self) -> int:
        """Rows to skip."""
        ...


W = TypeVar("W", bound=Window)


def _count(store: RunStore, sql: str, params: Sequence[Any]) -> int:
    row = store.con.execute(sql, list(params)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


# -- the runs page ------------------------------------------------------------------------------

_RUN_SORT_COLUMNS: dict[str, str] = {
    "created": "created_at",
    "name": "name",
    "status": "status",
    "mode": "mode",
    "rubric": "rubric",
    "items": "n_items",
}

RUN_SORTS: tuple[str, ...] = tuple(_RUN_SORT_COLUMNS)
"""What the runs list can be sorted by (:func:`run_list`'s ``sort``)."""


class RunListing(TypedDict):
    """A run as the runs page lists it."""

    run_id: str
    name: str | None
    created_at: Any
    status: str | None
    mode: str | None
    rubric: str | None
    rubric_version: str | None
    models: Any
    """JSON text."""
    simulated: bool | None
    n_items: int | None
    n_samples: int | None


def run_list(
    store: RunStore,
    window: Callable[[int], W],
    *,
    sort: str = "created",
    desc: bool = True,
    text: str = "",
    status: str = "",
    only: Sequence[str] | None = None,
) -> tuple[W, list[RunListing]]:
    """Runs matching a filter, sorted, one window of them.

    Args:
        store: The run store.
        window: Given the number of matching runs, the window to read.
        sort: One of :data:`RUN_SORTS` (anything else sorts by creation).
        desc: Sort descending.
        text: Text matched (case-insensitive) against id, name, rubric, mode and models.
        status: Only runs with this status.
        only: Just these runs (full ids).

    Returns:
        The window, and its runs.
    """
    where: list[str] = ["1=1"]
    params: list[Any] = []
    if text:
        # A plain substring test: `%` and `_` in the text are text, not LIKE wildcards.
        where.append(
            "contains(lower(run_id || ' ' || coalesce(name, '') || ' ' || coalesce(rubric, '') "
            "|| ' ' || coalesce(mode, '') || ' ' || coalesce(CAST(models AS VARCHAR), '')), "
            "lower(?))"
        )
        params.append(text)
    if status:
        where.append("status = ?")
        params.append(status)
    if only is not None:
        where.append("run_id IN (SELECT unnest(?))")
        params.append(list(only))
    clause = " AND ".join(where)
    shown = window(_count(store, f"SELECT count(*) AS n FROM runs WHERE {clause}", params))
    column = _RUN_SORT_COLUMNS.get(sort, "created_at")
    order = "DESC" if desc else "ASC"
    rows = store.query(
        f"SELECT run_id, name, created_at, status, mode, rubric, rubric_version, models, "
        f"simulated, n_items, n_samples FROM runs WHERE {clause} "
        f"ORDER BY {column} {order} NULLS LAST, run_id LIMIT ? OFFSET ?",
        [*params, shown.per_page, shown.offset],
    )
    return shown, cast(list[RunListing], rows)


class RunStats(TypedDict, total=False):
    """Headline numbers of a run on the runs page (absent: the run has no judgments, or no
    calls)."""

    items_ok: int
    items_failed: int
    latency_s: float | None
    cost_usd: float | None
    tokens_in: int
    tokens_out: int
    calls_unpriced: int
    item_latency_p50_s: float | None
    item_latency_p95_s: float | None


def run_list_stats(store: RunStore, run_ids: Sequence[str]) -> dict[str, RunStats]:
    """Items ok/failed, tokens, cost and per-item latency percentiles of the given runs.

    An item's final has one row per attribute, all with the item's status, so final rows per
    status divided by the number of attributes counts items without a DISTINCT over item ids.

    Args:
        store: The run store.
        run_ids: Full run ids.

    Returns:
        Each run's numbers.
    """
    if not run_ids:
        return {}
    ids = list(run_ids)
    out: dict[str, dict[str, Any]] = {rid: {} for rid in ids}
    for row in store.query(
        """
        SELECT run_id, coalesce(sum(n) FILTER (WHERE status = 'ok'), 0) AS items_ok,
               coalesce(sum(n) FILTER (WHERE status = 'failed'), 0) AS items_failed
        FROM (SELECT run_id, status, count(*) // count(DISTINCT attribute) AS n
              FROM judgments WHERE run_id IN (SELECT unnest(?)) AND final
              GROUP BY run_id, status)
        GROUP BY run_id""",
        [ids],
    ):
        out[row.pop("run_id")].update(row)
    for row in store.query(
        """
        SELECT run_id, sum(t) AS latency_s, sum(c) AS cost_usd, sum(tin) AS tokens_in,
               sum(tout) AS tokens_out, sum(unpriced) AS calls_unpriced,
               quantile_cont(t, 0.5) AS item_latency_p50_s,
               quantile_cont(t, 0.95) AS item_latency_p95_s
        FROM (SELECT run_id, item_id, sum(latency_s) AS t, sum(cost_usd) AS c,
                     coalesce(sum(prompt_tokens), 0) AS tin,
                     coalesce(sum(completion_tokens), 0) AS tout,
                     count(*) FILTER (WHERE status = 'ok' AND cost_usd IS NULL) AS unpriced
              FROM calls WHERE run_id IN (SELECT unnest(?)) GROUP BY run_id, item_id)
        GROUP BY run_id""",
        [ids],
    ):
        out[row.pop("run_id")].update(row)
    return cast(dict[str, RunStats], out)


def run_statuses(store: RunStore) -> list[str | None]:
    """Every status some run has, in order (the runs page's status filter)."""
    return [r["status"] for r in store.query("SELECT DISTINCT status FROM runs ORDER BY 1")]


def run_ids_by_creation(store: RunStore) -> list[str]:
    """Every run's id, oldest first (the runs a whole export holds)."""
    return [r["run_id"] for r in store.query("SELECT run_id FROM runs ORDER BY created_at")]


# -- a run's page -------------------------------------------------------------------------------


class ItemCallTotals(TypedDict):
    """A run's calls totalled, with percentiles over items of each item's latency and cost."""

    calls: int
    calls_failed: int
    tokens_in: int
    tokens_out: int
    tokens_estimated: bool | None
    cost_usd: float | None
    calls_unpriced: int
    item_latency_p50_s: float | None
    item_latency_p95_s: float | None
    item_cost_p50_usd: float | None


def item_call_totals(store: RunStore, run_id: str) -> ItemCallTotals:
    """A run's calls, tokens and cost, with per-item latency and cost percentiles (calls
    grouped by item once, so the totals and the percentiles cost one scan)."""
    rows = store.query(
        """
        SELECT coalesce(sum(n), 0) AS calls, coalesce(sum(failed), 0) AS calls_failed,
               coalesce(sum(tin), 0) AS tokens_in, coalesce(sum(tout), 0) AS tokens_out,
               bool_or(estimated) AS tokens_estimated, sum(c) AS cost_usd,
               coalesce(sum(unpriced), 0) AS calls_unpriced,
               quantile_cont(t, 0.5) AS item_latency_p50_s,
               quantile_cont(t, 0.95) AS item_latency_p95_s,
               quantile_cont(c, 0.5) AS item_cost_p50_usd
        FROM (SELECT item_id, count(*) AS n, count(*) FILTER (WHERE status <> 'ok') AS failed,
                     sum(prompt_tokens) AS tin, sum(completion_tokens) AS tout,
                     bool_or(tokens_estimated) AS estimated, sum(latency_s) AS t,
                     sum(cost_usd) AS c,
                     count(*) FILTER (WHERE status = 'ok' AND cost_usd IS NULL) AS unpriced
              FROM calls WHERE run_id = ? GROUP BY item_id)""",
        [run_id],
    )
    return cast(ItemCallTotals, rows[0])


class FailureGroup(TypedDict):
    """A run's failed samples sharing one error."""

    reason: str
    """The error (``(no reason recorded)`` for none)."""
    samples: int
    n_items: int
    examples: list[str]
    """The first failing item ids, sorted."""


def run_failure_reasons(store: RunStore, run_id: str, examples: int = 5) -> list[FailureGroup]:
    """A run's failed samples (any agent) grouped by their error, most frequent first.

    Args:
        store: The run store.
        run_id: Full run id.
        examples: Failing item ids listed per reason.

    Returns:
        Up to 50 groups.
    """
    rows = store.query(
        """
        SELECT coalesce(s.error, '(no reason recorded)') AS reason, count(*) AS samples,
               count(DISTINCT s.item_id) AS n_items,
               list(DISTINCT s.item_id ORDER BY s.item_id)[1:?] AS examples
        FROM samples s WHERE s.run_id = ? AND s.status <> 'ok'
        GROUP BY reason ORDER BY samples DESC, reason LIMIT 50""",
        [examples, run_id],
    )
    return cast(list[FailureGroup], rows)


class FlagCount(TypedDict):
    """A run's items carrying one kind of flag in one field."""

    name: str
    field: str
    n_items: int


def item_flag_counts(store: RunStore, run_id: str) -> list[FlagCount]:
    """How many of a run's items carry each kind of flag (text addressing the judge), most
    items first (none in a database older than flags)."""
    if not store.has_column("items", "flags"):
        return []
    rows = store.query(
        """
        SELECT f.name AS name, f.field AS field, count(DISTINCT item_id) AS n_items
        FROM (SELECT item_id, unnest(from_json(flags, '[{"name":"VARCHAR","field":"VARCHAR"}]'))
                     AS f
              FROM items WHERE run_id = ? AND json_array_length(flags) > 0)
        GROUP BY ALL ORDER BY n_items DESC, name""",
        [run_id],
    )
    return cast(list[FlagCount], rows)


def is_audit_run(store: RunStore, run_id: str) -> bool:
    """Whether a run is a vendor audit: its items carry a vendor and an encounter id."""
    rows = store.query(
        "SELECT vendor, json_extract_string(meta, '$.encounter_id') AS encounter "
        "FROM items WHERE run_id = ? LIMIT 1",
        [run_id],
    )
    return bool(rows and rows[0]["vendor"] is not None and rows[0]["encounter"] is not None)


def run_has_vendors(store: RunStore, run_id: str) -> bool:
    """Whether any of a run's items names its vendor."""
    sql = (
        "SELECT count(*) AS n FROM (SELECT 1 FROM items WHERE run_id = ? AND vendor IS NOT NULL "
        "LIMIT 1)"
    )
    return bool(_count(store, sql, [run_id]))


def run_has_ratings(store: RunStore, run_id: str) -> bool:
    """Whether physicians' ratings are stored for any of a run's items."""
    sql = (
        "SELECT count(*) AS n FROM human_ratings WHERE item_id IN "
        "(SELECT item_id FROM items WHERE run_id = ?)"
    )
    return bool(_count(store, sql, [run_id]))


ItemShow = Literal["all", "failed", "flagged"]
"""Which of a run's items a listing holds: all, those with a failed sample, those flagged."""

ITEM_SORT_KINDS: tuple[str, ...] = (
    "position", "item", "score", "diff", "absdiff", "prm_min", "cost", "latency",
)  # fmt: skip
"""What a run's item list can be sorted by: position in the run, item id, an attribute's final
score (``score``), the judge's final minus the physicians' median of an attribute (``diff``; its
absolute value ``absdiff``, or without an attribute the mean absolute difference over the
rated attributes), the lowest PRM step score, and the item's summed cost or latency of calls."""

ATTRIBUTE_SORTS: tuple[str, ...] = ("score", "diff", "absdiff")
"""Sort kinds that take an attribute (``absdiff`` also works without one)."""

BOUND_OPERATORS: tuple[str, ...] = ("<=", ">=")
"""Comparisons an attribute filter may use."""


@dataclass(frozen=True)
class ItemFilter:
    """Conditions narrowing a run's item list; all of them hold together.

    Args:
        text: Case-insensitive text found in the item id, its summary (the text under
            evaluation) or reference, or a rationale of one of its judgments or samples.
        in_notes: Look for ``text`` in the item's source notes too (they are most of a run's
            text: a search through them reads all of it).
        failed: Only items with a failed sample (of ``reason``, when given).
        reason: With ``failed``: only this failure reason (``(no reason recorded)`` for none).
        flagged: Only items whose text addresses the judge.
        suspect: Only items with a sample carrying a suspect-judgment flag.
        rated: Only items with physicians' ratings.
        bounds: ``(attribute, operator, value)``: the final score of the attribute compared
            with the value (operator one of :data:`BOUND_OPERATORS`).
    """

    text: str = ""
    in_notes: bool = False
    failed: bool = False
    reason: str | None = None
    flagged: bool = False
    suspect: bool = False
    rated: bool = False
    bounds: tuple[tuple[str, str, float], ...] = ()


@dataclass(frozen=True)
class ItemSort:
    """The order of a run's item list.

    Args:
        kind: One of :data:`ITEM_SORT_KINDS`.
        attribute: The attribute of ``score``, ``diff`` and ``absdiff``.
        desc: Largest first. Items without a value come last either way; ties go by position.
    """

    kind: str = "position"
    attribute: str | None = None
    desc: bool = False


def _like_pattern(text: str) -> tuple[str, str]:
    """An ``ILIKE`` pattern finding ``text`` anywhere, its ``%``, ``_`` and ``\\`` taken as
    themselves, not as wildcards, and the ``ESCAPE`` clause that says so.

    Returns:
        The pattern and the clause (empty for text without those characters: DuckDB finds a
        plain ``%text%`` pattern many times faster than one with an escape character).
    """
    if not any(ch in text for ch in "%_\\"):
        return f"%{text}%", ""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%", " ESCAPE '\\'"


def _verbatim_in_json(text: str) -> bool:
    """Whether JSON text holds ``text`` unchanged wherever its decoded strings hold it."""
    return all(" " <= ch <= "~" and ch not in '"\\' for ch in text)


class _Listing:
    """The SQL of one filtered, sorted item list: every piece from a whitelist, every value a
    bound parameter (``$name``), so no text of the request becomes SQL."""

    def __init__(self, store: RunStore, run_id: str, sort: ItemSort, filters: ItemFilter):
        if sort.kind not in ITEM_SORT_KINDS:
            raise ValueError(f"unknown sort {sort.kind!r}: one of {', '.join(ITEM_SORT_KINDS)}")
        if sort.kind in ("score", "diff") and not sort.attribute:
            raise ValueError(f"sort {sort.kind!r} needs an attribute")
        self.params: dict[str, Any] = {"run": run_id}
        self.sort_params: dict[str, Any] = {}
        self.has_flags = store.has_column("items", "flags")
        self.has_ratings = store.has_table("human_ratings")
        self.has_quality_flags = store.has_table("quality_flags")
        self.has_steps = store.has_table("prm_steps")
        self.where = self._conditions(filters)
        self.join, self.key = self._sort_key(sort)
        direction = "DESC" if sort.desc else "ASC"
        self.order = f"sort_value {direction} NULLS LAST, i.position, i.item_id"
        if sort.kind == "position":
            self.order = f"i.position {direction} NULLS LAST, i.item_id {direction}"
        elif sort.kind == "item":
            self.order = f"i.item_id {direction}"

    def _conditions(self, filters: ItemFilter) -> str:
        where = ["i.run_id = $run"]
        if filters.failed:
            sql = "SELECT item_id FROM samples WHERE run_id = $run AND status <> 'ok'"
            if filters.reason:
                sql += " AND coalesce(error, '(no reason recorded)') = $reason"
                self.params["reason"] = filters.reason
            where.append(f"i.item_id IN ({sql})")
        if filters.flagged:
            where.append("json_array_length(i.flags) > 0" if self.has_flags else "false")
        if filters.suspect:
            where.append(
                "i.item_id IN (SELECT item_id FROM quality_flags WHERE run_id = $run "
                "AND item_id <> '')"
                if self.has_quality_flags
                else "false"
            )
        if filters.rated:
            where.append(
                "i.item_id IN (SELECT item_id FROM human_ratings WHERE score IS NOT NULL)"
                if self.has_ratings
                else "false"
            )
        for n, (attribute, operator, value) in enumerate(filters.bounds):
            if operator not in BOUND_OPERATORS:
                raise ValueError(f"unknown comparison {operator!r}: one of <=, >=")
            op = "<=" if operator == "<=" else ">="
            where.append(
                f"i.item_id IN (SELECT item_id FROM judgments WHERE run_id = $run AND final "
                f"AND attribute = $attribute_{n} AND value {op} $value_{n})"
            )
            self.params[f"attribute_{n}"] = attribute
            self.params[f"value_{n}"] = float(value)
        if filters.text:
            self.params["text"], escape = _like_pattern(filters.text)
            like = f"ILIKE $text{escape}"
            found = [f"{field} {like}" for field in ("i.item_id", "i.summary", "i.reference")]
            notes = "array_to_string(json_extract_string(i.notes, '$[*].text'), ' ')"
            if filters.in_notes and _verbatim_in_json(filters.text):
                # Text that JSON writes as is (printable ASCII without quotes or backslashes)
                # is in the notes' JSON wherever it is in their text: the cheap test on the
                # JSON first, decoding only the notes that pass it.
                found.append(f"(CAST(i.notes AS VARCHAR) {like} AND {notes} {like})")
            elif filters.in_notes:
                found.append(f"{notes} {like}")
            for table in ("samples", "judgments"):
                found.append(
                    f"i.item_id IN (SELECT item_id FROM {table} WHERE run_id = $run "
                    f"AND rationale {like})"
                )
            where.append("(" + " OR ".join(found) + ")")
        return " AND ".join(where)

    def _sort_key(self, sort: ItemSort) -> tuple[str, str]:
        """The join that brings each item's sort value (as ``s.k``) and the value's expression."""
        kind = sort.kind
        if sort.attribute and kind in ATTRIBUTE_SORTS and (self.has_ratings or kind == "score"):
            self.sort_params["sort_attribute"] = sort.attribute
        if kind in ("position", "item"):
            return "", "NULL::DOUBLE"
        if kind == "score":
            rows = (
                "SELECT item_id, value AS k FROM judgments WHERE run_id = $run AND final "
                "AND attribute = $sort_attribute"
            )
        elif kind in ("diff", "absdiff") and not self.has_ratings:
            return "", "NULL::DOUBLE"
        elif kind in ("diff", "absdiff") and sort.attribute:
            difference = "j.value - h.m" if kind == "diff" else "abs(j.value - h.m)"
            rows = (
                f"SELECT j.item_id, {difference} AS k FROM judgments j JOIN "
                "(SELECT item_id, median(score) AS m FROM human_ratings "
                " WHERE attribute = $sort_attribute AND score IS NOT NULL GROUP BY item_id) h "
                "ON h.item_id = j.item_id "
                "WHERE j.run_id = $run AND j.final AND j.attribute = $sort_attribute"
            )
        elif kind == "absdiff":
            rows = (
                "SELECT j.item_id, avg(abs(j.value - h.m)) AS k FROM judgments j JOIN "
                "(SELECT item_id, attribute, median(score) AS m FROM human_ratings "
                " WHERE score IS NOT NULL GROUP BY item_id, attribute) h "
                "ON h.item_id = j.item_id AND h.attribute = j.attribute "
                "WHERE j.run_id = $run AND j.final GROUP BY j.item_id"
            )
        elif kind == "prm_min":
            if not self.has_steps:
                return "", "NULL::DOUBLE"
            rows = "SELECT item_id, min(score) AS k FROM prm_steps WHERE run_id = $run GROUP BY 1"
        else:  # cost, latency
            column = "cost_usd" if kind == "cost" else "latency_s"
            rows = f"SELECT item_id, sum({column}) AS k FROM calls WHERE run_id = $run GROUP BY 1"
        return f"LEFT JOIN ({rows}) s ON s.item_id = i.item_id", "s.k"

    @property
    def all_params(self) -> dict[str, Any]:
        """Parameters of :meth:`select` (those of the conditions and of the sort)."""
        return {**self.params, **self.sort_params}

    def select(self, flags: str) -> str:
        return (
            f"SELECT i.item_id, i.position, i.vendor, i.specialty, {flags} AS flags, "
            f"{self.key} AS sort_value FROM items i {self.join} WHERE {self.where}"
        )


class ListedItem(TypedDict):
    """An item as a run's item list shows it."""

    item_id: str
    position: int | None
    vendor: str | None
    specialty: str | None
    flags: str | None
    """JSON text (None in a database older than flags)."""
    sort_value: float | None
    """The value the list is sorted by (None for position and item id, or when missing)."""


def run_items(
    store: RunStore,
    run_id: str,
    window: Callable[[int], W],
    *,
    show: str = "all",
    reason: str | None = None,
    sort: ItemSort | None = None,
    filters: ItemFilter | None = None,
) -> tuple[W, list[ListedItem]]:
    """One window of a run's items, filtered and sorted in the database.

    Args:
        store: The run store.
        run_id: Full run id.
        window: Given the number of items listed, the window to read.
        show: An :data:`ItemShow` (anything else lists all); adds to ``filters``.
        reason: With ``failed``: only items with a sample failed for this reason (the
            ``reason`` of :func:`run_failure_reasons`).
        sort: The order (default: by position).
        filters: Conditions on the items (default: none).

    Returns:
        The window, and its items.

    Raises:
        ValueError: A sort kind or comparison that is not one of the known ones.
    """
    filters = filters or ItemFilter()
    if show == "failed":
        filters = replace(filters, failed=True, reason=reason or filters.reason)
    elif show == "flagged":
        filters = replace(filters, flagged=True)
    listing = _Listing(store, run_id, sort or ItemSort(), filters)
    counted = store.con.execute(
        f"SELECT count(*) FROM items i WHERE {listing.where}", listing.params
    ).fetchone()
    shown = window(int(counted[0]) if counted else 0)
    flags = "i.flags" if listing.has_flags else "NULL"
    cursor = store.con.execute(
        f"{listing.select(flags)} ORDER BY {listing.order} LIMIT $limit OFFSET $offset",
        {**listing.all_params, "limit": shown.per_page, "offset": shown.offset},
    )
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return shown, cast(list[ListedItem], rows)


class ListNeighbours(TypedDict):
    """An item's place in a filtered, sorted item list."""

    previous: str | None
    next: str | None
    rank: int
    """1-based place in the list."""
    total: int
    """Items in the list."""


def listed_neighbours(
    store: RunStore, run_id: str, item_id: str, *, sort: ItemSort, filters: ItemFilter
) -> ListNeighbours | None:
    """The items before and after an item in a run's item list as :func:`run_items` orders it.

    Args:
        store: The run store.
        run_id: Full run id.
        item_id: The item.
        sort: The list's order.
        filters: The list's conditions.

    Returns:
        Its neighbours and place; None when the list does not hold the item.
    """
    listing = _Listing(store, run_id, sort, filters)
    cursor = store.con.execute(
        f"""
        SELECT previous, next, rank, total FROM (
            SELECT item_id, lag(item_id) OVER w AS previous, lead(item_id) OVER w AS next,
                   row_number() OVER w AS rank, count(*) OVER () AS total
            FROM ({listing.select("NULL")} ) i
            WINDOW w AS (ORDER BY {listing.order}))
        WHERE item_id = $item""",
        {**listing.all_params, "item": item_id},
    )
    row = cursor.fetchone()
    if row is None:
        return None
    return ListNeighbours(previous=row[0], next=row[1], rank=int(row[2]), total=int(row[3]))


class ItemExtras(TypedDict):
    """What a run's item list shows of an item beside its final scores."""

    cost_usd: float | None
    latency_s: float | None
    lowest_step: float | None
    medians: dict[str, float]
    """The physicians' median per attribute (rated attributes only)."""


def item_list_extras(
    store: RunStore, run_id: str, item_ids: Sequence[str]
) -> dict[str, ItemExtras]:
    """Summed cost and latency of calls, lowest PRM step score and physicians' medians of some
    of a run's items (one page's).

    Args:
        store: The run store.
        run_id: Full run id.
        item_ids: The items.
    """
    out: dict[str, ItemExtras] = {
        i: ItemExtras(cost_usd=None, latency_s=None, lowest_step=None, medians={}) for i in item_ids
    }
    if not item_ids:
        return out
    ids = list(item_ids)
    # The range is redundant but lets DuckDB skip row groups by their min/max.
    for row in store.query(
        "SELECT item_id, sum(cost_usd) AS c, sum(latency_s) AS t FROM calls "
        "WHERE run_id = ? AND item_id IN (SELECT unnest(?)) AND item_id BETWEEN ? AND ? "
        "GROUP BY item_id",
        [run_id, ids, min(ids), max(ids)],
    ):
        extras = out[row["item_id"]]
        extras["cost_usd"], extras["latency_s"] = row["c"], row["t"]
    if store.has_table("prm_steps"):
        for row in store.query(
            "SELECT item_id, min(score) AS lowest FROM prm_steps WHERE run_id = ? "
            "AND item_id IN (SELECT unnest(?)) GROUP BY item_id",
            [run_id, ids],
        ):
            out[row["item_id"]]["lowest_step"] = row["lowest"]
    for item_id, medians in physician_medians(store, ids).items():
        out[item_id]["medians"] = medians
    return out


def run_has_steps(store: RunStore, run_id: str) -> bool:
    """Whether a run stored PRM step scores (a judge run with PRM evidence, or `prm score`)."""
    if not store.has_table("prm_steps"):
        return False
    sql = "SELECT count(*) FROM (SELECT 1 FROM prm_steps WHERE run_id = ? LIMIT 1)"
    return bool(_count(store, sql, [run_id]))


class FinalScore(TypedDict):
    """An item's final value of one attribute."""

    item_id: str
    attribute: str
    value: float | None
    status: str


def final_scores(store: RunStore, run_id: str, item_ids: Sequence[str]) -> list[FinalScore]:
    """The final judgments of some of a run's items, in no particular order.

    Args:
        store: The run store.
        run_id: Full run id.
        item_ids: The items (one page's).
    """
    if not item_ids:
        return []
    ids = list(item_ids)
    rows = store.query(
        """
        SELECT item_id, attribute, value, status FROM judgments
        WHERE run_id = ? AND final AND item_id IN (SELECT unnest(?))
          AND item_id BETWEEN ? AND ?""",
        # The range is redundant but lets DuckDB skip row groups by their min/max.
        [run_id, ids, min(ids), max(ids)],
    )
    return cast(list[FinalScore], rows)


def is_prm_scoring_run(store: RunStore, run_id: str) -> bool:
    """Whether a run is a `judge prm score` run: step scores in ``prm_steps`` and no ``items``
    rows."""
    if not store.has_table("prm_steps"):
        return False
    row = store.query(
        "SELECT (SELECT count(*) FROM (SELECT 1 FROM items WHERE run_id = ? LIMIT 1)) AS items, "
        "(SELECT count(*) FROM (SELECT 1 FROM prm_steps WHERE run_id = ? LIMIT 1)) AS steps",
        [run_id, run_id],
    )[0]
    return not row["items"] and bool(row["steps"])


class ScoredItem(TypedDict):
    """An item of a PRM scoring run."""

    item_id: str
    position: int
    """The item's place in the run, by item id."""
    candidates: int
    lowest: float | None
    """Its lowest step score."""


SCORED_SORT_KINDS: tuple[str, ...] = ("position", "item", "prm_min")
"""What the item list of a PRM scoring run can be sorted by (position is item id order)."""


def scored_items(
    store: RunStore,
    run_id: str,
    window: Callable[[int], W],
    *,
    sort: ItemSort | None = None,
    text: str = "",
) -> tuple[W, list[ScoredItem]]:
    """One window of the items of a PRM scoring run with their lowest step score.

    Args:
        store: The run store.
        run_id: Full run id.
        window: Given the number of scored items, the window to read.
        sort: By item id (``position`` or ``item``) or by lowest step score (``prm_min``).
        text: Only items whose id or some step's text holds this (case-insensitive).

    Returns:
        The window, and its items.

    Raises:
        ValueError: Another sort kind.
    """
    sort = sort or ItemSort()
    if sort.kind not in SCORED_SORT_KINDS:
        raise ValueError(f"unknown sort {sort.kind!r}: one of {', '.join(SCORED_SORT_KINDS)}")
    direction = "DESC" if sort.desc else "ASC"
    key = "lowest" if sort.kind == "prm_min" else "item_id"
    having = "HAVING bool_or(contains(lower(item_id || ' ' || coalesce(text, '')), $text))"
    params: dict[str, Any] = {"run": run_id}
    if text:
        params["text"] = text.lower()
    grouped = (
        "SELECT item_id, count(DISTINCT candidate) AS candidates, min(score) AS lowest "
        f"FROM prm_steps WHERE run_id = $run GROUP BY item_id {having if text else ''}"
    )
    counted = store.con.execute(f"SELECT count(*) FROM ({grouped})", params).fetchone()
    shown = window(int(counted[0]) if counted else 0)
    cursor = store.con.execute(
        f"""
        SELECT item_id, position, candidates, lowest FROM (
            SELECT *, row_number() OVER (ORDER BY item_id) - 1 AS position FROM (
                SELECT item_id, count(DISTINCT candidate) AS candidates, min(score) AS lowest,
                       {
            "bool_or(contains(lower(item_id || ' ' || coalesce(text, '')), $text))"
            if text
            else "true"
        } AS found
                FROM prm_steps WHERE run_id = $run GROUP BY item_id))
        WHERE found ORDER BY {key} {direction} NULLS LAST, item_id LIMIT $limit OFFSET $offset""",
        {**params, "limit": shown.per_page, "offset": shown.offset},
    )
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return shown, cast(list[ScoredItem], rows)


# -- an item's page ---------------------------------------------------------------------------

ItemTable = Literal["judgments", "samples", "messages", "calls", "claims", "prm_steps"]
"""Tables holding rows of one item that its page shows."""

_ITEM_TABLES: dict[str, tuple[str, str]] = {
    "judgments": (
        "sample, agent, attribute, value, status, error, rationale",
        "sample, agent, rowid",
    ),
    "samples": (
        "sample, agent, status, error, raw_text, rationale, n_calls, latency_s",
        "sample, agent, rowid",
    ),
    "messages": ("sample, agent, seq, role, content", "sample, seq, rowid"),
    "calls": (
        "sample, seq, role, agent, model, prompt_tokens, completion_tokens, tokens_estimated, "
        "cost_usd, latency_s, status, error, finish_reason, started_at",
        "sample, agent, role, seq, rowid",
    ),
    "claims": (
        "sample, agent, kind, idx, section, text, verdict, score, explanation, citations, "
        "supporting, status, error",
        "sample, agent, kind, idx, rowid",
    ),
    "prm_steps": (
        "candidate, step, kind, text, score, flagged, label, model",
        "candidate, step, rowid",
    ),
}
"""Per table: the columns an item page reads and their order. ``rowid`` breaks ties, so the
live page and the export (which reads many items in one query) list rows in the same order."""


def _item_source(store: RunStore, table: ItemTable) -> tuple[str, str, str]:
    """An item table's columns, what to read them from and their order.

    ``messages`` is a view (``runs/_message_texts.py``), which has no ``rowid``: its rows are
    read from the query behind it, ordered by each ``message_rows`` row's ``rowid``: the same
    order as the table that older stores (opened read-only, so never migrated) still have.
    """
    columns, order = _ITEM_TABLES[table]
    if table == "messages" and store.messages_split():
        source = f"({messages_select(row_order=True)}) AS messages"
        return columns, source, order.replace("rowid", "row_order")
    return columns, table, order


def item_table_rows(
    store: RunStore, table: ItemTable, run_id: str, item_id: str
) -> list[dict[str, Any]]:
    """One item's rows of a table, in the order its page lists them.

    The rows are the page's to change (it adds what it works out, such as a call's attempt
    number), so they are plain dicts.

    Args:
        store: The run store.
        table: The table (``claims`` and ``prm_steps`` may be missing from older databases).
        run_id: Full run id.
        item_id: The item.

    Returns:
        Rows of these columns: ``judgments``: sample, agent, attribute, value, status, error,
        rationale; ``samples``: sample, agent, status, error, raw_text, rationale, n_calls,
        latency_s; ``messages``: sample, agent, seq, role, content; ``calls``: sample, seq,
        role, agent, model, prompt_tokens, completion_tokens, tokens_estimated, cost_usd,
        latency_s, status, error, finish_reason, started_at; ``claims``: sample, agent, kind,
        idx, section, text, verdict, score, explanation, citations and supporting (JSON text),
        status, error; ``prm_steps``: candidate, step, kind, text, score, flagged, label,
        model.
    """
    columns, source, order = _item_source(store, table)
    return store.query(
        f"SELECT {columns} FROM {source} WHERE run_id = ? AND item_id = ? ORDER BY {order}",
        [run_id, item_id],
    )


def item_table_rows_by_item(
    store: RunStore, table: ItemTable, run_id: str, item_ids: Sequence[str]
) -> dict[str, list[dict[str, Any]]]:
    """:func:`item_table_rows` of many items of a run in one query (the static export).

    Args:
        store: The run store.
        table: The table.
        run_id: Full run id.
        item_ids: The items (a few hundred: their rows are all read at once).

    Returns:
        Each item's rows, as :func:`item_table_rows` returns them (an empty list for none).
    """
    columns, source, order = _item_source(store, table)
    out: dict[str, list[dict[str, Any]]] = {i: [] for i in item_ids}
    if not item_ids:
        return out
    ids = list(item_ids)
    for row in store.query(
        f"SELECT item_id, {columns} FROM {source} WHERE run_id = ? "
        # The range is redundant but lets DuckDB skip row groups by their min/max.
        f"AND item_id IN (SELECT unnest(?)) AND item_id BETWEEN ? AND ? "
        f"ORDER BY item_id, {order}",
        [run_id, ids, min(ids), max(ids)],
    ):
        out[row.pop("item_id")].append(row)
    return out


def stored_item(store: RunStore, run_id: str, item_id: str) -> dict[str, Any] | None:
    """An item's ``items`` row, every column (notes, summary, meta, flags, ...); None when the
    run has no such item."""
    rows = store.query("SELECT * FROM items WHERE run_id = ? AND item_id = ?", [run_id, item_id])
    return rows[0] if rows else None


def stored_items_by_id(
    store: RunStore, run_id: str, item_ids: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """:func:`stored_item` of many items of a run in one query (items without a row are left
    out)."""
    rows = store.query(
        "SELECT * FROM items WHERE run_id = ? AND item_id IN (SELECT unnest(?))",
        [run_id, list(item_ids)],
    )
    return {r["item_id"]: r for r in rows}


def item_neighbours(
    store: RunStore, run_id: str, position: int | None
) -> tuple[str | None, str | None]:
    """The items before and after a position in a run: the nearest position below and above.

    Returns:
        The previous and the next item's id (None at either end, and for no position).
    """
    row = store.query(
        """
        SELECT (SELECT item_id FROM items WHERE run_id = ? AND position < ?
                ORDER BY position DESC LIMIT 1) AS previous,
               (SELECT item_id FROM items WHERE run_id = ? AND position > ?
                ORDER BY position LIMIT 1) AS next""",
        [run_id, position, run_id, position],
    )[0]
    return row["previous"], row["next"]


class ItemPosition(TypedDict):
    """An item and its position in its run."""

    item_id: str
    position: int | None


def item_order(store: RunStore, run_id: str) -> list[ItemPosition]:
    """Every item of a run in page order, by position then id (the export's plan)."""
    rows = store.query(
        "SELECT item_id, position FROM items WHERE run_id = ? ORDER BY position, item_id",
        [run_id],
    )
    return cast(list[ItemPosition], rows)


def scored_item_ids(store: RunStore, run_id: str) -> list[str]:
    """The items of a PRM scoring run (their ids in ``prm_steps``), sorted."""
    rows = store.query(
        "SELECT DISTINCT item_id FROM prm_steps WHERE run_id = ? ORDER BY item_id", [run_id]
    )
    return [r["item_id"] for r in rows]


def scored_item_neighbours(
    store: RunStore, run_id: str, item_id: str
) -> tuple[str | None, str | None] | None:
    """The items before and after an item of a PRM scoring run, by item id.

    Returns:
        The previous and the next item's id (None at either end); None when the run has no
        steps of this item.
    """
    found = store.query(
        """
        SELECT (SELECT count(*) FROM prm_steps WHERE run_id = ? AND item_id = ?) AS n,
               (SELECT max(item_id) FROM prm_steps WHERE run_id = ? AND item_id < ?) AS previous,
               (SELECT min(item_id) FROM prm_steps WHERE run_id = ? AND item_id > ?) AS next""",
        [run_id, item_id, run_id, item_id, run_id, item_id],
    )[0]
    return (found["previous"], found["next"]) if found["n"] else None


def scored_listed_neighbours(
    store: RunStore, run_id: str, item_id: str, *, sort: ItemSort, text: str = ""
) -> ListNeighbours | None:
    """:func:`listed_neighbours` for the item list of a PRM scoring run (:func:`scored_items`).

    Raises:
        ValueError: A sort kind other than :data:`SCORED_SORT_KINDS`.
    """
    if sort.kind not in SCORED_SORT_KINDS:
        raise ValueError(f"unknown sort {sort.kind!r}: one of {', '.join(SCORED_SORT_KINDS)}")
    direction = "DESC" if sort.desc else "ASC"
    key = "lowest" if sort.kind == "prm_min" else "item_id"
    params: dict[str, Any] = {"run": run_id, "item": item_id}
    found = "true"
    if text:
        params["text"] = text.lower()
        found = "bool_or(contains(lower(item_id || ' ' || coalesce(text, '')), $text))"
    row = store.con.execute(
        f"""
        SELECT previous, next, rank, total FROM (
            SELECT item_id, lag(item_id) OVER w AS previous, lead(item_id) OVER w AS next,
                   row_number() OVER w AS rank, count(*) OVER () AS total
            FROM (SELECT item_id, min(score) AS lowest, {found} AS found
                  FROM prm_steps WHERE run_id = $run GROUP BY item_id)
            WHERE found
            WINDOW w AS (ORDER BY {key} {direction} NULLS LAST, item_id))
        WHERE item_id = $item""",
        params,
    ).fetchone()
    if row is None:
        return None
    return ListNeighbours(previous=row[0], next=row[1], rank=int(row[2]), total=int(row[3]))


class ItemRating(TypedDict):
    """A physician's rating of one attribute of an item."""

    rater_id: str
    attribute: str
    score: float | None


def item_ratings(store: RunStore, item_id: str) -> list[ItemRating]:
    """Physicians' ratings of an item, by rater."""
    rows = store.query(
        "SELECT rater_id, attribute, score FROM human_ratings WHERE item_id = ? ORDER BY rater_id",
        [item_id],
    )
    return cast(list[ItemRating], rows)


def item_ratings_by_item(store: RunStore, item_ids: Sequence[str]) -> dict[str, list[ItemRating]]:
    """:func:`item_ratings` of many items in one query.

    Returns:
        Each item's ratings, as :func:`item_ratings` returns them (an empty list for none).
    """
    out: dict[str, list[dict[str, Any]]] = {i: [] for i in item_ids}
    for row in store.query(
        "SELECT item_id, rater_id, attribute, score FROM human_ratings "
        "WHERE item_id IN (SELECT unnest(?)) ORDER BY rater_id",
        [list(item_ids)],
    ):
        out[row.pop("item_id")].append(row)
    return cast(dict[str, list[ItemRating]], out)


# -- comparing runs -----------------------------------------------------------------------------

_SHARED_ITEMS = """
    WITH f AS (
        SELECT run_id, item_id, attribute, value FROM judgments
        WHERE run_id IN (SELECT unnest($runs)) AND final AND sample = $sample
          AND agent = $agent),
    shared AS (
        SELECT item_id FROM f GROUP BY item_id
        HAVING count(DISTINCT run_id) = len($runs)),
    spread AS (
        SELECT item_id, attribute, max(value) - min(value) AS spread,
               count(value) AS n
        FROM f WHERE item_id IN (SELECT item_id FROM shared)
        GROUP BY item_id, attribute),
    ranked AS (
        SELECT item_id, coalesce(sum(spread) FILTER (WHERE n >= 2), 0) AS disagreement,
               coalesce(max(spread) FILTER (WHERE n >= 2), 0) AS largest,
               count(*) FILTER (WHERE n < len($runs)) AS unscored
        FROM spread GROUP BY item_id)
"""


class Disagreement(TypedDict):
    """How far apart the runs' final scores of one item are."""

    item_id: str
    disagreement: float
    """Sum over attributes of the spread (highest minus lowest)."""
    largest: float
    """The largest spread of one attribute."""
    unscored: int
    """Attributes some run left without a value."""
    sort_value: float | None
    """The value the list is sorted by (the disagreement unless sorted otherwise)."""


COMPARE_SORT_KINDS: tuple[str, ...] = ("disagreement", "largest", "spread", "absdiff", "item")
"""What the items of a comparison can be sorted by: the summed spread across runs (highest
minus lowest final score, summed over attributes), its largest attribute, one attribute's
spread (``spread``, with an attribute), the largest gap between a run's final score and the
physicians' median (``absdiff``: of one attribute, or without one the mean over attributes),
and item id."""

_COMPARE_GAPS = """,
    med AS (
        SELECT item_id, attribute, median(score) AS m FROM human_ratings
        WHERE score IS NOT NULL AND item_id IN (SELECT item_id FROM shared) GROUP BY ALL),
    gap AS (
        SELECT f.item_id, f.attribute, max(abs(f.value - med.m)) AS g
        FROM f JOIN med ON med.item_id = f.item_id AND med.attribute = f.attribute
        GROUP BY ALL)
"""


def disagreeing_items(
    store: RunStore,
    run_ids: Sequence[str],
    window: Callable[[int], W],
    *,
    sort: str = "disagreement",
    attribute: str | None = None,
    desc: bool = True,
) -> tuple[W, list[Disagreement]]:
    """Items every run scored, sorted (largest disagreement first by default), one window.

    Args:
        store: The run store.
        run_ids: Full run ids (two or more, each once).
        window: Given the number of shared items, the window to read.
        sort: One of :data:`COMPARE_SORT_KINDS`.
        attribute: The attribute of ``spread`` (required) and ``absdiff`` (optional).
        desc: Largest first (items without a value come last either way).

    Returns:
        The window, and its items.

    Raises:
        ValueError: An unknown sort, or ``spread`` without an attribute.
    """
    if sort not in COMPARE_SORT_KINDS:
        raise ValueError(f"unknown sort {sort!r}: one of {', '.join(COMPARE_SORT_KINDS)}")
    if sort == "spread" and not attribute:
        raise ValueError("sort 'spread' needs an attribute")
    params: dict[str, Any] = {"runs": list(run_ids), "sample": FINAL_SAMPLE, "agent": FINAL_AGENT}
    counted = store.con.execute(_SHARED_ITEMS + "SELECT count(*) FROM ranked", params).fetchone()
    shown = window(counted[0] if counted else 0)
    ctes, join, key = _SHARED_ITEMS, "", "NULL::DOUBLE"
    keyed = dict(params)
    if sort in ("disagreement", "largest"):
        key = f"r.{sort}"
    elif sort == "spread":
        join = (
            "LEFT JOIN (SELECT item_id, spread AS k FROM spread WHERE attribute = $attr) s "
            "ON s.item_id = r.item_id"
        )
        key, keyed["attr"] = "s.k", attribute
    elif sort == "absdiff" and store.has_table("human_ratings"):
        ctes += _COMPARE_GAPS
        if attribute:
            join = (
                "LEFT JOIN (SELECT item_id, g AS k FROM gap WHERE attribute = $attr) s "
                "ON s.item_id = r.item_id"
            )
            keyed["attr"] = attribute
        else:
            join = (
                "LEFT JOIN (SELECT item_id, avg(g) AS k FROM gap GROUP BY item_id) s "
                "ON s.item_id = r.item_id"
            )
        key = "s.k"
    direction = "DESC" if desc else "ASC"
    order = (
        f"r.item_id {direction}"
        if sort == "item"
        else f"{key} {direction} NULLS LAST, r.disagreement DESC, r.largest DESC, r.item_id"
    )
    cursor = store.con.execute(
        ctes
        + f"""SELECT r.item_id, r.disagreement, r.largest, r.unscored, {key} AS sort_value
              FROM ranked r {join}
              ORDER BY {order} LIMIT $limit OFFSET $offset""",
        {**keyed, "limit": shown.per_page, "offset": shown.offset},
    )
    return shown, [
        Disagreement(
            item_id=item, disagreement=total, largest=largest, unscored=unscored, sort_value=value
        )
        for item, total, largest, unscored, value in cursor.fetchall()
    ]


def physician_medians(store: RunStore, item_ids: Sequence[str]) -> dict[str, dict[str, float]]:
    """The physicians' median score of each rated attribute of some items.

    Args:
        store: The run store.
        item_ids: The items (one page's).

    Returns:
        Item to attribute to median (items and attributes without ratings left out).
    """
    out: dict[str, dict[str, float]] = {}
    if not item_ids or not store.has_table("human_ratings"):
        return out
    for row in store.query(
        "SELECT item_id, attribute, median(score) AS m FROM human_ratings "
        "WHERE item_id IN (SELECT unnest(?)) AND score IS NOT NULL GROUP BY ALL",
        [list(item_ids)],
    ):
        out.setdefault(row["item_id"], {})[row["attribute"]] = row["m"]
    return out


class RunFinalScore(TypedDict):
    """A run's final value of one attribute of an item."""

    run_id: str
    item_id: str
    attribute: str
    value: float | None


def final_scores_of_runs(
    store: RunStore, run_ids: Sequence[str], item_ids: Sequence[str]
) -> list[RunFinalScore]:
    """The final judgments of some items in each of some runs, in no particular order."""
    if not item_ids:
        return []
    rows = store.query(
        """SELECT run_id, item_id, attribute, value FROM judgments
           WHERE run_id IN (SELECT unnest(?)) AND final
             AND item_id IN (SELECT unnest(?))""",
        [list(run_ids), list(item_ids)],
    )
    return cast(list[RunFinalScore], rows)


def item_counts(store: RunStore, run_ids: Sequence[str]) -> dict[str, int]:
    """How many items each run holds (runs without items are left out)."""
    rows = store.query(
        """SELECT run_id, count(*) AS items FROM items WHERE run_id IN (SELECT unnest(?))
           GROUP BY run_id""",
        [list(run_ids)],
    )
    return {r["run_id"]: r["items"] for r in rows}


# -- the viewer's private copy ----------------------------------------------------------------


def checkpoint_copy(path: Path) -> None:
    """Fold a database file's write-ahead log into the file, so that no later connection to it
    replays the log (the viewer does this once for each private copy it takes).

    Args:
        path: A copy of a database, its ``.wal`` beside it; nothing else may have it open.
    """
    con = connect_duckdb(str(path))
    try:
        con.execute("CHECKPOINT")
    finally:
        con.close()
