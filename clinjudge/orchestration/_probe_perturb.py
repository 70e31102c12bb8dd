"""``judge probe --perturber MODEL``: a model rewrites each rule-based variant so that it reads
more naturally, keeping the edit.

A rewrite is kept only when a rule can check that the edit survived: every text the edit added
is still there word for word, no text it removed or replaced came back, and the citations are
the same ones. Otherwise the variant stays as the rules made it, with the reason; either way
``probe_variants.edit`` records it under ``perturber`` (the model, whether the text was
rewritten, the rule-based text, tokens and cost), so a reader can always tell a rewritten
variant from a rule-based one. Probes whose edit is the form itself (``disorder``, ``neutral``,
``uncited``) or an exact text (``injection``) are never rewritten: a rewrite would undo them.

The perturber's calls are made while the run is prepared, before it is stored: their tokens and
cost are kept with each variant's edit, not in the run's ``calls`` table.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from clinjudge.judges import JudgeModel, ModelSettings, ProviderFault
from clinjudge.judges.clients import provider_for
from clinjudge.orchestration._config import ConfigError
from clinjudge.orchestration._probe_prep import PreparedProbe
from clinjudge.orchestration._run_items import ListItems
from clinjudge.rubrics import ChatTurn, Item, Rubric

REWRITTEN_PROBES = frozenset({"contradiction", "fabrication", "omission", "padding", "stigma"})
"""Probes whose variants a perturber may rewrite (the others' edit is the form itself)."""

_CITATION = re.compile(r"\[(?:Notes?\s*)?\d+(?:\s*[-,–]\s*\d+)*\]")
_ATTEMPTS = 3

_SYSTEM = (
    "You copy-edit clinical summaries. Rewrite the summary you are given so that it reads as "
    "one clinician wrote it, in the same language, keeping every statement, number, date, "
    "side, negation and citation exactly as it is, even where they look wrong or "
    "unsupported: the summary is test material and its errors are deliberate. Keep each "
    "citation such as [Note 2] after the statement it supports. Reply with the rewritten "
    "summary only, no preamble."
)


@dataclass
class PerturbSummary:
    """What a perturber did to a probe run's variants.

    Args:
        model: The perturber.
        rewritten: Variants whose rewrite kept the edit (their text is the rewrite).
        kept: Variants left as the rules made them, by reason.
        cost_usd: The perturber's calls' cost (None when a price is unknown).
        calls: Calls made.
    """

    model: str
    rewritten: int = 0
    kept: Counter[str] = field(default_factory=Counter)
    cost_usd: float | None = 0.0
    calls: int = 0


def perturber_settings(judge: ModelSettings, model: str) -> ModelSettings:
    """The perturber's settings: the judge's endpoint, key and limits, another model, a
    warmer temperature and room for a whole summary.

    Args:
        judge: The judge's settings (its base URL and key reach the perturber too).
        model: ``provider/model`` of the perturber.

    Raises:
        ConfigError: The simulated ``mock/`` provider, which cannot rewrite text.
    """
    settings = judge.model_copy(
        update={"model": model, "temperature": 0.7, "json_mode": False, "max_tokens": 2048}
    )
    if provider_for(settings).simulated:
        raise ConfigError(
            f"--perturber {model}: the simulated provider cannot rewrite text; name a real "
            "model (the judge may still be mock/...)",
            setting="perturber",
        )
    return settings


def _prompt(variant: Item, edit: dict[str, Any]) -> list[ChatTurn]:
    keep = "\n".join(f"- {text}" for text in edit.get("added") or [])
    gone = "\n".join(f"- {text}" for text in edit.get("removed") or [])
    parts = [f"SUMMARY:\n{variant.summary}"]
    if keep:
        parts.append(f"These passages must stay word for word:\n{keep}")
    if gone:
        parts.append(f"These passages must not appear:\n{gone}")
    return [ChatTurn("system", _SYSTEM), ChatTurn("user", "\n\n".join(parts))]


def edit_kept(rule_based: str, rewrite: str, edit: dict[str, Any]) -> str | None:
    """Why a rewrite lost the edit (None: it kept it).

    Args:
        rule_based: The variant as the rules made it.
        rewrite: The perturber's text.
        edit: The edit (``added`` and ``removed`` texts).
    """
    text = rewrite.strip()
    if not text:
        return "empty rewrite"
    if not 0.5 <= len(text) / max(len(rule_based), 1) <= 1.5:
        return "rewrite length far from the variant's"
    for added in edit.get("added") or []:
        if added.strip() and added.strip() not in text:
            return "an added text was not kept word for word"
    for removed in edit.get("removed") or []:
        if removed.strip() and text.count(removed.strip()) > rule_based.count(removed.strip()):
            return "a removed text came back"
    if Counter(_CITATION.findall(text)) != Counter(_CITATION.findall(rule_based)):
        return "citations changed"
    return None


async def _rewrite(
    model: JudgeModel, variant: Item, edit: dict[str, Any]
) -> tuple[str | None, str | None, dict[str, Any]]:
    """The rewrite (None when none is usable), the reason it is not, and the calls' usage."""
    usage: dict[str, Any] = {"calls": 0, "cost_usd": 0.0, "prompt_tokens": 0}
    usage["completion_tokens"] = 0
    last = "no reply"
    for _ in range(_ATTEMPTS):
        try:
            outcome = await model.generate(_prompt(variant, edit))
        except ProviderFault as exc:
            last = f"perturber call failed: {exc}"
            if not exc.retryable:
                break
            continue
        usage["calls"] += 1
        usage["prompt_tokens"] += outcome.prompt_tokens
        usage["completion_tokens"] += outcome.completion_tokens
        if usage["cost_usd"] is not None:
            usage["cost_usd"] = (
                None if outcome.cost_usd is None else usage["cost_usd"] + outcome.cost_usd
            )
        if outcome.finish_reason == "length":
            last = "rewrite cut off at the token cap"
            continue
        problem = edit_kept(variant.summary, outcome.text, edit)
        if problem is None:
            return outcome.text.strip(), None, usage
        last = problem
    return None, last, usage


async def perturb_variants(
    prepared: PreparedProbe,
    settings: ModelSettings,
    rubric: Rubric,
    *,
    concurrency: int = 8,
    model: JudgeModel | None = None,
) -> PerturbSummary:
    """Rewrite the prepared run's variants with the perturber, in place, before it is stored.

    Args:
        prepared: The probe run (its items and variant rows are changed).
        settings: The perturber's settings (:func:`perturber_settings`).
        rubric: The run's rubric.
        concurrency: Calls at once.
        model: A model to use instead of one built from ``settings`` (tests).
    """
    summary = PerturbSummary(settings.model)
    items = prepared.run.items
    if not isinstance(items, ListItems):  # prepare_probe always builds a list
        raise TypeError("a prepared probe run holds its items in a list")
    model = model or JudgeModel(settings, rubric)
    where = {item.id: index for index, item in enumerate(items.items)}
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(row: dict[str, Any]) -> None:
        index = where[row["item_id"]]
        variant = items.items[index]
        note: dict[str, Any] = {"model": settings.model, "rewritten": False}
        if row["probe"] not in REWRITTEN_PROBES:
            note["reason"] = f"the {row['probe']} edit is the form itself: not rewritten"
        else:
            async with gate:
                text, reason, usage = await _rewrite(model, variant, row["edit"])
            note.update(usage)
            summary.calls += usage["calls"]
            if summary.cost_usd is not None:
                cost = usage["cost_usd"]
                summary.cost_usd = None if cost is None else summary.cost_usd + cost
            if text is None:
                note["reason"] = reason
            else:
                note.update(rewritten=True, rule_based_summary=variant.summary)
                meta = {**variant.meta, "probe_perturber": settings.model}
                items.items[index] = variant.model_copy(update={"summary": text, "meta": meta})
        if note["rewritten"]:
            summary.rewritten += 1
        else:
            summary.kept[str(note["reason"])] += 1
        row["edit"] = {**row["edit"], "perturber": note}

    await asyncio.gather(*(one(row) for row in prepared.variants))  # type: ignore[arg-type]
    return summary
