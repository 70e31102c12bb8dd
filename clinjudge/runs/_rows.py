"""Rows for the store, built from what the judge workflows return."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from clinjudge.inputs import parse_json
from clinjudge.rubrics import ChatTurn, Item, Rubric, scan_item
from clinjudge.runs._quality_flags import noted_flag_rows
from clinjudge.runs._store import now

if TYPE_CHECKING:  # the judges' types only: `judge runs list` must not load the clients
    from clinjudge.judges import CallOutcome, ProviderFault, SampleVerdict


@dataclass(frozen=True)
class SampleKey:
    """Identifies one sample of one agent on one item in one run."""

    run_id: str
    item_id: str
    sample: int
    agent: str

    def as_columns(self) -> dict[str, Any]:
        """The key as column values."""
        return {
            "run_id": self.run_id,
            "item_id": self.item_id,
            "sample": self.sample,
            "agent": self.agent,
        }


def call_row(
    key: SampleKey,
    seq: int,
    *,
    role: str,
    model: str,
    started: datetime,
    outcome: CallOutcome | None,
    fault: ProviderFault | None,
) -> dict[str, Any]:
    """One row of the calls table (a single attempt)."""
    run_id, item_id, sample, agent = key.run_id, key.item_id, key.sample, key.agent
    if outcome is not None:
        # Every call that got a reply: the row in one literal (the hot path).
        return {
            "call_id": f"{run_id}/{item_id}/{sample}/{agent}/{seq}",
            "run_id": run_id,
            "item_id": item_id,
            "sample": sample,
            "agent": agent,
            "seq": seq,
            "role": role,
            "model": model,
            "started_at": started,
            "status": "ok",
            "error": fault.reason if fault is not None else None,
            "latency_s": outcome.latency_s,
            "prompt_tokens": outcome.prompt_tokens,
            "completion_tokens": outcome.completion_tokens,
            "tokens_estimated": outcome.tokens_estimated,
            "cost_usd": outcome.cost_usd,
            "finish_reason": outcome.finish_reason,
            "cached": outcome.cached,
            "output_mode": outcome.output_mode,
            "cached_input_tokens": outcome.cached_input_tokens,
            "cache_write_tokens": outcome.cache_write_tokens,
            "cache_saving_usd": outcome.cache_saving_usd,
            "max_tokens": outcome.max_tokens,
        }
    row = {
        "call_id": f"{run_id}/{item_id}/{sample}/{agent}/{seq}",
        "run_id": run_id,
        "item_id": item_id,
        "sample": sample,
        "agent": agent,
        "seq": seq,
        "role": role,
        "model": model,
        "started_at": started,
        "status": "error",
        "error": fault.reason if fault else None,
        # A failed attempt costs time too (a hang costs the whole timeout).
        "latency_s": max((now() - started).total_seconds(), 0.0),
    }
    if fault is not None:
        row["output_mode"] = fault.output_mode
    if fault is not None and fault.usage is not None:
        # A billed reply that failed (e.g. 200 without choices) still counts its tokens and cost.
        row.update(
            prompt_tokens=fault.usage[0],
            completion_tokens=fault.usage[1],
            tokens_estimated=False,
            cost_usd=fault.cost_usd,
        )
    return row


def judgment_rows(key: SampleKey, rubric: Rubric, verdict: SampleVerdict) -> list[dict[str, Any]]:
    """One judgments row per rubric attribute for one agent's verdict on one sample."""
    return _judgment_rows(key, rubric.keys, verdict)


def _judgment_rows(key: SampleKey, keys: list[str], verdict: SampleVerdict) -> list[dict[str, Any]]:
    # Built for every sample, a row per attribute: copies of one row with the sample's
    # columns (a dict copy costs a quarter of a dict display of eleven keys), and none of the
    # lookups a verdict without explanations or coerced scores cannot need.
    ok = verdict.status == "ok"
    rationale, rationales, coerced = verdict.rationale, verdict.rationales, verdict.coerced
    template = {
        "run_id": key.run_id,
        "item_id": key.item_id,
        "sample": key.sample,
        "agent": key.agent,
        "attribute": None,
        "value": None,
        "final": False,
        "status": verdict.status,
        "error": verdict.error,
        "rationale": rationale,
        "raw_value": None,
    }
    copy = template.copy
    rows = []
    if ok and not rationales and not coerced:
        value = verdict.values.get
        for attribute in keys:
            row = copy()
            row["attribute"] = attribute
            row["value"] = value(attribute)
            rows.append(row)
        return rows
    values = verdict.values
    for attribute in keys:
        row = copy()
        row["attribute"] = attribute
        if ok:
            row["value"] = values.get(attribute)
            row["raw_value"] = coerced.get(attribute)
        row["rationale"] = rationales.get(attribute) or rationale
        rows.append(row)
    return rows


def sample_row(
    key: SampleKey, verdict: SampleVerdict, calls: list[dict[str, Any]]
) -> dict[str, Any]:
    """The samples row of one agent's verdict, with the calls it took."""
    if len(calls) == 1:  # what sum() gives for one call, without its generator
        latency = 0 + (calls[0].get("latency_s") or 0.0)
    else:
        latency = sum(c.get("latency_s") or 0.0 for c in calls)
    return {
        "run_id": key.run_id,
        "item_id": key.item_id,
        "sample": key.sample,
        "agent": key.agent,
        "status": verdict.status,
        "error": verdict.error,
        "raw_text": None if verdict.status == "ok" else verdict.raw_text,
        "rationale": verdict.rationale,
        "n_calls": len(calls),
        "latency_s": latency,
        "finished_at": now(),
    }


def transcript_rows(key: SampleKey, turns: list[tuple[str, ChatTurn]]) -> list[dict[str, Any]]:
    """Messages rows of a sample; each turn is stored under the agent that sent or received it."""
    run_id, item_id, sample = key.run_id, key.item_id, key.sample
    return [
        {
            "run_id": run_id,
            "item_id": item_id,
            "sample": sample,
            "agent": agent,
            "seq": seq,
            "role": turn.role,
            "content": turn.content,
        }
        for seq, (agent, turn) in enumerate(turns)
    ]


def _own_transcript_rows(key: SampleKey, turns: list[ChatTurn]) -> list[dict[str, Any]]:
    """:func:`transcript_rows` of turns all stored under ``key.agent``."""
    run_id, item_id, sample, agent = key.run_id, key.item_id, key.sample, key.agent
    return [
        {
            "run_id": run_id,
            "item_id": item_id,
            "sample": sample,
            "agent": agent,
            "seq": seq,
            "role": turn.role,
            "content": turn.content,
        }
        for seq, turn in enumerate(turns)
    ]


def verdict_rows(
    key: SampleKey, rubric: Rubric, verdict: SampleVerdict, calls: list[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """All rows one finished single-agent sample contributes, by table.

    Args:
        key: The sample's identity.
        rubric: The rubric (one judgment row per attribute).
        verdict: What the workflow concluded.
        calls: Call rows recorded for the sample's attempts.
    """
    rows = {
        "calls": calls,
        "messages": _own_transcript_rows(key, verdict.transcript),
        "samples": [sample_row(key, verdict, calls)],
        "judgments": _judgment_rows(key, rubric.keys, verdict),
    }
    if verdict.notes:
        rows["quality_flags"] = _noted(key, key.agent, verdict)
    return rows


def _noted(key: SampleKey, agent: str, verdict: SampleVerdict) -> list[dict[str, Any]]:
    """The flag of what the parser noted reading an agent's reply (rare: built only then)."""
    return noted_flag_rows(key.run_id, key.item_id, key.sample, agent, verdict.notes)


def workflow_rows(
    key: SampleKey,
    rubric: Rubric,
    verdict: SampleVerdict,
    members: dict[str, SampleVerdict],
    transcript: list[tuple[str, ChatTurn]],
    calls: list[dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """Rows of a sample decided by several agents: the decision under ``key.agent``, each
    member's own scores under its name, and the whole transcript.

    Args:
        key: The sample's identity, with the deciding agent's name.
        rubric: The rubric.
        verdict: The sample-level decision.
        members: Each member's own verdict.
        transcript: Every turn as (agent, turn); empty means the verdict's own transcript.
        calls: Call rows of every agent.
    """
    keys = rubric.keys
    rows = {
        "calls": calls,
        "messages": transcript_rows(key, transcript)
        if transcript
        else _own_transcript_rows(key, verdict.transcript),
        "samples": [sample_row(key, verdict, calls)],
        "judgments": _judgment_rows(key, keys, verdict),
    }
    for member, member_verdict in members.items():
        member_key = SampleKey(key.run_id, key.item_id, key.sample, member)
        own_calls = [c for c in calls if c["agent"] == member]
        rows["samples"].append(sample_row(member_key, member_verdict, own_calls))
        rows["judgments"].extend(_judgment_rows(member_key, keys, member_verdict))
    noted = [
        row
        for agent, noted_verdict in ((key.agent, verdict), *members.items())
        if noted_verdict.notes
        for row in _noted(key, agent, noted_verdict)
    ]
    if noted:
        rows["quality_flags"] = noted
    return rows


def item_row(
    run_id: str, position: int, item: Item, rubric: Rubric | None = None
) -> dict[str, Any]:
    """One row of the items table, with flags for text that addresses the judge.

    Args:
        run_id: The run.
        position: The item's position in the dataset.
        item: The item.
        rubric: The run's rubric, when known (its keys are reserved words too).
    """
    # Plain dicts in the models' field order: the same JSON as ``model_dump``/``as_dict``
    # without their per-object cost (run creation builds a row for every item).
    flags = scan_item(item, rubric)
    return {
        "run_id": run_id,
        "item_id": item.id,
        "position": position,
        "notes": json.dumps([{"id": n.id, "text": n.text} for n in item.notes]),
        "summary": item.summary,
        "specialty": item.specialty,
        "reference": item.reference,
        "vendor": item.vendor,
        "meta": json.dumps(item.meta) if item.meta else "{}",
        "flags": json.dumps([{"name": f.name, "field": f.field, "reason": f.reason} for f in flags])
        if flags
        else "[]",
    }


def item_from_row(row: dict[str, Any]) -> Item:
    """Rebuild an item stored in the items table."""
    return item_from_columns(
        row["item_id"],
        row["notes"],
        row["summary"],
        row["specialty"],
        row["reference"],
        row["vendor"],
        row["meta"],
    )


ITEM_COLUMNS = "item_id, notes, summary, specialty, reference, vendor, meta"
"""The items table's columns :func:`item_from_columns` takes, in its order."""

_validate_item = Item.model_validate


def item_from_columns(
    item_id: str,
    notes: str | None,
    summary: str,
    specialty: str | None,
    reference: str | None,
    vendor: str | None,
    meta: str | None,
) -> Item:
    """Rebuild a stored item from its columns (:data:`ITEM_COLUMNS`, as a query returns them).

    Validated like any item (the stored row may come from an older version or another tool),
    in one ``model_validate`` of a plain dict, the JSON read by :func:`parse_json`: this is
    the runner's intake, once per sample (#27).

    Args:
        item_id: ``item_id``.
        notes: ``notes`` JSON.
        summary: ``summary``.
        specialty: ``specialty``.
        reference: ``reference``.
        vendor: ``vendor``.
        meta: ``meta`` JSON.
    """
    return _validate_item(
        {
            "id": item_id,
            "notes": parse_json(notes) if notes else [],
            "summary": summary,
            "specialty": specialty,
            "reference": reference,
            "vendor": vendor,
            "meta": parse_json(meta) if meta and meta != "{}" else {},
        }
    )
