"""Data of the compare page: runs side by side per item.

Disagreement between runs is computed in DuckDB over the final scores
(:func:`clinjudge.runs.report_reads.disagreeing_items`): per item, the sum over attributes of the
spread (max minus min) of the runs' final values; the page shows the items with the largest
disagreement first. The agreement, cost and latency table is
:func:`clinjudge.analysis.compare_runs`, the same as ``judge compare``.
"""

from __future__ import annotations

from typing import Any

from clinjudge.reports._viewer_paging import page_window
from clinjudge.reports._viewer_query import BadRequest
from clinjudge.runs import RunStore
from clinjudge.runs.report_reads import (
    COMPARE_SORT_KINDS,
    disagreeing_items,
    final_scores_of_runs,
    item_counts,
    physician_medians,
)


def compare_sort_label(sort: str) -> str:
    """Words for a sort of the compare page's items."""
    kind, _, attribute = sort.partition(":")
    return {
        "disagreement": "disagreement between the runs (summed over attributes)",
        "largest": "largest disagreement of one attribute",
        "spread": f"disagreement between the runs: {attribute}",
        "absdiff": f"largest |run − physicians' median|: {attribute}"
        if attribute
        else "largest |run − physicians' median|, mean over attributes",
        "item": "item id",
    }.get(kind, sort)


def compare_sorts(keys: list[str], rated: bool) -> list[str]:
    """The sorts the compare page offers."""
    out = ["disagreement", "largest", *(f"spread:{k}" for k in keys)]
    if rated:
        out += ["absdiff", *(f"absdiff:{k}" for k in keys)]
    return [*out, "item"]


def parse_compare_sort(sort: str, keys: list[str]) -> str:
    """A compare page's ``sort`` parameter, checked against the sorts and the attributes.

    Raises:
        BadRequest: An unknown sort key or attribute.
    """
    sort = sort.strip() or "disagreement"
    kind, colon, attribute = sort.partition(":")
    if kind not in COMPARE_SORT_KINDS:
        raise BadRequest(
            f"unknown sort key {sort!r}: sort by one of {', '.join(COMPARE_SORT_KINDS)}, "
            "spread:ATTRIBUTE or absdiff:ATTRIBUTE"
        )
    if colon and kind not in ("spread", "absdiff"):
        raise BadRequest(f"sort={sort}: {kind} takes no attribute")
    if colon and attribute not in keys:
        raise BadRequest(
            f"sort={sort}: unknown attribute {attribute!r} (these runs' attributes: "
            f"{', '.join(keys)})"
        )
    if kind == "spread" and not colon:
        raise BadRequest(f"sort={sort}: name the attribute, as spread:ATTRIBUTE")
    return sort


def compare_items(
    store: RunStore,
    run_ids: list[str],
    *,
    page: int = 1,
    per_page: int = 50,
    sort: str = "disagreement",
    desc: bool = True,
) -> dict[str, Any]:
    """Items the runs share, sorted (largest disagreement first by default), with each run's
    final scores and the physicians' median of each attribute.

    Args:
        store: The run store.
        run_ids: Full run ids (two or more).
        page: Page number.
        per_page: Items per page.
        sort: A checked sort (:func:`parse_compare_sort`).
        desc: Largest first.
    """
    kind, _, attribute = sort.partition(":")
    paging, ranked = disagreeing_items(
        store, run_ids, page_window(page, per_page), sort=kind, attribute=attribute or None,
        desc=desc,
    )  # fmt: skip
    ids = [r["item_id"] for r in ranked]
    values: dict[str, dict[str, dict[str, float | None]]] = {i: {} for i in ids}
    for score in final_scores_of_runs(store, run_ids, ids):
        values[score["item_id"]].setdefault(score["attribute"], {})[score["run_id"]] = score[
            "value"
        ]
    medians = physician_medians(store, ids)
    items = [
        {**row, "values": values[row["item_id"]], "medians": medians.get(row["item_id"], {})}
        for row in ranked
    ]
    return {
        "items": items,
        "paging": paging,
        "items_per_run": item_counts(store, run_ids),
        "sort": sort,
        "desc": desc,
    }
