"""Data of an item's page: inputs, every sample's scores, discussion, claims, PRM steps, calls.

Every read selects one item of one run, so the page costs the same in a run of ten items or
of a hundred thousand. Each read's rows are turned into the page's data by a function of the
rows alone (``*_from_rows``), so the static export can read the same rows for many items at
once (:func:`clinjudge.runs.report_reads.item_table_rows_by_item`) and build identical pages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clinjudge._util.modes import deciding_agent
from clinjudge.prm_bridge import aggregate
from clinjudge.rubrics import Rubric, SourceNote
from clinjudge.runs import FINAL_AGENT, RunStore
from clinjudge.runs.report_reads import (
    item_neighbours,
    item_ratings,
    item_table_rows,
    scored_item_neighbours,
    stored_item,
)

_NOTE_CITATION = re.compile(r"\[Note\s+([A-Za-z0-9_.-]+)\]")
_DOCLENS_CITATION = re.compile(r"\[(\d+)\]")
_LABEL = re.compile(r"^\[(?:attempt (\d+), )?([a-z]+(?: \d+)?)\]\s?")
PRM_AGGREGATES = ("min", "mean", "geomean", "last")


@dataclass
class Segment:
    """A piece of text, linked to an anchor on the page when it is a citation."""

    text: str
    anchor: str | None = None


@dataclass
class Turn:
    """One message of a transcript, with the round label the workflow gave it."""

    agent: str
    role: str
    content: str
    label: str = ""
    attempt: int = 1
    kind: str = "message"  # message, prompt, decision, blind, evidence, briefing
    number: int = 0
    """Place on the item page, from 1 (set by the page, for references between turns)."""
    same_as: Turn | None = None
    """An earlier turn on the page with the same prompt (shown there, referenced here)."""


@dataclass
class SampleView:
    """One sample: each agent's verdict and values, and its transcript."""

    sample: int
    agents: list[dict[str, Any]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)


def _loads(value: Any, default: Any) -> Any:
    if value is None:
        return default
    try:
        return json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return default


def cited_segments(text: str | None, anchors: dict[str, str], pattern: re.Pattern[str]) -> list:
    """Split text at citations; a citation of a known source gets that source's anchor."""
    if not text:
        return []
    segments: list[Segment] = []
    last = 0
    for match in pattern.finditer(text):
        if match.start() > last:
            segments.append(Segment(text[last : match.start()]))
        segments.append(Segment(match.group(0), anchors.get(match.group(1))))
        last = match.end()
    if last < len(text):
        segments.append(Segment(text[last:]))
    return segments


def parse_turn(agent: str, role: str, content: str, single: bool) -> Turn:
    """A stored message as a chat turn: its ``[round 2]``-style label read off the front."""
    if role in ("system", "user") and single:
        return Turn(agent, role, content, label=role, kind="prompt")
    match = _LABEL.match(content or "")
    label, attempt = "", 1
    if match:
        attempt = int(match.group(1) or 1)
        label = match.group(2)
        content = content[match.end() :]
    if role == "user":
        kind = "prompt"
    elif label in ("final",):
        kind = "decision"
    elif label in ("blind", "evidence", "briefing", "task"):
        kind = label
    else:
        kind = "message"
    return Turn(agent, role, content or "", label=label, attempt=attempt, kind=kind)


def _notes(row: dict[str, Any]) -> list[dict[str, str]]:
    notes = _loads(row.get("notes"), [])
    out = []
    for index, note in enumerate(notes, start=1):
        if isinstance(note, dict):
            out.append({"id": str(note.get("id") or index), "text": str(note.get("text") or "")})
        else:
            out.append({"id": str(index), "text": str(note)})
    return out


def _doclens_units(run: dict[str, Any], notes: list[dict[str, str]]) -> dict[int, str]:
    # Imported on use: clinjudge.judges loads the workflows and the model clients (about 1 s),
    # which every command importing the reports (`judge agree`, `compare`, `report`) paid (#39).
    from clinjudge.judges import DocLensSettings, source_units

    config = (run.get("config") or {}).get("doclens") or {}
    try:
        settings = DocLensSettings.model_validate(config)
    except ValueError:
        settings = DocLensSettings()
    parsed = [SourceNote(id=n["id"], text=n["text"]) for n in notes if n["text"].strip()]
    return dict(source_units(parsed, settings).units)


def item_inputs(store: RunStore, run: dict[str, Any], item_id: str, claims_run: bool) -> dict:
    """The item's notes, summary (with linked citations), reference, flags and neighbours."""
    row = stored_item(store, run["run_id"], item_id)
    if row is None:
        return _scored_only(store, run["run_id"], item_id) if store.has_table("prm_steps") else {}
    previous, next_ = item_neighbours(store, run["run_id"], row["position"])
    return inputs_from_row(run, row, previous, next_, claims_run)


def inputs_from_row(
    run: dict[str, Any], row: dict[str, Any], previous: str | None, next_: str | None,
    claims_run: bool,
) -> dict[str, Any]:  # fmt: skip
    """The item page's inputs from its ``items`` row and the ids of its neighbours."""
    notes = _notes(row)
    anchors = {n["id"]: f"note-{n['id']}" for n in notes}
    units = _doclens_units(run, notes) if claims_run else {}
    unit_anchors = {str(k): f"unit-{k}" for k in units}
    pattern, known = (_DOCLENS_CITATION, unit_anchors) if claims_run else (_NOTE_CITATION, anchors)
    return {
        "item_id": row["item_id"],
        "position": row["position"],
        "vendor": row.get("vendor"),
        "specialty": row.get("specialty"),
        "meta": _loads(row.get("meta"), {}),
        "flags": _loads(row.get("flags"), []),
        "notes": notes,
        "units": sorted(units.items()),
        "summary": cited_segments(row.get("summary"), known, pattern),
        "reference": cited_segments(row.get("reference"), known, pattern),
        "previous": previous,
        "next": next_,
    }


def _scored_only(store: RunStore, run_id: str, item_id: str) -> dict:
    """Inputs of an item that only has PRM step scores (a `judge prm score` run stores no items)."""
    found = scored_item_neighbours(store, run_id, item_id)
    if found is None:
        return {}
    return {
        "item_id": item_id, "position": None, "vendor": None, "specialty": None, "meta": {},
        "flags": [], "notes": [], "units": [], "summary": [], "reference": [],
        "previous": found[0], "next": found[1],
    }  # fmt: skip


def sample_views(store: RunStore, run: dict[str, Any], item_id: str) -> dict[str, Any]:
    """Final scores and every sample of every agent, with transcripts."""
    rid = run["run_id"]
    return views_from_rows(
        run,
        item_table_rows(store, "judgments", rid, item_id),
        item_table_rows(store, "samples", rid, item_id),
        item_table_rows(store, "messages", rid, item_id),
    )


def views_from_rows(
    run: dict[str, Any],
    judgments: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    messages: list[dict[str, Any]],
) -> dict[str, Any]:
    """:func:`sample_views` from the item's rows of judgments, samples and messages."""
    final: dict[str, dict[str, Any]] = {}
    values: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
    for row in judgments:
        if row["agent"] == FINAL_AGENT:
            final[row["attribute"]] = row
        else:
            values.setdefault((row["sample"], row["agent"]), {})[row["attribute"]] = row
    views: dict[int, SampleView] = {}
    deciding = deciding_agent(run.get("mode"))  # None for a run without judge samples (PRM)
    for row in samples:
        if row["sample"] <= 0:
            continue
        view = views.setdefault(row["sample"], SampleView(row["sample"]))
        view.agents.append({**row, "values": values.get((row["sample"], row["agent"]), {})})
    single = run.get("mode") in ("single", "panel")
    for row in messages:
        view = views.setdefault(row["sample"], SampleView(row["sample"]))
        view.turns.append(parse_turn(row["agent"], row["role"], row["content"], single))
    for view in views.values():
        view.agents.sort(key=lambda a: (a["agent"] != deciding, a["agent"]))
    return {"final": final, "samples": [views[k] for k in sorted(views)], "deciding": deciding}


def human_ratings(store: RunStore, item_id: str) -> dict[str, dict[str, float | None]]:
    """Physicians' ratings of the item: rater to attribute to score."""
    return ratings_from_rows(item_ratings(store, item_id))


def ratings_from_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """:func:`human_ratings` from the item's ``human_ratings`` rows, ordered by rater."""
    out: dict[str, dict[str, float | None]] = {}
    for row in rows:
        out.setdefault(row["rater_id"], {})[row["attribute"]] = row["score"]
    return out


def item_calls(store: RunStore, run_id: str, item_id: str) -> list[dict[str, Any]]:
    """Every model (and PRM/NLI) call of the item, each with its attempt number.

    The store has one row per attempt; a call that follows a failed call of the same agent and
    role is a retry of it, so ``attempt`` is one more than the failures just before it.
    """
    return calls_from_rows(item_table_rows(store, "calls", run_id, item_id))


def calls_from_rows(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`item_calls` from the item's ``calls`` rows (changed in place and returned)."""
    failures_before: dict[tuple[int, str, str], int] = {}
    for call in calls:
        key = (call["sample"], call["agent"], call["role"])
        call["attempt"] = failures_before.get(key, 0) + 1
        failures_before[key] = failures_before.get(key, 0) + 1 if call["status"] != "ok" else 0
    calls.sort(key=lambda c: (c["sample"], str(c["started_at"]), c["seq"]))
    return calls


def attach_replies(calls: list[dict[str, Any]], samples: list[SampleView]) -> None:
    """Give each successful call the reply it produced, where that is unambiguous.

    The store keeps replies in the transcript, not in ``calls``. When an agent's successful
    calls in a sample are exactly as many as its assistant messages, they pair up in order;
    otherwise (a chair's ledger calls, whose replies are not transcript messages) the call
    keeps no reply and the transcript stays the place to read.
    """
    replies: dict[tuple[int, str], list[str]] = {}
    for view in samples:
        for turn in view.turns:
            if turn.role == "assistant":
                replies.setdefault((view.sample, turn.agent), []).append(turn.content)
    by_agent: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for call in calls:
        if call["status"] == "ok":
            by_agent.setdefault((call["sample"], call["agent"]), []).append(call)
    for key, ok_calls in by_agent.items():
        texts = replies.get(key, [])
        if len(texts) == len(ok_calls):
            for call, text in zip(sorted(ok_calls, key=lambda c: c["seq"]), texts, strict=True):
                call["reply"] = text


def item_claims(store: RunStore, run_id: str, item_id: str) -> list[dict[str, Any]]:
    """DocLens claims and cited sentences by sample and agent, each kind in its own list."""
    return claims_from_rows(item_table_rows(store, "claims", run_id, item_id))


def claims_from_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`item_claims` from the item's ``claims`` rows."""
    groups: dict[tuple[int, str], dict[str, Any]] = {}
    for row in rows:
        group = groups.setdefault(
            (row["sample"], row["agent"]),
            {"sample": row["sample"], "agent": row["agent"], "kinds": {}},
        )
        row["citations"] = _loads(row["citations"], []) or []
        row["supporting"] = _loads(row["supporting"], []) or []
        group["kinds"].setdefault(row["kind"], []).append(row)
    return list(groups.values())


def item_prm_steps(store: RunStore, run: dict[str, Any], item_id: str) -> list[dict[str, Any]]:
    """PRM steps per candidate with their scores and aggregates."""
    return prm_from_rows(item_table_rows(store, "prm_steps", run["run_id"], item_id))


def prm_from_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`item_prm_steps` from the item's ``prm_steps`` rows."""
    candidates: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        candidates.setdefault(row["candidate"], []).append(row)
    out = []
    for name, steps in candidates.items():
        scores = [s["score"] for s in steps]
        out.append(
            {
                "candidate": name,
                "steps": steps,
                "model": steps[0]["model"],
                "aggregates": {how: aggregate(scores, how) for how in PRM_AGGREGATES},
            }
        )
    return out


def item_page(store: RunStore, run: dict[str, Any], rubric: Rubric | None, item_id: str) -> dict:
    """Everything the item page shows.

    Args:
        store: The run store.
        run: The run's row (``RunStore.get_run``).
        rubric: The run's rubric (None for a PRM scoring run).
        item_id: The item.
    """
    claims_run = bool(rubric is not None and getattr(rubric, "method", "scores") == "claims")
    inputs = item_inputs(store, run, item_id, claims_run)
    if not inputs:
        return {}
    # Databases from older versions may lack the newer tables.
    return assemble_item_page(
        inputs,
        sample_views(store, run, item_id),
        item_calls(store, run["run_id"], item_id),
        human_ratings(store, item_id),
        item_claims(store, run["run_id"], item_id) if store.has_table("claims") else [],
        item_prm_steps(store, run, item_id) if store.has_table("prm_steps") else [],
        claims_run,
    )


def assemble_item_page(
    inputs: dict[str, Any],
    scores: dict[str, Any],
    calls: list[dict[str, Any]],
    humans: dict[str, dict[str, float | None]],
    claims: list[dict[str, Any]],
    prm: list[dict[str, Any]],
    claims_run: bool,
) -> dict[str, Any]:
    """:func:`item_page`'s result from the parts the ``*_from_rows`` functions build."""
    attach_replies(calls, scores["samples"])
    return {
        "inputs": inputs,
        "scores": scores,
        "humans": humans,
        "calls": calls,
        "claims": claims,
        "prm": prm,
        "claims_run": claims_run,
    }
