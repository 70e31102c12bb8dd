"""`--mode panel`: an independent jury (SPEC §5).

Every persona of the run's persona spec scores the sample once, on its own and concurrently,
with its persona instructions placed before the rubric's system prompt. Each member is an agent
of its own (its calls, tokens and cost are recorded under its name, and ``roles`` can give it
its own model). The panel's verdict is the median (or another registered reducer's value,
``panel_aggregate``) per attribute of the members that gave a valid judgment, with the same
gate rule as the final per-item scores; its rationale per attribute reports how many members
it combines and their spread (max - min). A cheap baseline to compare with the MagenticOne
discussion.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from clinjudge.judges.workflows._contract import PANEL_AGENT, WorkflowContext, WorkflowResult
from clinjudge.judges.workflows._prm_evidence import prompt_evidence
from clinjudge.judges.workflows._registry import register_workflow
from clinjudge.judges.workflows._single import SampleVerdict, judge_single_sample
from clinjudge.personas import Persona, load_personas
from clinjudge.rubrics import DEFAULT_REDUCER, Rubric, combine_scores, reducer_names

PANEL_MEMBER_ROLE = "panel_member"

__all__ = [
    "PANEL_AGENT",
    "PANEL_MEMBER_ROLE",
    "aggregate_members",
    "all_failed_reason",
    "panel_personas",
    "panel_workflow",
]

# "invalid reply after 1 repair(s): " says how hard we tried, not why: the reason follows it.
_REPAIRS_PREFIX = re.compile(r"^invalid reply after \d+ repair\(s\): ")
_REASON_CHARS = 200


def _member_reason(error: str | None) -> str:
    """A member's reason, short enough to group: the first clause of its error."""
    reason = _REPAIRS_PREFIX.sub("", error or "unknown")
    if reason.startswith("reply truncated at the token limit"):
        # "reply truncated at the token limit (max_tokens 800, finish_reason=length); ..."
        reason = reason.split(";", 1)[0].replace(", finish_reason=length", "")
    return reason[:_REASON_CHARS]


def all_failed_reason(members: Sequence[SampleVerdict]) -> str:
    """Why a panel sample failed when every member did: the members' reasons, equal ones
    grouped with their counts, most frequent first.

    ``all 3 panel members failed: 3 × reply truncated at the token limit (max_tokens 400)``
    (the run summary groups samples by the text before the first colon).

    Args:
        members: Every member's verdict (all failed).
    """
    counts = Counter(_member_reason(v.error) for v in members)
    reasons = "; ".join(f"{n} × {reason}" for reason, n in counts.most_common())
    return f"all {len(members)} panel members failed: {reasons}"


def panel_personas(spec: str) -> list[Persona]:
    """The panel's members for a persona spec (set name, file, or comma list of names), as the
    spec reads now; a run's workflow uses the copy resolved when the run was prepared."""
    return load_personas(spec)


def _fmt(value: float) -> str:
    return f"{value:g}"


def aggregate_members(
    rubric: Rubric,
    members: Sequence[Mapping[str, int | float | None]],
    how: str = DEFAULT_REDUCER,
) -> tuple[dict[str, float | None], dict[str, str]]:
    """Combine valid member judgments per attribute, with the rubric's gate rule.

    The gate decision always follows the members' median (the majority), as for final scores;
    with another reducer (``how="mean"``...) every attribute that is not nulled by its gate is
    that reducer's value over the members that gave a number (``rubrics.combine_scores``).

    Args:
        rubric: The rubric (attributes and gates).
        members: Values of each member whose judgment was valid (at least one).
        how: A registered reducer's name (``rubrics.reducer_names()``).

    Returns:
        The combined values and a rationale per attribute.

    Raises:
        ValueError: ``how`` is no registered reducer.
    """
    if how not in reducer_names():
        known = ", ".join(reducer_names())
        raise ValueError(f"unknown panel aggregate {how!r}; use a registered reducer: {known}")
    samples = [{k: (None if v is None else float(v)) for k, v in m.items()} for m in members]
    values = combine_scores(rubric, samples, how)
    rationales: dict[str, str] = {}
    for key in rubric.keys:
        numbers = [n for s in samples if (n := s.get(key)) is not None]
        note = f"{how} of {len(samples)} members"
        if numbers:
            note += f"; spread {_fmt(max(numbers) - min(numbers))}"
        if values[key] is None:
            note += "; null"
        rationales[key] = note
    return values, rationales


async def panel_workflow(ctx: WorkflowContext) -> WorkflowResult:
    """Every persona scores once, independently; the panel reduces their scores (median...)."""
    personas = ctx.personas  # resolved when the run was prepared, stored with it
    evidence = await prompt_evidence(ctx)  # one PRM report, read by every member

    async def member(persona: Persona) -> SampleVerdict:
        return await judge_single_sample(
            ctx.item,
            ctx.rubric,
            ctx.call_fn(persona.name, PANEL_MEMBER_ROLE),
            shots=ctx.shots,
            explanations=ctx.config.explanations,
            max_repairs=ctx.config.max_repairs,
            system_prefix=persona.system_message,
            evidence=evidence,
        )

    verdicts = await asyncio.gather(*(member(p) for p in personas))
    members = {p.name: v for p, v in zip(personas, verdicts, strict=True)}
    transcript = [(name, turn) for name, v in members.items() for turn in v.transcript]
    ok = {name: v for name, v in members.items() if v.status == "ok"}
    failed = [name for name in members if name not in ok]
    if not ok:
        # Each member's own error stays on its own sample row; the panel's names them all, so
        # the run summary says why without opening the members' rows.
        verdict = SampleVerdict("failed", error=all_failed_reason(list(members.values())))
        return WorkflowResult(PANEL_AGENT, verdict, members, transcript)
    values, rationales = aggregate_members(
        ctx.rubric, [v.values for v in ok.values()], ctx.config.panel_aggregate
    )
    summary = f"{ctx.config.panel_aggregate} of {len(ok)} of {len(members)} panel members"
    if failed:
        summary += f" ({', '.join(failed)} failed)"
    verdict = SampleVerdict(
        "ok",
        values=values,  # type: ignore[arg-type]  # a median of an even count can be x.5
        rationales=rationales,
        rationale=summary,
    )
    return WorkflowResult(PANEL_AGENT, verdict, members, transcript)


register_workflow("panel", PANEL_AGENT, panel_workflow)
