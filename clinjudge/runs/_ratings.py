"""Physicians' ratings in the store: import a validated file, list and read what is stored.

The file is read and checked against the rubric by :func:`clinjudge.inputs.load_ratings` (file,
line and field in every error); nothing is written unless the whole file is valid.

Ratings live in the ``human_ratings`` table, independent of runs and keyed by
(item_id, rater_id, attribute); importing a rating again replaces it, so re-imports are
idempotent and corrections overwrite.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clinjudge.inputs import HumanRating, load_ratings
from clinjudge.rubrics import Rubric
from clinjudge.runs._manage import audit_settings
from clinjudge.runs._reads import count_query, query_arrow
from clinjudge.runs._store import RunStore, now

if TYPE_CHECKING:  # Arrow loads with the first table read, not with the store
    import pyarrow as pa

load_human_ratings = load_ratings
"""The old name of :func:`clinjudge.inputs.load_ratings` (the one ratings reader), kept for
callers that import it from ``clinjudge.runs``."""


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


def import_ratings(store: RunStore, path: str | Path, rubric: Rubric) -> ImportSummary:
    """Validate a ratings file and upsert it into ``human_ratings`` in one transaction.

    Args:
        store: The run store (opened for writing).
        path: The ratings file.
        rubric: The rubric the scores follow.

    Raises:
        InputError: When the file has any problem; nothing is written then.
    """
    ratings = load_ratings(path, rubric)
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


def audit_ratings(store: RunStore, run: dict[str, Any]) -> list[HumanRating]:
    """The physicians' ratings an audit's PPI++ estimates are shown with: those imported for
    its items (``judge ratings import``, ``judge rate``), else those its last computation was
    given (`judge audit --ratings FILE`, kept with its settings).

    Args:
        store: The run store.
        run: The audit run's row (``RunStore.get_run``).
    """
    imported = stored_ratings_for_run(store, run["run_id"])
    kept = audit_settings(run).get("ratings")
    if imported or not kept:
        return imported
    return [HumanRating(str(i), str(r), a, s) for i, r, a, s in kept]


# ---------------------------------------------------------------------------------------------
# Agreement with a run: Arrow columns


def human_ratings_of_run(
    store: RunStore, run_id: str, attributes: Sequence[str]
) -> pa.Table | None:
    """The physicians' ratings of a run's items, as Arrow columns ``item_id``, ``rater_id``,
    ``attribute``, ``score``: attributes in the order given, then items in run order, then
    raters. None when the store has no ``human_ratings`` table (an older file opened
    read-only).

    Args:
        store: The run store.
        run_id: Full run id.
        attributes: The attributes to read.
    """
    if not store.has_table("human_ratings"):
        return None
    attributes = list(attributes)
    return query_arrow(
        store,
        """
        SELECT h.item_id, h.rater_id, h.attribute, h.score
        FROM human_ratings h JOIN items i ON i.item_id = h.item_id AND i.run_id = ?
        WHERE h.attribute IN (SELECT unnest(?))
        ORDER BY list_position(?, h.attribute), i.position, h.rater_id
        """,
        [run_id, attributes, attributes],
    )


def rated_item_count(store: RunStore) -> int:
    """How many distinct items the store's physicians' ratings cover (0 without the table).

    Args:
        store: The run store.
    """
    if not store.has_table("human_ratings"):
        return 0
    return count_query(store, "SELECT count(DISTINCT item_id) AS n FROM human_ratings", [])


def final_scores_of_rated(
    store: RunStore, run_id: str, attributes: Sequence[str], rater_id: str
) -> pa.Table:
    """A run's final score of every (item, attribute) that some physician rated, as Arrow
    columns ``item_id``, ``rater_id`` (the given name), ``attribute`` and ``score`` (null when
    the judgment failed): attributes in the order given, then items by id.

    Args:
        store: The run store.
        run_id: Full run id.
        attributes: The attributes to read.
        rater_id: The rater name the rows carry (the judge's, in agreement tables).
    """
    attributes = list(attributes)
    return query_arrow(
        store,
        """
        SELECT j.item_id, ? AS rater_id, j.attribute,
               CASE WHEN j.status = 'ok' THEN j.value END AS score
        FROM judgments j
        WHERE j.run_id = ? AND j.final AND j.attribute IN (SELECT unnest(?))
          AND EXISTS (SELECT 1 FROM human_ratings h
                      WHERE h.item_id = j.item_id AND h.attribute = j.attribute)
        ORDER BY list_position(?, j.attribute), j.item_id
        """,
        [rater_id, run_id, attributes, attributes],
    )
