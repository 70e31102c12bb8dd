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
from pathlib import Path
from typing import Any, Literal, Protocol, TypedDict, TypeVar, cast

from clinjudge._util.offline import connect_duckdb
from clinjudge.runs._aggregate import FINAL_AGENT
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


def _item_filter(run_id: str, show: str, reason: str | None) -> tuple[str, list[Any]]:
    """The condition narrowing a run's items to those with a failed sample (of a reason) or
    flags."""
    if show == "failed":
        sql = "AND i.item_id IN (SELECT item_id FROM samples WHERE run_id = ? AND status <> 'ok'"
        params: list[Any] = [run_id]
        if reason:
            sql += " AND coalesce(error, '(no reason recorded)') = ?"
            params.append(reason)
        return sql + ")", params
    if show == "flagged":
        return "AND json_array_length(i.flags) > 0", []
    return "", []


class ListedItem(TypedDict):
    """An item as a run's item list shows it."""

    item_id: str
    position: int | None
    vendor: str | None
    specialty: str | None
    flags: str | None
    """JSON text (None in a database older than flags)."""


def run_items(
    store: RunStore,
    run_id: str,
    window: Callable[[int], W],
    *,
    show: str = "all",
    reason: str | None = None,
) -> tuple[W, list[ListedItem]]:
    """One window of a run's items, in position order.

    Args:
        store: The run store.
        run_id: Full run id.
        window: Given the number of items listed, the window to read.
        show: An :data:`ItemShow` (anything else lists all).
        reason: With ``failed``: only items with a sample failed for this reason (the
            ``reason`` of :func:`run_failure_reasons`).

    Returns:
        The window, and its items.
    """
    extra, params = _item_filter(run_id, show, reason)
    has_flags = store.has_column("items", "flags")
    if not has_flags and show == "flagged":
        extra = "AND false"
    total = _count(
        store, f"SELECT count(*) AS n FROM items i WHERE i.run_id = ? {extra}", [run_id, *params]
    )
    shown = window(total)
    flags = "i.flags" if has_flags else "NULL"
    rows = store.query(
        f"""
        SELECT i.item_id, i.position, i.vendor, i.specialty, {flags} AS flags
        FROM items i WHERE i.run_id = ? {extra}
        ORDER BY i.position, i.item_id LIMIT ? OFFSET ?""",
        [run_id, *params, shown.per_page, shown.offset],
    )
    return shown, cast(list[ListedItem], rows)


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


def scored_items(
    store: RunStore, run_id: str, window: Callable[[int], W]
) -> tuple[W, list[ScoredItem]]:
    """One window of the items of a PRM scoring run, by item id, with their lowest step score.

    Args:
        store: The run store.
        run_id: Full run id.
        window: Given the number of scored items, the window to read.

    Returns:
        The window, and its items.
    """
    sql = "SELECT count(DISTINCT item_id) AS n FROM prm_steps WHERE run_id = ?"
    shown = window(_count(store, sql, [run_id]))
    rows = store.query(
        """
        SELECT item_id, row_number() OVER (ORDER BY item_id) - 1 AS position,
               count(DISTINCT candidate) AS candidates, min(score) AS lowest
        FROM prm_steps WHERE run_id = ? GROUP BY item_id ORDER BY item_id LIMIT ? OFFSET ?""",
        [run_id, shown.per_page, shown.offset],
    )
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
    columns, order = _ITEM_TABLES[table]
    return store.query(
        f"SELECT {columns} FROM {table} WHERE run_id = ? AND item_id = ? ORDER BY {order}",
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
    columns, order = _ITEM_TABLES[table]
    out: dict[str, list[dict[str, Any]]] = {i: [] for i in item_ids}
    if not item_ids:
        return out
    ids = list(item_ids)
    for row in store.query(
        f"SELECT item_id, {columns} FROM {table} WHERE run_id = ? "
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


def disagreeing_items(
    store: RunStore, run_ids: Sequence[str], window: Callable[[int], W]
) -> tuple[W, list[Disagreement]]:
    """Items every run scored, largest disagreement first, one window of them.

    Args:
        store: The run store.
        run_ids: Full run ids (two or more, each once).
        window: Given the number of shared items, the window to read.

    Returns:
        The window, and its items.
    """
    params: dict[str, Any] = {"runs": list(run_ids), "sample": FINAL_SAMPLE, "agent": FINAL_AGENT}
    counted = store.con.execute(_SHARED_ITEMS + "SELECT count(*) FROM ranked", params).fetchone()
    shown = window(counted[0] if counted else 0)
    cursor = store.con.execute(
        _SHARED_ITEMS
        + """SELECT item_id, disagreement, largest, unscored FROM ranked
             ORDER BY disagreement DESC, largest DESC, item_id LIMIT $limit OFFSET $offset""",
        {**params, "limit": shown.per_page, "offset": shown.offset},
    )
    return shown, [
        Disagreement(item_id=item, disagreement=total, largest=largest, unscored=unscored)
        for item, total, largest, unscored in cursor.fetchall()
    ]


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
