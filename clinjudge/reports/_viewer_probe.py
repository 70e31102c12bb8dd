"""Probe runs in the viewer: an original and its variant side by side with the edit marked,
links between an original and its variants, and the variants' probe in a run's item list.

The marks come from a word-level diff of the two stored summaries (what the judge read), so
they show every change, the probe's description and its ``removed``/``added`` lists beside
them; the page escapes all of it (Jinja autoescape) and needs no script.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clinjudge.runs import RunStore
from clinjudge.runs.report_reads import final_scores, probe_links, stored_items_by_id

_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


@dataclass
class Piece:
    """A run of text, marked ``del`` (only in the original), ``ins`` (only in the variant) or
    not marked (in both)."""

    text: str
    mark: str | None = None


def _add(pieces: list[Piece], text: str, mark: str | None) -> None:
    if not text:
        return
    if pieces and pieces[-1].mark == mark:
        pieces[-1].text += text
    else:
        pieces.append(Piece(text, mark))


def diff_pieces(original: str, variant: str) -> tuple[list[Piece], list[Piece]]:
    """The two texts cut into pieces, the words that differ marked (word-level diff).

    Args:
        original: The original's summary.
        variant: The variant's summary.

    Returns:
        The original's pieces (``del`` marks what the edit removed or replaced) and the
        variant's (``ins`` marks what it added).
    """
    a, b = _TOKEN.findall(original), _TOKEN.findall(variant)
    left: list[Piece] = []
    right: list[Piece] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            _add(left, "".join(a[i1:i2]), None)
            _add(right, "".join(b[j1:j2]), None)
            continue
        removed, added = "".join(a[i1:i2]), "".join(b[j1:j2])
        # Whitespace-only changes (the neutral probe's double spaces) are marked too, but a
        # change that is only spaces would be invisible: show it as a visible dot.
        _add(left, removed, "del")
        _add(right, added if added.strip() or not added else added.replace(" ", "·"), "ins")
    return left, right


def probe_views(
    store: RunStore, run: dict[str, Any], item_ids: Sequence[str], keys: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """What the item pages of some items of a probe run show about probes (items of other
    runs get nothing).

    Args:
        store: The run store.
        run: The run's row.
        item_ids: The items (one page's, or a chunk of the static export's).
        keys: The rubric's attribute keys, in order.

    Returns:
        Item id to ``{"variants": [...]}`` for an original (its variants' ids and probes), or,
        for a variant, ``probe``, ``original_id``, ``seed``, ``edit`` (as stored),
        ``original``/``variant`` (:class:`Piece` lists), ``siblings`` (the original's other
        variants) and ``scores`` (attribute, original's and variant's final score, change).
    """
    rid = run["run_id"]
    rows = probe_links(store, rid, item_ids)
    if not rows:
        return {}
    wanted = set(item_ids)
    of_original: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        of_original.setdefault(row["original_id"], []).append(
            {"item_id": row["item_id"], "probe": row["probe"]}
        )
    mine = {r["item_id"]: r for r in rows if r["item_id"] in wanted}
    pairs = [*mine, *(r["original_id"] for r in mine.values())]
    texts = stored_items_by_id(store, rid, pairs) if pairs else {}
    finals: dict[str, dict[str, float | None]] = {}
    for score in final_scores(store, rid, pairs):
        if score["status"] == "ok":
            finals.setdefault(score["item_id"], {})[score["attribute"]] = score["value"]
    out: dict[str, dict[str, Any]] = {}
    for item_id in item_ids:
        if item_id in of_original:
            out[item_id] = {"variants": of_original[item_id]}
        variant = mine.get(item_id)
        if variant is None:
            continue
        original = variant["original_id"]
        before = (texts.get(original) or {}).get("summary") or ""
        after = (texts.get(item_id) or {}).get("summary") or ""
        left, right = diff_pieces(before, after)
        was, now = finals.get(original, {}), finals.get(item_id, {})
        scores = []
        for key in keys:
            before_value, after_value = was.get(key), now.get(key)
            change = (
                None
                if before_value is None or after_value is None
                else float(after_value) - float(before_value)
            )
            scores.append(
                {"key": key, "original": before_value, "variant": after_value, "change": change}
            )
        out[item_id] = {
            "probe": variant["probe"],
            "original_id": original,
            "original_missing": original not in texts,
            "seed": variant["seed"],
            "edit": variant["edit"],
            "original": left,
            "variant": right,
            "siblings": [v for v in of_original.get(original, []) if v["item_id"] != item_id],
            "scores": scores,
        }
    return out
