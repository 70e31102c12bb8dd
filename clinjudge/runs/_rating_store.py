"""The tables of `judge rate`: rating plans and their assignments, raters' links (tokens,
stored hashed) and sessions, and every save with its history.

A save writes the ratings into ``human_ratings`` (``source = 'rate'``), where agreement, audits
and the viewer read them with no import step, and one row per attribute into
``rating_history`` (the score before and after), in one transaction: an acknowledged save is
committed, and an edit never silently overwrites. A save carries a client-made ``save_id``; the
same id again (a retry after a lost connection) changes nothing and answers the stored rows.

The tables are created on first use by the rating commands (:func:`ensure_rating_tables`,
``CREATE TABLE IF NOT EXISTS``), so stores that never rated are unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clinjudge.rubrics import Rubric
from clinjudge.runs._store import RunStore, StoreError, now, rollback

RATE_SOURCE = "rate"
"""``human_ratings.source`` of ratings saved in the rating pages (imports name their file)."""

RATING_DDL = """
CREATE TABLE IF NOT EXISTS rating_plans (
    run_id VARCHAR PRIMARY KEY,
    rubric VARCHAR,
    seed BIGINT,
    size INTEGER,
    overlap VARCHAR,
    strata VARCHAR,
    raters JSON,
    created_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS rating_assignments (
    run_id VARCHAR,
    rater_id VARCHAR,
    item_id VARCHAR,
    position INTEGER,
    PRIMARY KEY (run_id, rater_id, item_id)
);
CREATE TABLE IF NOT EXISTS rating_tokens (
    token_hash VARCHAR PRIMARY KEY,
    run_id VARCHAR,
    rater_id VARCHAR,
    role VARCHAR,
    created_at TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS rating_sessions (
    session_hash VARCHAR PRIMARY KEY,
    token_hash VARCHAR,
    created_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS rating_saves (
    save_id VARCHAR PRIMARY KEY,
    run_id VARCHAR,
    item_id VARCHAR,
    rater_id VARCHAR,
    comment VARCHAR,
    via VARCHAR,
    saved_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS rating_history (
    save_id VARCHAR,
    attribute VARCHAR,
    old_score DOUBLE,
    new_score DOUBLE,
    was_rated BOOLEAN,
    PRIMARY KEY (save_id, attribute)
);
"""
"""``rating_plans``: one per run (seed, size, overlap, strata, raters); ``rating_assignments``:
which rater rates which item, in order; ``rating_tokens``: SHA-256 of each link's secret
(``role`` rater or lead), revocable; ``rating_sessions``: SHA-256 of each browser session's id
and the link it came from; ``rating_saves`` and ``rating_history``: every save, who, when,
and each attribute's score before (``was_rated`` false when there was none) and after."""


def ensure_rating_tables(store: RunStore) -> None:
    """Create the rating tables if the database lacks them."""
    store.con.execute(RATING_DDL)


def _run_id(store: RunStore, run_id: str) -> str:
    return str(store.get_run(run_id)["run_id"])


def stored_run_rubric(store: RunStore, run_id: str) -> tuple[str, Rubric]:
    """The full run id and the rubric a run was judged with.

    Args:
        store: The run store.
        run_id: Run id or unique part of it.

    Raises:
        StoreError: No such run, or the run has no rubric (a PRM scoring run).
    """
    run = store.get_run(run_id)
    data = run.get("rubric_json")
    if data is None:
        raise StoreError(f"run {run['run_id']} has no rubric: there is nothing to rate")
    rubric = Rubric.model_validate(json.loads(data) if isinstance(data, str) else data)
    return str(run["run_id"]), rubric


def plan_candidates(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """A run's items in run order with their vendor and the judge's mean final score (the
    strata a plan may sample by): ``item_id``, ``vendor``, ``score`` (None when unjudged).

    Args:
        store: The run store.
        run_id: Full run id.
    """
    return store.query(
        """
        SELECT i.item_id, i.vendor, s.score
        FROM items i LEFT JOIN (
            SELECT item_id, avg(value) AS score FROM judgments
            WHERE run_id = ? AND final AND status = 'ok' GROUP BY item_id
        ) s ON s.item_id = i.item_id
        WHERE i.run_id = ? ORDER BY i.position
        """,
        [run_id, run_id],
    )


@dataclass(frozen=True)
class PlanRecord:
    """A stored rating plan.

    Args:
        run_id: The run whose items are rated.
        rubric: The rubric's name.
        seed: The sample's seed.
        size: Items sampled.
        overlap: The overlap asked for (``2``: raters per item; ``20%``: share rated by all).
        strata: ``score``, ``vendor`` or empty.
        raters: Rater names.
    """

    run_id: str
    rubric: str
    seed: int
    size: int
    overlap: str
    strata: str
    raters: list[str]


def save_plan(
    store: RunStore, plan: PlanRecord, assignments: Sequence[tuple[str, str, int]], *, replace: bool
) -> None:
    """Store a plan and its assignments (rater, item, position) in one transaction.

    Args:
        store: The run store (opened for writing).
        plan: The plan.
        assignments: (rater_id, item_id, position) rows.
        replace: Replace a run's existing plan (its saved ratings stay).

    Raises:
        StoreError: The run has a plan and ``replace`` is false.
    """
    ensure_rating_tables(store)
    con = store.con
    con.execute("BEGIN TRANSACTION")
    try:
        exists = con.execute(
            "SELECT count(*) FROM rating_plans WHERE run_id = ?", [plan.run_id]
        ).fetchone()
        if exists and exists[0] and not replace:
            raise StoreError(
                f"run {plan.run_id} already has a rating plan; --replace makes a new one "
                "(ratings already saved are kept)",
                setting="replace",
            )
        con.execute("DELETE FROM rating_plans WHERE run_id = ?", [plan.run_id])
        con.execute("DELETE FROM rating_assignments WHERE run_id = ?", [plan.run_id])
        con.execute(
            "INSERT INTO rating_plans VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [plan.run_id, plan.rubric, plan.seed, plan.size, plan.overlap, plan.strata,
             json.dumps(plan.raters), now()],
        )  # fmt: skip
        if assignments:
            con.executemany(
                "INSERT INTO rating_assignments VALUES (?, ?, ?, ?)",
                [[plan.run_id, rater, item, pos] for rater, item, pos in assignments],
            )
        con.execute("COMMIT")
    except BaseException:
        rollback(con)
        raise


def stored_plan(store: RunStore, run_id: str) -> PlanRecord | None:
    """A run's rating plan, or None.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    if not store.has_table("rating_plans"):
        return None
    rows = store.query("SELECT * FROM rating_plans WHERE run_id = ?", [run_id])
    if not rows:
        return None
    r = rows[0]
    raters = json.loads(r["raters"]) if isinstance(r["raters"], str) else r["raters"]
    return PlanRecord(
        run_id=r["run_id"], rubric=r["rubric"], seed=int(r["seed"]), size=int(r["size"]),
        overlap=r["overlap"], strata=r["strata"] or "", raters=list(raters),
    )  # fmt: skip


def plan_raters(store: RunStore, run_id: str) -> list[str]:
    """Raters with assignments in a run's plan, by name.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        "SELECT DISTINCT rater_id FROM rating_assignments WHERE run_id = ? ORDER BY rater_id",
        [run_id],
    )
    return [r["rater_id"] for r in rows]


# -- links and sessions -------------------------------------------------------------------------


def add_token(store: RunStore, token_hash: str, run_id: str, rater_id: str, role: str) -> None:
    """Store a new link's hashed secret.

    Args:
        store: The run store.
        token_hash: SHA-256 (hex) of the secret.
        run_id: Full run id.
        rater_id: The rater (or the lead's name).
        role: ``rater`` or ``lead``.
    """
    store.con.execute(
        "INSERT INTO rating_tokens VALUES (?, ?, ?, ?, ?, NULL)",
        [token_hash, run_id, rater_id, role, now()],
    )


def revoke_tokens(store: RunStore, run_id: str, rater_id: str) -> int:
    """End every link of a rater (their sessions end with them); how many were live.

    Args:
        store: The run store.
        run_id: Full run id.
        rater_id: The rater.
    """
    live = store.query(
        "SELECT count(*) AS n FROM rating_tokens WHERE run_id = ? AND rater_id = ? "
        "AND revoked_at IS NULL",
        [run_id, rater_id],
    )[0]["n"]
    store.con.execute(
        "UPDATE rating_tokens SET revoked_at = ? WHERE run_id = ? AND rater_id = ? "
        "AND revoked_at IS NULL",
        [now(), run_id, rater_id],
    )
    return int(live)


def token_holder(store: RunStore, token_hash: str) -> dict[str, Any] | None:
    """The live link with this hashed secret: ``run_id``, ``rater_id``, ``role``; else None.

    Args:
        store: The run store.
        token_hash: SHA-256 (hex) of the secret presented.
    """
    rows = store.query(
        "SELECT run_id, rater_id, role FROM rating_tokens "
        "WHERE token_hash = ? AND revoked_at IS NULL",
        [token_hash],
    )
    return rows[0] if rows else None


def add_session(store: RunStore, session_hash: str, token_hash: str) -> None:
    """Store a browser session (its id hashed) opened with a link.

    Args:
        store: The run store.
        session_hash: SHA-256 (hex) of the session id.
        token_hash: The link's hashed secret.
    """
    store.con.execute(
        "INSERT INTO rating_sessions VALUES (?, ?, ?)", [session_hash, token_hash, now()]
    )


def session_holder(store: RunStore, session_hash: str) -> dict[str, Any] | None:
    """The live link behind a session (``run_id``, ``rater_id``, ``role``), else None: a
    revoked link ends its sessions.

    Args:
        store: The run store.
        session_hash: SHA-256 (hex) of the session id.
    """
    rows = store.query(
        "SELECT t.run_id, t.rater_id, t.role FROM rating_sessions s "
        "JOIN rating_tokens t ON t.token_hash = s.token_hash "
        "WHERE s.session_hash = ? AND t.revoked_at IS NULL",
        [session_hash],
    )
    return rows[0] if rows else None


# -- assignments and saves ----------------------------------------------------------------------


def rater_assignments(store: RunStore, run_id: str, rater_id: str) -> list[dict[str, Any]]:
    """A rater's items in order: ``item_id``, ``done`` (saved at least once).

    Args:
        store: The run store.
        run_id: Full run id.
        rater_id: The rater.
    """
    return store.query(
        """
        SELECT a.item_id, EXISTS (SELECT 1 FROM rating_saves s WHERE s.run_id = a.run_id
            AND s.rater_id = a.rater_id AND s.item_id = a.item_id) AS done
        FROM rating_assignments a WHERE a.run_id = ? AND a.rater_id = ?
        ORDER BY a.position, a.item_id
        """,
        [run_id, rater_id],
    )


def rating_item(store: RunStore, run_id: str, item_id: str) -> dict[str, Any] | None:
    """An item's texts as stored by the run: ``notes`` (list), ``summary``, ``specialty``,
    ``vendor``; None when the run has no such item.

    Args:
        store: The run store.
        run_id: Full run id.
        item_id: The item.
    """
    rows = store.query(
        "SELECT item_id, notes, summary, specialty, vendor FROM items "
        "WHERE run_id = ? AND item_id = ?",
        [run_id, item_id],
    )
    if not rows:
        return None
    row = rows[0]
    notes = row["notes"]
    row["notes"] = json.loads(notes) if isinstance(notes, str) else (notes or [])
    return row


def item_claims(store: RunStore, run_id: str, item_id: str) -> list[str]:
    """The DocLens claims extracted from an item's text (final sample), in order.

    Args:
        store: The run store.
        run_id: Full run id.
        item_id: The item.
    """
    if not store.has_table("claims"):
        return []
    # One sample's claims (every sample extracts its own; the first one stands for them).
    rows = store.query(
        "SELECT text FROM claims WHERE run_id = ? AND item_id = ? AND text IS NOT NULL "
        "AND sample = (SELECT min(sample) FROM claims WHERE run_id = ? AND item_id = ?) "
        "ORDER BY kind DESC, idx, agent",
        [run_id, item_id, run_id, item_id],
    )
    return list(dict.fromkeys(str(r["text"]) for r in rows))


def rater_scores(store: RunStore, rater_id: str, item_id: str) -> dict[str, float | None]:
    """A rater's stored scores of an item (from any source), by attribute.

    Args:
        store: The run store.
        rater_id: The rater.
        item_id: The item.
    """
    rows = store.query(
        "SELECT attribute, score FROM human_ratings WHERE rater_id = ? AND item_id = ?",
        [rater_id, item_id],
    )
    return {r["attribute"]: r["score"] for r in rows}


def last_comment(store: RunStore, run_id: str, rater_id: str, item_id: str) -> str:
    """The comment of a rater's latest save of an item ('' when none).

    Args:
        store: The run store.
        run_id: Full run id.
        rater_id: The rater.
        item_id: The item.
    """
    rows = store.query(
        "SELECT comment FROM rating_saves WHERE run_id = ? AND rater_id = ? AND item_id = ? "
        "ORDER BY saved_at DESC LIMIT 1",
        [run_id, rater_id, item_id],
    )
    return str(rows[0]["comment"] or "") if rows else ""


@dataclass(frozen=True)
class SavedRating:
    """One stored rating of a save.

    Args:
        item_id: The item.
        rater_id: The rater.
        attribute: Rubric key.
        score: The score (None: not applicable).
        saved_at: When it was stored (ISO 8601).
        save_id: The save it came with.
    """

    item_id: str
    rater_id: str
    attribute: str
    score: float | None
    saved_at: str
    save_id: str

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON-ready fields."""
        return dict(self.__dict__)


def _saved_rows(store: RunStore, save_id: str) -> list[SavedRating]:
    rows = store.query(
        "SELECT s.item_id, s.rater_id, h.attribute, h.new_score AS score, s.saved_at, s.save_id "
        "FROM rating_saves s JOIN rating_history h ON h.save_id = s.save_id "
        "WHERE s.save_id = ? ORDER BY h.attribute",
        [save_id],
    )
    return [
        SavedRating(r["item_id"], r["rater_id"], r["attribute"], r["score"],
                    r["saved_at"].isoformat(), r["save_id"])
        for r in rows
    ]  # fmt: skip


def record_save(
    store: RunStore,
    *,
    run_id: str,
    rater_id: str,
    item_id: str,
    scores: Mapping[str, float | None],
    rubric: str,
    save_id: str,
    comment: str = "",
    via: str = "page",
) -> tuple[list[SavedRating], bool]:
    """Store a rater's scores of one item and their history in one transaction.

    Args:
        store: The run store (opened for writing).
        run_id: Full run id.
        rater_id: The rater.
        item_id: The item (already checked to be assigned to the rater).
        scores: Attribute -> score, already checked against the rubric.
        rubric: The rubric's name.
        save_id: The client's id of this save; a repeat changes nothing.
        comment: The rater's comment.
        via: ``page`` or ``api``.

    Returns:
        The stored rows of this save, and whether they were new (False: a repeated save).
    """
    con = store.con
    con.execute("BEGIN TRANSACTION")
    try:
        seen = con.execute(
            "SELECT count(*) FROM rating_saves WHERE save_id = ?", [save_id]
        ).fetchone()
        if seen and seen[0]:
            con.execute("ROLLBACK")
            return _saved_rows(store, save_id), False
        before = {
            a: s
            for a, s in con.execute(
                "SELECT attribute, score FROM human_ratings WHERE item_id = ? AND rater_id = ?",
                [item_id, rater_id],
            ).fetchall()
        }
        stamp = now()
        con.execute(
            "INSERT INTO rating_saves VALUES (?, ?, ?, ?, ?, ?, ?)",
            [save_id, run_id, item_id, rater_id, comment, via, stamp],
        )
        # One statement per table (executemany runs one statement per row: ~5 ms each).
        n = len(scores)
        if n == 0:
            raise StoreError("a save needs at least one score")
        con.execute(
            "INSERT INTO rating_history VALUES " + ", ".join(["(?, ?, ?, ?, ?)"] * n),
            [v for a, s in scores.items() for v in (save_id, a, before.get(a), s, a in before)],
        )
        con.execute(
            "INSERT OR REPLACE INTO human_ratings VALUES "
            + ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * n),
            [v for a, s in scores.items()
             for v in (item_id, rater_id, a, s, rubric, RATE_SOURCE, stamp)],
        )  # fmt: skip
        con.execute("COMMIT")
    except BaseException:
        rollback(con)
        raise
    return _saved_rows(store, save_id), True


def rating_history_rows(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """Every save of a run's ratings, oldest first: who changed which score from what to what,
    when (``item_id``, ``rater_id``, ``attribute``, ``old_score``, ``new_score``,
    ``was_rated``, ``saved_at``, ``save_id``, ``via``).

    Args:
        store: The run store.
        run_id: Full run id.
    """
    if not store.has_table("rating_saves"):
        return []
    return store.query(
        "SELECT s.item_id, s.rater_id, h.attribute, h.old_score, h.new_score, h.was_rated, "
        "s.saved_at, s.save_id, s.via FROM rating_saves s "
        "JOIN rating_history h ON h.save_id = s.save_id WHERE s.run_id = ? "
        "ORDER BY s.saved_at, s.save_id, h.attribute",
        [run_id],
    )


def rating_progress(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """Per rater: items ``assigned`` and ``done``.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    return store.query(
        """
        SELECT a.rater_id, count(*) AS assigned,
               count(*) FILTER (WHERE EXISTS (SELECT 1 FROM rating_saves s
                   WHERE s.run_id = a.run_id AND s.rater_id = a.rater_id
                   AND s.item_id = a.item_id)) AS done
        FROM rating_assignments a WHERE a.run_id = ? GROUP BY a.rater_id ORDER BY a.rater_id
        """,
        [run_id],
    )


def plan_ratings(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """The stored ratings of a plan's assigned (item, rater) pairs: ``item_id``,
    ``rater_id``, ``attribute``, ``score``.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    return store.query(
        "SELECT h.item_id, h.rater_id, h.attribute, h.score FROM human_ratings h "
        "JOIN rating_assignments a ON a.item_id = h.item_id AND a.rater_id = h.rater_id "
        "WHERE a.run_id = ? ORDER BY h.item_id, h.rater_id, h.attribute",
        [run_id],
    )


def all_human_ratings(store: RunStore) -> list[dict[str, Any]]:
    """Every stored physician rating in the import format's columns (``item_id``,
    ``rater_id``, ``attribute``, ``score``), by item, rater and attribute.

    Args:
        store: The run store.
    """
    if not store.has_table("human_ratings"):
        return []
    return store.query(
        "SELECT item_id, rater_id, attribute, score FROM human_ratings "
        "ORDER BY item_id, rater_id, attribute"
    )


def revealed_scores(
    store: RunStore, run_id: str, item_id: str, rater_id: str
) -> tuple[dict[str, float | None], list[dict[str, Any]]]:
    """What ``--reveal-after`` shows once a rater has saved an item: the judge's final score
    per attribute (None where the judgment failed) and the other raters' ratings
    (``rater_id``, ``attribute``, ``score``).

    Args:
        store: The run store.
        run_id: Full run id.
        item_id: The item.
        rater_id: The rater (left out of the others).
    """
    judge = {
        r["attribute"]: r["score"]
        for r in store.query(
            "SELECT attribute, CASE WHEN status = 'ok' THEN value END AS score FROM judgments "
            "WHERE run_id = ? AND item_id = ? AND final",
            [run_id, item_id],
        )
    }
    others = store.query(
        "SELECT rater_id, attribute, score FROM human_ratings WHERE item_id = ? "
        "AND rater_id <> ? ORDER BY rater_id, attribute",
        [item_id, rater_id],
    )
    return judge, others


def run_final_scores(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """The judge's final score of every item and attribute of a run (``item_id``,
    ``attribute``, ``score``; None where the judgment failed or is N/A).

    Args:
        store: The run store.
        run_id: Full run id.
    """
    return store.query(
        "SELECT item_id, attribute, CASE WHEN status = 'ok' THEN value END AS score "
        "FROM judgments WHERE run_id = ? AND final ORDER BY item_id, attribute",
        [run_id],
    )


def planned_item_count(store: RunStore, run_id: str) -> int:
    """How many distinct items a run's rating plan assigns.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        "SELECT count(DISTINCT item_id) AS n FROM rating_assignments WHERE run_id = ?", [run_id]
    )
    return int(rows[0]["n"])
