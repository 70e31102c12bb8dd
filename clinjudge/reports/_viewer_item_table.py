"""The item page's tables: final, per-sample and physicians' scores side by side; call totals."""

from __future__ import annotations

import re
from typing import Any

from clinjudge.reports._viewer_item import SampleView, Turn
from clinjudge.rubrics import DEFAULT_REDUCER, Rubric, get_reducer

PRM_STEP_LABELS = {
    "problem_completeness": "problem completeness: is the problem above complete?",
    "note_completeness": "note completeness: does the note leave out a problem?",
    "end_of_note": "end of note",
}
"""Words for PRM steps that score the note's structure and carry no text of their own."""

_TAG_LINE = re.compile(r"^</?[A-Z_ ]+>$")


def score_rows(data: dict[str, Any], rubric: Rubric | None) -> list[dict[str, Any]]:
    """One row per attribute: final, each sample's deciding agent, each physician, their median.

    Args:
        data: From :func:`clinjudge.reports._viewer_item.item_page`.
        rubric: The run's rubric (None for a PRM scoring run: no rows).
    """
    if rubric is None:
        return []
    scores, humans = data["scores"], data["humans"]
    raters = sorted(humans)
    rows = []
    for attribute in rubric.attributes:
        key = attribute.key
        final = scores["final"].get(key) or {}
        per_sample = []
        for view in scores["samples"]:
            deciding = next(
                (a for a in view.agents if a["agent"] == scores["deciding"]),
                view.agents[0] if view.agents else None,
            )
            value = deciding["values"].get(key) if deciding else None
            per_sample.append(value["value"] if value else None)
        ratings = [humans[r].get(key) for r in raters]
        present = [h for h in ratings if h is not None]
        rows.append(
            {
                "key": key,
                "name": attribute.name,
                "final": final.get("value"),
                "final_status": final.get("status"),
                "samples": per_sample,
                "humans": ratings,
                # The registry's median, as agreement takes the physicians' (rubrics reducers)
                "human_median": get_reducer(DEFAULT_REDUCER)(present) if present else None,
            }
        )
    return rows


def call_totals(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Calls, tokens, cost and summed latency of the item."""
    return {
        "calls": len(calls),
        "tokens_in": sum(c["prompt_tokens"] or 0 for c in calls),
        "tokens_out": sum(c["completion_tokens"] or 0 for c in calls),
        "cost": sum(c["cost_usd"] or 0 for c in calls),
        "latency": sum(c["latency_s"] or 0 for c in calls),
    }


def number_turns(samples: list[SampleView]) -> None:
    """Number every turn of the page and point each prompt (system or user message) that an
    earlier turn already showed word for word at that turn, so that it is shown once.

    Args:
        samples: The item's samples (their turns are changed in place).
    """
    seen: dict[tuple[str, str], Turn] = {}
    number = 0
    for view in samples:
        for turn in view.turns:
            number += 1
            turn.number = number
            turn.same_as = None
            if turn.role not in ("system", "user") or len(turn.content) < 40:
                continue
            first = seen.setdefault((turn.role, turn.content), turn)
            if first is not turn:
                turn.same_as = first


def _gist(text: str, limit: int = 90) -> str:
    """A prompt's heading and first line of content (``STATEMENT · She quit smoking ...``)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    heading = lines[0] if lines and lines[0].upper() == lines[0] else ""
    body = next((x for x in lines if x != heading and not _TAG_LINE.match(x)), "")
    gist = f"{heading} · {body}" if heading and body else heading or body
    return gist if len(gist) <= limit else gist[: limit - 1] + "…"


def exchanges(view: SampleView) -> list[dict[str, Any]]:
    """A sample's transcript as its exchanges: each system prompt, with the messages after it
    (one claim, statement or decision judged by one agent), to be folded one by one.

    Args:
        view: One sample.

    Returns:
        ``agent``, ``gist`` (the prompt's heading and first line) and ``turns`` of each.
    """
    out: list[dict[str, Any]] = []
    for turn in view.turns:
        if not out or turn.role == "system" or turn.agent != out[-1]["agent"]:
            out.append({"agent": turn.agent, "gist": "", "turns": []})
        out[-1]["turns"].append(turn)
        if turn.role == "user" and not out[-1]["gist"]:
            out[-1]["gist"] = _gist(turn.content)
    return out


def item_context(data: dict[str, Any], rubric: Rubric | None) -> dict[str, Any]:
    """Template variables of the item page built from :func:`item_page`'s data."""
    scores = data["scores"]
    chair_calls: dict[int, list[dict[str, Any]]] = {}
    for call in data["calls"]:
        if call["role"] == "orchestrator":  # the chair's ledger and planning calls
            chair_calls.setdefault(call["sample"], []).append(call)
    any_final = next(iter(scores["final"].values()), None) or {}
    number_turns(scores["samples"])
    claims_run = bool(data.get("claims_run"))
    return {
        # A DocLens run's transcript is one exchange per claim and agent (hundreds of
        # messages): folded one by one, so the page opens short.
        "exchanges": {s.sample: exchanges(s) for s in scores["samples"]} if claims_run else {},
        "prm_step_labels": PRM_STEP_LABELS,
        "keys": [a.key for a in rubric.attributes] if rubric else [],
        "inputs": data["inputs"],
        "scores": scores,
        "score_rows": score_rows(data, rubric),
        "sample_columns": [s.sample for s in scores["samples"]],
        "raters": sorted(data["humans"]),
        "final_note": any_final.get("error") or any_final.get("rationale"),
        "claims": data["claims"],
        "prm": data["prm"],
        "calls": data["calls"],
        "call_totals": call_totals(data["calls"]),
        "chair_calls": chair_calls,
        # A probe run's item: its variants, or its original and the edit side by side.
        "probe": data.get("probe"),
    }
