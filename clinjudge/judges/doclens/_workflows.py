"""DocLens workflows (``method: claims`` rubrics) for the single, panel and magentic modes.

One sample: an extractor turns the reference and the output (citations removed) into atomic
claims; the output is split into statements with their citations; then every reference claim
is judged against the output (claim recall), every output claim against the reference (claim
precision) and every cited statement against the source units it cites (citation recall and
precision). The four per-instance proportions are the sample's judgments; every claim and
statement, with its verdict, is a row of the ``claims`` table.

- ``single``: the judge model extracts and judges (or an NLI model judges, ``nli_model``).
- ``panel``: an extractor extracts once; each persona judges every claim on its own; the
  majority decides each claim (a tie counts as not entailed).
- ``magentic``: as the panel, then only the disputed claims go to a moderated discussion: each
  persona argues in turn (``rounds`` rounds), and the orchestrator decides each disputed claim.
  This is a plain moderated round-robin over our call functions, not AutoGen's MagenticOne
  group chat: the agenda (the disputed claims) is fixed, so MagenticOne's planning and ledger
  add cost without adding judgment.

A judgment that fails (provider fault, unreadable reply after repair) gets verdict ``failed``:
it stays in the denominators as not entailed and is counted in the rationale and error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

from clinjudge.judges.clients import reply_schema_for
from clinjudge.judges.doclens._citations import (
    output_statements,
    remove_citations,
    source_units,
    split_statements,
)
from clinjudge.judges.doclens._context import DocLensContext, DocLensRunSettings
from clinjudge.judges.doclens._judges import (
    CITATION,
    EXTRACTOR_AGENT,
    OUTPUT_LABEL,
    PRECISION,
    RECALL,
    REFERENCE_LABEL,
    Judge,
    LLMJudge,
    NLIJudge,
    Plan,
    Transcript,
    Unit,
    UnitVerdict,
    Verdicts,
    failed_verdict,
    verdict_of,
)
from clinjudge.judges.doclens._metrics import (
    ENTAILED,
    FAILED,
    NOT_ENTAILED,
)
from clinjudge.judges.doclens._parse import (
    Entailment,
    parse_keyed,
)
from clinjudge.judges.doclens._plan import (
    claim_rows,
    judge_plan,
    plan_sample,
    sample_verdict,
    statement_unit,
)
from clinjudge.judges.doclens._prompts import (
    citation_messages,
    decision_messages,
    decision_schema,
    discussion_messages,
    discussion_schema,
    entailment_messages,
    extraction_messages,
    fence,
)
from clinjudge.judges.workflows import (
    JUDGE_AGENT,
    ORCHESTRATOR_AGENT,
    PANEL_AGENT,
    PANEL_MEMBER_ROLE,
    SampleVerdict,
    Workflow,
    WorkflowResult,
    register_claims_workflow,
)
from clinjudge.personas import Persona, PersonaSet
from clinjudge.rubrics import ChatTurn, Item


def _stance(persona: Persona) -> str:
    return (
        f"You are {persona.display_name}, a physician reviewer on a panel. Your reviewing "
        f"stance: {persona.description.strip()} Apply it to the facts only; never bend a "
        "verdict against clear evidence."
    )


def _extractor(ctx: DocLensContext, transcript: Transcript, agent: str, role: str) -> LLMJudge:
    return LLMJudge(ctx, agent, role, transcript)


def _result(
    ctx: DocLensContext,
    agent: str,
    plan: Plan,
    verdicts: Verdicts,
    transcript: Transcript,
    members: dict[str, Verdicts] | None = None,
) -> WorkflowResult:
    rows = claim_rows(ctx, agent, plan, verdicts)
    member_verdicts: dict[str, SampleVerdict] = {}
    for name, own in (members or {}).items():
        rows.extend(claim_rows(ctx, name, plan, own, extraction=False))
        mine = [(a, t) for a, t in transcript if a == name]
        member_verdicts[name] = sample_verdict(plan, own, mine)
    verdict = sample_verdict(plan, verdicts, transcript)
    return WorkflowResult(agent, verdict, member_verdicts, list(transcript), {"claims": rows})


async def doclens_single(ctx: DocLensContext) -> WorkflowResult:
    """One judge model extracts and judges (an NLI model judges when configured)."""
    transcript: Transcript = []
    judge = LLMJudge(ctx, JUDGE_AGENT, "judge", transcript)
    plan = await plan_sample(ctx, judge)
    decider: Judge = NLIJudge(ctx.config.doclens, ctx) if ctx.config.doclens.nli_model else judge
    verdicts = await judge_plan(decider, plan)
    return _result(ctx, JUDGE_AGENT, plan, verdicts, transcript)


def majority(votes: Sequence[UnitVerdict], citations: Sequence[int] = ()) -> UnitVerdict:
    """Combine members' verdicts on one unit: the majority of valid votes; a tie counts as
    not entailed; a citation counts when more than half of the entailed votes name it.

    Args:
        votes: One verdict per member.
        citations: The statement's citations (empty for claims).
    """
    valid = [v for v in votes if v.verdict != FAILED]
    if not valid:
        errors = "; ".join(sorted({v.error or "failed" for v in votes}))
        return failed_verdict(f"every member failed: {errors}")
    yes = [v for v in valid if v.verdict == ENTAILED]
    no = len(valid) - len(yes)
    note = f"{len(yes)} of {len(valid)} valid votes entailed"
    if len(votes) > len(valid):
        note += f", {len(votes) - len(valid)} member(s) failed"
    if len(yes) == no:
        note += "; tie counted as not entailed"
    decided = UnitVerdict(ENTAILED if len(yes) > no else NOT_ENTAILED, note, len(yes) / len(valid))
    if decided.verdict == ENTAILED:
        decided.supporting = [
            c for c in citations if 2 * sum(c in v.supporting for v in yes) > len(yes)
        ]
        named = [v.supporting if v.named is None else v.named for v in yes]
        decided.named = [c for c in citations if 2 * sum(c in n for n in named) > len(yes)]
    return decided


async def _member_votes(
    ctx: DocLensContext, plan: Plan, personas: Sequence[Persona], transcript: Transcript
) -> tuple[dict[str, Verdicts], dict[str, LLMJudge]]:
    judges = {
        p.name: LLMJudge(ctx, p.name, PANEL_MEMBER_ROLE, transcript, stance=_stance(p))
        for p in personas
    }
    results = await asyncio.gather(*(judge_plan(j, plan) for j in judges.values()))
    return dict(zip(judges, results, strict=True)), judges


def _decide_by_majority(plan: Plan, members: dict[str, Verdicts]) -> Verdicts:
    return {
        u.key: u.fixed or majority([own[u.key] for own in members.values()], u.citations)
        for u in plan.units
    }


async def doclens_panel(ctx: DocLensContext) -> WorkflowResult:
    """Each persona judges every claim; the majority decides (ties: not entailed)."""
    transcript: Transcript = []
    plan = await plan_sample(ctx, _extractor(ctx, transcript, EXTRACTOR_AGENT, "extractor"))
    if ctx.config.doclens.nli_model:
        verdicts = await judge_plan(NLIJudge(ctx.config.doclens, ctx), plan)
        return _result(ctx, PANEL_AGENT, plan, verdicts, transcript)
    members, _ = await _member_votes(ctx, plan, ctx.personas, transcript)
    decided = _decide_by_majority(plan, members)
    return _result(ctx, PANEL_AGENT, plan, decided, transcript, members)


def _disputed(plan: Plan, members: dict[str, Verdicts]) -> list[Unit]:
    disputed = []
    for unit in plan.units:
        said = {own[unit.key].verdict for own in members.values()} - {FAILED}
        if len(said) > 1:
            disputed.append(unit)
    return disputed


def _context(plan: Plan) -> str:
    return (
        f"REFERENCE NOTE\n{fence('DOCUMENT', plan.reference or '(none)')}\n\n"
        f"GENERATED NOTE (citation markers removed)\n{fence('DOCUMENT', plan.output)}"
    )


_WHAT = {
    RECALL: "reference claim: is it entailed by the generated note?",
    PRECISION: "claim of the generated note: is it entailed by the reference note?",
    CITATION: "sentence of the generated note: do its cited source units entail it?",
}


def _dispute_payload(
    disputed: Sequence[Unit], arguments: dict[str, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    payload = []
    for unit in disputed:
        entry: dict[str, Any] = {"id": unit.key, "question": _WHAT[unit.kind], "text": unit.text}
        if unit.kind == CITATION:
            entry["cited_units"] = {str(n): t for n, t in unit.cited.items()}
        entry["votes"] = arguments[unit.key]
        payload.append(entry)
    return payload


def _argument(member: str, stage: str, verdict: UnitVerdict | Entailment) -> dict[str, Any]:
    if isinstance(verdict, Entailment):
        entailed, text = verdict.entailed, verdict.explanation
    else:
        entailed, text = verdict.verdict == ENTAILED, verdict.explanation
    return {"member": member, "stage": stage, "entailed": int(entailed), "argument": text or ""}


async def _discuss(
    ctx: DocLensContext,
    plan: Plan,
    disputed: list[Unit],
    members: dict[str, Verdicts],
    judges: dict[str, LLMJudge],
    transcript: Transcript,
) -> Verdicts:
    ids = [u.key for u in disputed]
    arguments: dict[str, list[dict[str, Any]]] = {
        u.key: [
            _argument(name, "independent vote", own[u.key])
            for name, own in members.items()
            if own[u.key].verdict != FAILED
        ]
        for u in disputed
    }
    shape = 'one JSON object {"verdicts": [...]} of {"id", "explanation", "entailed"} objects'
    context = _context(plan)
    for round_number in range(1, ctx.config.rounds + 1):
        for name, judge in judges.items():  # round-robin: later speakers hear earlier ones
            turns = discussion_messages(
                context, _dispute_payload(disputed, arguments), stance=judge.stance
            )
            got, _ = await judge.ask(
                turns,
                lambda t: parse_keyed(t, ids),
                shape,
                reply_schema_for("doclens_discussion", discussion_schema(ids)),
            )
            for key, argued in (got or {}).items():
                arguments[key].append(_argument(name, f"round {round_number}", argued))
    chair = LLMJudge(ctx, ORCHESTRATOR_AGENT, "orchestrator", transcript)
    turns = decision_messages(context, _dispute_payload(disputed, arguments))
    got, error = await chair.ask(
        turns,
        lambda t: parse_keyed(t, ids),
        'one JSON object {"verdicts": [...]} of {"id", "explanation", "supporting", "entailed"} '
        "objects",
        reply_schema_for("doclens_decision", decision_schema(ids)),
    )
    decided: Verdicts = {}
    for unit in disputed:
        entailment = (got or {}).get(unit.key)
        if entailment is None:
            decided[unit.key] = failed_verdict(
                f"orchestrator gave no verdict: {error or 'id missing from its reply'}"
            )
            continue
        verdict = verdict_of(entailment)
        named = [c for c in entailment.supporting if c in unit.citations]
        verdict.named = named
        if entailment.entailed:
            verdict.supporting = list(unit.citations) if len(unit.citations) == 1 else named
        decided[unit.key] = verdict
    return decided


async def doclens_magentic(ctx: DocLensContext) -> WorkflowResult:
    """Personas judge independently; the orchestrator decides the disputed claims after a
    moderated discussion."""
    transcript: Transcript = []
    plan = await plan_sample(ctx, _extractor(ctx, transcript, EXTRACTOR_AGENT, "extractor"))
    if ctx.config.doclens.nli_model:
        verdicts = await judge_plan(NLIJudge(ctx.config.doclens, ctx), plan)
        return _result(ctx, ORCHESTRATOR_AGENT, plan, verdicts, transcript)
    members, judges = await _member_votes(ctx, plan, ctx.personas, transcript)
    decided = _decide_by_majority(plan, members)
    disputed = _disputed(plan, members)
    if disputed:
        decided.update(await _discuss(ctx, plan, disputed, members, judges, transcript))
    return _result(ctx, ORCHESTRATOR_AGENT, plan, decided, transcript, members)


# The runner hands every workflow the same context; a claim rubric's run settings always carry
# the DocLens block, so these narrower signatures are safe to register.
register_claims_workflow("single", JUDGE_AGENT, cast(Workflow, doclens_single))
register_claims_workflow("panel", PANEL_AGENT, cast(Workflow, doclens_panel))
register_claims_workflow("magentic", ORCHESTRATOR_AGENT, cast(Workflow, doclens_magentic))


def doclens_estimate_prompts(
    item: Item, config: DocLensRunSettings, personas: PersonaSet | None = None
) -> list[list[ChatTurn]]:
    """Representative prompts of one DocLens sample, for ``--dry-run`` and budget estimates.

    Claims are not known before extraction, so each text's sentences stand in for its claims;
    panel modes repeat the entailment prompts once per persona (the magentic discussion comes
    on top and is not estimated).

    Args:
        item: The item.
        config: The run configuration (mode, DocLens settings).
        personas: The run's personas, resolved once when it was prepared
            (``PreparedRun.personas``); None for one judge (single mode).
    """
    settings = config.doclens
    output = remove_citations(item.summary)
    reference = remove_citations(item.reference or "")

    def extraction(text: str) -> list[ChatTurn]:
        return extraction_messages(
            text, min_claims=settings.min_claims, max_claims=settings.max_claims
        )

    prompts = [extraction(output)]
    if reference.strip():
        prompts.append(extraction(reference))
    judging: list[list[ChatTurn]] = []
    if not settings.nli_model:
        for premise, text, label in (
            (output, reference, OUTPUT_LABEL),
            (reference, output, REFERENCE_LABEL),
        ):
            stand_in = [s.text for s in split_statements(text)][: settings.max_claims]
            if stand_in:
                judging.append(entailment_messages(premise, stand_in, document_label=label))
        if settings.citations:
            source = source_units(item.notes, settings)
            for position, statement in enumerate(output_statements(item.summary, settings)):
                unit = statement_unit(position, statement, source, settings.max_citations)
                if unit.fixed is None:
                    judging.append(citation_messages(unit.text, unit.cited))
    members = 1 if personas is None else max(len(personas.personas), 1)
    return prompts + judging * members
