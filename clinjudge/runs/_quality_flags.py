"""Suspect-judgment flags: evidence, read from the store, that a valid judgment may not be a
trustworthy one (docs/trust.md).

A run's flags are worked out from what it stored, when it finishes (and again on each resume,
so they always describe the whole run): replies that ran into the token cap, reasons that are
filler, copies of the rubric or of other items' reasons, reasons that state a score other than
the one given, and attributes whose final scores do not vary. Flags are evidence, not
filters: a flagged sample still counts unless the run drops suspect samples
(``drop_suspect``). Flags the parser raises while reading a reply (``reply_ambiguous``) are
written with the sample itself and kept.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from clinjudge._util.modes import SIMULATED_NOTICE
from clinjudge.rubrics import Attribute, Rubric, ScaleKind
from clinjudge.runs._store import RunStore, _owner_only_files, rollback
from clinjudge.runs._suspect import (
    degenerate,
    shingles,
    stated_score_conflict,
    stigma_conflict,
    template_echo,
    too_short,
    words,
)

AT_CAP = "at_token_cap"
DEGENERATE = "degenerate_reason"
SHORT = "short_reason"
ECHO = "template_echo"
REPEATED = "repeated_reason"
CONTRADICTION = "score_contradiction"
AMBIGUOUS = "reply_ambiguous"
NO_SPREAD = "no_spread"
UNUSED_SCALE = "unused_scale"

SAMPLE_FLAGS = (AT_CAP, DEGENERATE, SHORT, ECHO, REPEATED, CONTRADICTION, AMBIGUOUS)
"""Flags of one sample (a suspect sample carries at least one)."""
RUN_FLAGS = (NO_SPREAD, UNUSED_SCALE)
"""Flags of a whole run, about one attribute."""
_COMPUTED_SAMPLE_FLAGS = (AT_CAP, DEGENERATE, SHORT, ECHO, REPEATED, CONTRADICTION)

FLAG_MEANINGS = {
    AT_CAP: "reply at the token cap (cut off, or padded to it)",
    DEGENERATE: "reason mostly repeated tokens or one repeated phrase",
    SHORT: "reason too short to say anything",
    ECHO: "reason restates the rubric or the reply format, not the note",
    REPEATED: "same reason word for word on different items",
    CONTRADICTION: "reason contradicts its own score",
    AMBIGUOUS: "reply left the reading to decide (repeats, extra keys, two answers)",
    NO_SPREAD: "an attribute's final score does not vary across items",
    UNUSED_SCALE: "part of an attribute's scale never used",
}
"""What each flag says, in a few words (tables and the viewer)."""

CAP_MARGIN = 2
"""A reply within this many tokens of ``max_tokens`` is at the cap (tokenizers and servers
count the end of a reply a token or two apart)."""

REPEATED_MIN_WORDS = 6
"""The same reason on two items counts only from this many words: a short verdict such as
"No stigmatizing language." is naturally the same on many clean items."""

NO_SPREAD_MIN_ITEMS = 5
NEARLY_ALL_MIN_ITEMS = 10
NEARLY_ALL_SHARE = 0.9
"""One final score on every item of at least 5, or on 90% of at least 10: a set of real notes
rarely shares one quality score that widely, and from 10 items one item off still leaves 90%
(so a single exception cannot hide a judge that answers the same number)."""

UNUSED_SCALE_MIN_ITEMS = 20
"""Unused scale points are reported from this many items: fewer items may honestly never reach
a scale's ends."""

_CHUNK = 5000


def _likert(rubric: Rubric) -> list[Attribute]:
    return [a for a in rubric.attributes if a.scale is ScaleKind.likert]


def _is_stigma(attribute: Attribute) -> bool:
    text = f"{attribute.key} {attribute.name} {attribute.description}".lower()
    return attribute.scale is ScaleKind.binary and "stigma" in text


def _rubric_shingles(rubric: Rubric) -> set[tuple[str, ...]]:
    """Runs of words of the rubric's own text (descriptions, guidance, anchors)."""
    texts = []
    for attribute in rubric.attributes:
        texts += [attribute.description, *attribute.guidance, *attribute.anchors.values()]
    found: set[tuple[str, ...]] = set()
    for text in texts:
        found |= shingles(words(text))
    return found


def _flag(key: tuple[str, int, str], flag: str, attribute: str, detail: str) -> dict[str, Any]:
    item_id, sample, agent = key
    return {
        "item_id": item_id,
        "sample": sample,
        "agent": agent,
        "flag": flag,
        "attribute": attribute,
        "detail": detail[:300],
    }


def _rows(
    store: RunStore, sql: str, params: list[Any] | dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """Rows of a query a chunk at a time (a run's reasons need not fit in memory at once)."""
    cursor = store.con.execute(sql, params)
    names = [d[0] for d in cursor.description]
    while chunk := cursor.fetchmany(_CHUNK):
        for row in chunk:
            yield dict(zip(names, row, strict=True))


def _cap_flags(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    found = store.query(
        """
        SELECT item_id, sample, agent, max(completion_tokens) AS used, max(max_tokens) AS cap
        FROM calls c
        WHERE run_id = ? AND status = 'ok' AND max_tokens IS NOT NULL AND max_tokens > 0
          AND completion_tokens >= max_tokens - ?
          -- a sample that failed is a failure already, with its own reason
          AND NOT EXISTS (
              SELECT 1 FROM samples s WHERE s.run_id = c.run_id AND s.item_id = c.item_id
                 AND s.sample = c.sample AND s.agent = c.agent AND s.status <> 'ok')
        GROUP BY item_id, sample, agent""",
        [run_id, CAP_MARGIN],
    )
    return [
        _flag(
            (r["item_id"], r["sample"], r["agent"]),
            AT_CAP,
            "",
            f"{r['used']} completion tokens of max_tokens {r['cap']}",
        )
        for r in found
    ]


def _text_flags(reason: str, echo: set[tuple[str, ...]]) -> list[tuple[str, str]]:
    """(flag, detail) of one reason's own text."""
    found = []
    for flag, detail in (
        (DEGENERATE, degenerate(reason)),
        (SHORT, too_short(reason)),
        (ECHO, template_echo(reason, echo)),
    ):
        if detail is not None:
            found.append((flag, detail))
    return found


_MODEL_WROTE = """
          AND NOT starts_with({alias}.rationale, $notice) AND EXISTS (
              SELECT 1 FROM calls c WHERE c.run_id = {alias}.run_id
                 AND c.item_id = {alias}.item_id AND c.sample = {alias}.sample
                 AND c.agent = {alias}.agent)"""


def _reasons(store: RunStore, run_id: str) -> Iterator[tuple[tuple[str, int, str], str, Any, str]]:
    """Every reason a model wrote in a run: ((item, sample, agent), attribute, score, text),
    the attribute ``''`` (and no score) for a sample's overall rationale.

    Our own aggregation's texts (a panel's "median of 3 members", written for an agent that
    made no call) and the simulated provider's disclaimer are no reasons and are left out.
    """
    params = {"run": run_id, "notice": SIMULATED_NOTICE}
    overall = f"""
        SELECT s.item_id, s.sample, s.agent, '' AS attribute, NULL AS value, s.rationale
        FROM samples s
        WHERE s.run_id = $run AND s.status = 'ok' AND s.rationale IS NOT NULL
        {_MODEL_WROTE.format(alias="s")}"""
    # An attribute's row holds the overall rationale where it has none of its own.
    own = f"""
        SELECT j.item_id, j.sample, j.agent, j.attribute, j.value, j.rationale
        FROM judgments j LEFT JOIN samples s
          ON s.run_id = j.run_id AND s.item_id = j.item_id AND s.sample = j.sample
         AND s.agent = j.agent
        WHERE j.run_id = $run AND NOT j.final AND j.status = 'ok' AND j.rationale IS NOT NULL
          AND j.rationale IS DISTINCT FROM s.rationale
        {_MODEL_WROTE.format(alias="j")}"""
    for sql in (overall, own):
        for row in _rows(store, sql, params):
            key = (row["item_id"], row["sample"], row["agent"])
            yield key, row["attribute"], row["value"], row["rationale"]


def _reason_flags(store: RunStore, run_id: str, rubric: Rubric) -> list[dict[str, Any]]:
    """Flags of each reason's own text, and of an attribute's reason against its score."""
    echo = _rubric_shingles(rubric)
    attributes = {a.key: a for a in rubric.attributes}
    out: list[dict[str, Any]] = []
    for key, attribute, value, text in _reasons(store, run_id):
        for flag, detail in _text_flags(text, echo):
            out.append(_flag(key, flag, attribute, detail))
        spec = attributes.get(attribute)
        if spec is None:
            continue
        conflict = (
            stigma_conflict(text, value)
            if _is_stigma(spec)
            else stated_score_conflict(text, value, spec.min, spec.max)
        )
        if conflict is not None:
            out.append(_flag(key, CONTRADICTION, spec.key, conflict))
    return out


def _repeated_flags(store: RunStore, run_id: str, rubric: Rubric) -> list[dict[str, Any]]:
    """The same reason (folded) on two or more items, per agent and attribute."""
    exempt = {a.key for a in rubric.attributes if a.scale is not ScaleKind.likert}
    holders: dict[tuple[str, str, bytes], list[tuple[str, int]]] = defaultdict(list)
    for (item_id, sample, agent), attribute, _, text in _reasons(store, run_id):
        said = words(text)
        if attribute in exempt or len(said) < REPEATED_MIN_WORDS:
            continue
        digest = hashlib.blake2b(" ".join(said).encode(), digest_size=16).digest()
        places = holders[(agent, attribute, digest)]
        if (item_id, sample) not in places:
            places.append((item_id, sample))
    out = []
    for (agent, attribute, _), places in holders.items():
        items = {item for item, _ in places}
        if len(items) < 2:
            continue
        for item_id, sample in places:
            detail = f"the same reason on {len(items)} items"
            out.append(_flag((item_id, sample, agent), REPEATED, attribute, detail))
    return out


def _write(store: RunStore, run_id: str, flags: tuple[str, ...], rows: list[dict]) -> None:
    """Replace a run's flags of these kinds with ``rows``, in one transaction."""
    unique = {(r["item_id"], r["sample"], r["agent"], r["flag"], r["attribute"]): r for r in rows}
    with _owner_only_files():
        store.con.execute("BEGIN TRANSACTION")
        try:
            store.con.execute(
                "DELETE FROM quality_flags WHERE run_id = ? AND flag IN "
                f"({', '.join('?' for _ in flags)})",
                [run_id, *flags],
            )
            store.insert_rows("quality_flags", [{"run_id": run_id, **r} for r in unique.values()])
            store.con.execute("COMMIT")
        except BaseException:
            rollback(store.con)
            raise


def flag_samples(store: RunStore, run_id: str, rubric: Rubric) -> int:
    """Work out the sample flags of a run from what it stored, replacing earlier ones (the
    parser's ``reply_ambiguous`` flags, stored with their samples, stay); returns how many.

    Args:
        store: The run store (open for writing).
        run_id: The run.
        rubric: The run's rubric.
    """
    with store.bounded_cache():
        rows = _cap_flags(store, run_id)
        rows += _reason_flags(store, run_id, rubric)
        rows += _repeated_flags(store, run_id, rubric)
        _write(store, run_id, _COMPUTED_SAMPLE_FLAGS, rows)
    return len(rows)


def _spread_flags(store: RunStore, run_id: str, rubric: Rubric) -> list[dict[str, Any]]:
    likert = [a.key for a in _likert(rubric)]
    if not likert:
        return []
    counts = store.query(
        "SELECT attribute, value, count(*) AS n FROM judgments WHERE run_id = ? AND final "
        "AND value IS NOT NULL AND attribute = ANY(?::VARCHAR[]) GROUP BY ALL",
        [run_id, likert],
    )
    by_attribute: dict[str, Counter[float]] = defaultdict(Counter)
    for row in counts:
        by_attribute[row["attribute"]][row["value"]] += row["n"]
    out = []
    for attribute, values in by_attribute.items():
        total = sum(values.values())
        value, top = values.most_common(1)[0]
        shown = f"{value:g}"
        if total >= NO_SPREAD_MIN_ITEMS and top == total:
            detail = f"final score {shown} on all {total} items"
        elif total >= NEARLY_ALL_MIN_ITEMS and top / total >= NEARLY_ALL_SHARE:
            detail = f"final score {shown} on {top} of {total} items"
        else:
            continue
        out.append(_flag(("", 0, ""), NO_SPREAD, attribute, detail))
    return out


def _unused_scale_flags(store: RunStore, run_id: str, rubric: Rubric) -> list[dict[str, Any]]:
    likert = {a.key: a for a in _likert(rubric)}
    if not likert:
        return []
    used = store.query(
        "SELECT attribute, list(DISTINCT CAST(value AS INTEGER)) AS used, "
        "count(DISTINCT item_id) AS items FROM judgments WHERE run_id = ? AND NOT final "
        "AND status = 'ok' AND value IS NOT NULL AND attribute = ANY(?::VARCHAR[]) GROUP BY ALL",
        [run_id, list(likert)],
    )
    out = []
    for row in used:
        spec = likert[row["attribute"]]
        missing = sorted(set(range(spec.min, spec.max + 1)) - set(row["used"]))
        if row["items"] >= UNUSED_SCALE_MIN_ITEMS and missing:
            detail = (
                f"never scored {', '.join(map(str, missing))} of {spec.min}-{spec.max} "
                f"across {row['items']} items"
            )
            out.append(_flag(("", 0, ""), UNUSED_SCALE, spec.key, detail))
    return out


def flag_run_scores(store: RunStore, run_id: str, rubric: Rubric) -> int:
    """Work out a run's own flags from its scores (after its final scores are written),
    replacing earlier ones; returns how many.

    Args:
        store: The run store (open for writing).
        run_id: The run.
        rubric: The run's rubric.
    """
    rows = _spread_flags(store, run_id, rubric) + _unused_scale_flags(store, run_id, rubric)
    _write(store, run_id, RUN_FLAGS, rows)
    return len(rows)


def quality_flag_rows(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """A run's flags, run flags first, then by item, sample, agent and flag.

    Args:
        store: The run store.
        run_id: The run.
    """
    if not store.has_table("quality_flags"):
        return []
    return store.query(
        "SELECT item_id, sample, agent, flag, attribute, detail FROM quality_flags "
        "WHERE run_id = ? ORDER BY item_id <> '', item_id, sample, agent, flag, attribute",
        [run_id],
    )


def quality_summary(store: RunStore, run_id: str) -> dict[str, Any]:
    """How many samples are suspect and why, and the run's own flags.

    Args:
        store: The run store.
        run_id: The run.

    Returns:
        ``suspect_samples`` (samples with at least one flag), ``by_flag`` (samples per sample
        flag) and ``run_flags`` (each with ``flag``, ``attribute``, ``detail``).
    """
    if not store.has_table("quality_flags"):
        return {"suspect_samples": 0, "by_flag": {}, "run_flags": []}
    counts = store.query(
        "SELECT flag, count(DISTINCT (item_id, sample, agent)) AS n FROM quality_flags "
        "WHERE run_id = ? AND item_id <> '' GROUP BY flag ORDER BY n DESC, flag",
        [run_id],
    )
    suspect = store.query(
        "SELECT count(DISTINCT (item_id, sample, agent)) AS n FROM quality_flags "
        "WHERE run_id = ? AND item_id <> ''",
        [run_id],
    )[0]["n"]
    run_flags = store.query(
        "SELECT flag, attribute, detail FROM quality_flags WHERE run_id = ? AND item_id = '' "
        "ORDER BY flag, attribute",
        [run_id],
    )
    return {
        "suspect_samples": int(suspect),
        "by_flag": {r["flag"]: int(r["n"]) for r in counts},
        "run_flags": run_flags,
    }


def noted_flag_rows(
    run_id: str, item_id: str, sample: int, agent: str, notes: list[str]
) -> list[dict[str, Any]]:
    """The ``quality_flags`` row of what the parser noted reading one sample's reply (none
    without notes), written with the sample.

    Args:
        run_id: The run.
        item_id: The item.
        sample: The sample.
        agent: The agent whose reply it was.
        notes: The parser's notes.
    """
    if not notes:
        return []
    row = _flag((item_id, sample, agent), AMBIGUOUS, "", "; ".join(notes))
    return [{"run_id": run_id, **row}]


def item_suspect_flags(store: RunStore, run_id: str, item_ids: list[str]) -> dict[str, list[str]]:
    """The distinct sample flags of each of these items (items without flags left out).

    Args:
        store: The run store.
        run_id: The run.
        item_ids: The items.
    """
    if not item_ids or not store.has_table("quality_flags"):
        return {}
    rows = store.query(
        "SELECT item_id, list(DISTINCT flag ORDER BY flag) AS flags FROM quality_flags "
        "WHERE run_id = ? AND item_id = ANY(?::VARCHAR[]) GROUP BY item_id",
        [run_id, item_ids],
    )
    return {r["item_id"]: r["flags"] for r in rows}


def item_flag_rows(store: RunStore, run_id: str, item_id: str) -> list[dict[str, Any]]:
    """Every sample flag of one item, by sample, agent and flag.

    Args:
        store: The run store.
        run_id: The run.
        item_id: The item.
    """
    if not store.has_table("quality_flags"):
        return []
    return store.query(
        "SELECT sample, agent, flag, attribute, detail FROM quality_flags "
        "WHERE run_id = ? AND item_id = ? ORDER BY sample, agent, flag, attribute",
        [run_id, item_id],
    )


def item_flag_rows_by_item(
    store: RunStore, run_id: str, item_ids: Sequence[str]
) -> dict[str, list[dict[str, Any]]]:
    """:func:`item_flag_rows` of many items of a run in one query (the static export).

    Args:
        store: The run store.
        run_id: The run.
        item_ids: The items.
    """
    out: dict[str, list[dict[str, Any]]] = {i: [] for i in item_ids}
    if not item_ids or not store.has_table("quality_flags"):
        return out
    for row in store.query(
        "SELECT item_id, sample, agent, flag, attribute, detail FROM quality_flags "
        "WHERE run_id = ? AND item_id IN (SELECT unnest(?)) "
        "ORDER BY item_id, sample, agent, flag, attribute",
        [run_id, list(item_ids)],
    ):
        out[row.pop("item_id")].append(row)
    return out
