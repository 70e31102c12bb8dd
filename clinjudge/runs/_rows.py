"""Rows for the store, built from what the judge workflows return."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from clinjudge.judges import CallOutcome, ProviderFault, SampleVerdict
from clinjudge.rubrics import Item, Rubric
from clinjudge.runs._store import now


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
    row = {
        "call_id": f"{key.run_id}/{key.item_id}/{key.sample}/{key.agent}/{seq}",
        **key.as_columns(),
        "seq": seq,
        "role": role,
        "model": model,
        "started_at": started,
        "status": "ok" if outcome else "error",
        "error": fault.reason if fault else None,
    }
    if outcome is not None:
        row.update(
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=outcome.completion_tokens,
            tokens_estimated=outcome.tokens_estimated,
            cost_usd=outcome.cost_usd,
            latency_s=outcome.latency_s,
            finish_reason=outcome.finish_reason,
        )
    return row


def verdict_rows(
    key: SampleKey, rubric: Rubric, verdict: SampleVerdict, calls: list[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """All rows one finished sample contributes, by table.

    Args:
        key: The sample's identity.
        rubric: The rubric (one judgment row per attribute).
        verdict: What the workflow concluded.
        calls: Call rows recorded for the sample's attempts.
    """
    columns = key.as_columns()
    ok = verdict.status == "ok"
    judgments = [
        {
            **columns,
            "attribute": attribute,
            "value": verdict.values.get(attribute) if ok else None,
            "final": False,
            "status": verdict.status,
            "error": verdict.error,
            "rationale": verdict.rationales.get(attribute) or verdict.rationale,
        }
        for attribute in rubric.keys
    ]
    sample = {
        **columns,
        "status": verdict.status,
        "error": verdict.error,
        "raw_text": None if ok else verdict.raw_text,
        "rationale": verdict.rationale,
        "n_calls": len(calls),
        "latency_s": sum(c.get("latency_s") or 0.0 for c in calls),
        "finished_at": now(),
    }
    messages = [
        {**columns, "seq": seq, "role": turn.role, "content": turn.content}
        for seq, turn in enumerate(verdict.transcript)
    ]
    return {"calls": calls, "messages": messages, "samples": [sample], "judgments": judgments}


def item_row(run_id: str, position: int, item: Item) -> dict[str, Any]:
    """One row of the items table."""
    return {
        "run_id": run_id,
        "item_id": item.id,
        "position": position,
        "notes": json.dumps([n.model_dump() for n in item.notes]),
        "summary": item.summary,
        "specialty": item.specialty,
        "reference": item.reference,
        "vendor": item.vendor,
        "meta": json.dumps(item.meta),
    }


def item_from_row(row: dict[str, Any]) -> Item:
    """Rebuild an item stored in the items table."""
    return Item(
        id=row["item_id"],
        notes=json.loads(row["notes"]) if row["notes"] else [],
        summary=row["summary"],
        specialty=row["specialty"],
        reference=row["reference"],
        vendor=row["vendor"],
        meta=json.loads(row["meta"]) if row["meta"] else {},
    )
