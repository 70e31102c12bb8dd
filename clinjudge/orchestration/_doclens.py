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
import json
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from clinjudge.judges import CallFn, DocLensSettings, ProviderFault, SampleVerdict
from clinjudge.judges._doclens_citations import (
    NumberedSource,
    Statement,
    output_statements,
    remove_citations,
    source_units,
    split_statements,
)
from clinjudge.judges._doclens_parse import (
    DocLensParseError,
    Entailment,
    parse_claims,
    parse_entailment,
    parse_entailments,
    parse_keyed,
)
from clinjudge.judges._doclens_prompts import (
    citation_messages,
    claim_messages,
    decision_messages,
    discussion_messages,
    entailment_messages,
    extraction_messages,
    fence,
    repair_message,
)
from clinjudge.orchestration._config import ConfigError, RunConfig
from clinjudge.orchestration._context import SampleContext, WorkflowResult
from clinjudge.orchestration._workflows import JUDGE_AGENT, register_claims_workflow
from clinjudge.personas import Persona
from clinjudge.rubrics import ChatTurn, Item
from clinjudge.runs import now
from clinjudge.runs._doclens_metrics import (
    ENTAILED,
    FAILED,
    NOT_ENTAILED,
    Tally,
    citation_tallies,
    claim_tally,
    counted_citations,
)

RECALL, PRECISION, CITATION, EXTRACTION = "recall", "precision", "citation", "extraction"
EXTRACTOR_AGENT = "extractor"
PANEL_AGENT = "panel"
PANEL_MEMBER_ROLE = "panel_member"
ORCHESTRATOR_AGENT = "orchestrator"
NLI_AGENT = "nli"
DEFAULT_SECTION = "all"
_OUTPUT_LABEL = "generated note"
_REFERENCE_LABEL = "reference note"

T = TypeVar("T")
Transcript = list[tuple[str, ChatTurn]]


@dataclass
class UnitVerdict:
    """The verdict on one claim or statement.

    Args:
        verdict: ``entailed``, ``not_entailed`` or ``failed``.
        explanation: Why.
        score: 1/0 from an LLM, P(entailment) from an NLI model, the share of entailed votes
            from a panel.
        supporting: Citations that count towards citation precision (statements only).
        error: Why the judgment failed.
    """

    verdict: str
    explanation: str | None = None
    score: float | None = None
    supporting: list[int] = field(default_factory=list)
    error: str | None = None


@dataclass
class Unit:
    """One claim or statement to judge.

    Args:
        kind: ``recall`` (reference claim vs output), ``precision`` (output claim vs reference)
            or ``citation`` (output statement vs its cited units).
        idx: Position within its kind, from 0.
        text: The claim or statement.
        citations: Citations used for scoring (statements).
        cited: Text of each cited unit, when every citation names a known unit.
        fixed: A verdict decided without a judge (no citation, unknown unit).
        note: Remark stored with the verdict (e.g. borrowed citations).
    """

    kind: str
    idx: int
    text: str
    citations: tuple[int, ...] = ()
    cited: dict[int, str] = field(default_factory=dict)
    fixed: UnitVerdict | None = None
    note: str | None = None

    @property
    def key(self) -> str:
        """Identifier within the sample (``recall-3``)."""
        return f"{self.kind}-{self.idx}"


@dataclass
class Plan:
    """What one sample judges: claims, statements and how extraction went."""

    section: str
    output: str
    reference: str
    units: list[Unit]
    extraction: dict[str, tuple[int | None, str | None]]  # source -> (n claims, error)
    citations: bool = True  # whether citations were evaluated

    def of(self, kind: str) -> list[Unit]:
        """Units of one kind, in order."""
        return [u for u in self.units if u.kind == kind]


Verdicts = dict[str, UnitVerdict]


def _failed(error: str) -> UnitVerdict:
    return UnitVerdict(FAILED, error=error)


def _from_entailment(entailment: Entailment) -> UnitVerdict:
    return UnitVerdict(
        ENTAILED if entailment.entailed else NOT_ENTAILED,
        entailment.explanation,
        1.0 if entailment.entailed else 0.0,
    )


class LLMJudge:
    """Extraction and entailment through one agent's recorded, retried call function.

    Args:
        ctx: The sample's context.
        agent: Agent name (calls and transcript are recorded under it).
        role: Role, for model selection and the calls table.
        transcript: Where finished conversations are appended.
        stance: Persona instructions placed before each system prompt.

    Calls in flight are bounded run-wide by the context (``concurrency``).
    """

    def __init__(
        self,
        ctx: SampleContext,
        agent: str,
        role: str,
        transcript: Transcript,
        *,
        stance: str | None = None,
    ):
        self.agent = agent
        self.call: CallFn = ctx.call_fn(agent, role)
        self.settings: DocLensSettings = ctx.config.doclens
        self.max_repairs = ctx.config.max_repairs
        self.transcript = transcript
        self.stance = stance

    def _log(self, turns: list[ChatTurn]) -> None:
        self.transcript.extend((self.agent, turn) for turn in turns)

    async def ask(
        self, turns: list[ChatTurn], parse: Callable[[str], T], shape: str
    ) -> tuple[T | None, str | None]:
        """One conversation with bounded repair; (value, None) or (None, reason).

        Args:
            turns: The rendered messages.
            parse: Reads a reply; raises DocLensParseError when it cannot.
            shape: The expected answer shape, in words, for the repair message.
        """
        problem, truncated = "", False
        for _ in range(self.max_repairs + 1):
            try:
                outcome = await self.call(list(turns))
            except ProviderFault as fault:
                self._log(turns)
                return None, f"provider: {fault.reason}"
            turns.append(ChatTurn("assistant", outcome.text))
            truncated = outcome.finish_reason == "length"
            try:
                value = parse(outcome.text)
            except DocLensParseError as exc:
                problem = str(exc)
                turns.append(ChatTurn("user", repair_message(problem, shape)))
                continue
            self._log(turns)
            return value, None
        turns.pop()  # the last repair request was never sent
        self._log(turns)
        if truncated:
            problem = f"reply truncated at the token limit (finish_reason=length); {problem}"
        return None, f"invalid reply after {self.max_repairs} repair(s): {problem}"

    async def extract(self, text: str) -> tuple[list[str] | None, str | None]:
        """Atomic claims of a text, or (None, reason)."""
        settings = self.settings

        def parse(reply: str) -> list[str]:
            claims = parse_claims(reply)
            if len(claims) < settings.min_claims:
                raise DocLensParseError(
                    f"{len(claims)} claim(s), at least {settings.min_claims} required"
                )
            return claims[: settings.max_claims]

        turns = extraction_messages(
            text, min_claims=settings.min_claims, max_claims=settings.max_claims
        )
        return await self.ask(turns, parse, 'one JSON object {"claims": [...]}')

    async def _one_claim(self, premise: str, claim: str, label: str) -> UnitVerdict:
        turns = claim_messages(premise, claim, document_label=label, stance=self.stance)
        got, error = await self.ask(
            turns, parse_entailment, 'one JSON object {"explanation": ..., "entailed": 1 or 0}'
        )
        return _from_entailment(got) if got is not None else _failed(error or "no verdict")

    async def claims(self, units: Sequence[Unit], premise: str, label: str) -> list[UnitVerdict]:
        """Verdicts for claims against one premise: one batch call, then one call per claim
        the batch reply missed."""
        texts = [u.text for u in units]
        found: list[UnitVerdict | None] = [None] * len(units)
        batch_error = None
        if self.settings.batch_entailment and len(units) > 1:

            def parse(reply: str) -> list[Entailment | None]:
                got = parse_entailments(reply, texts)
                if not any(got):
                    raise DocLensParseError("no entry matched any of the claims")
                return got

            turns = entailment_messages(premise, texts, document_label=label, stance=self.stance)
            got, batch_error = await self.ask(
                turns, parse, "one JSON list with one object per claim"
            )
            for position, entailment in enumerate(got or []):
                if entailment is not None:
                    found[position] = _from_entailment(entailment)
        missing = [i for i, v in enumerate(found) if v is None]
        singles = await asyncio.gather(
            *(self._one_claim(premise, texts[i], label) for i in missing)
        )
        for position, verdict in zip(missing, singles, strict=True):
            if verdict.verdict == FAILED and batch_error:
                verdict.error = f"{verdict.error}; batch call: {batch_error}"
            found[position] = verdict
        return [v for v in found if v is not None]

    async def statement(self, unit: Unit) -> UnitVerdict:
        """Citation verdict of one statement: joint entailment and the supporting citations."""
        if unit.fixed is not None:
            return unit.fixed
        citations = unit.citations

        def parse(reply: str) -> Entailment:
            entailment = parse_entailment(reply)
            named = [c for c in entailment.supporting if c in citations]
            if entailment.entailed and len(citations) > 1 and not named:
                raise DocLensParseError(
                    "the sentence is judged entailed but no cited unit is named as supporting"
                )
            entailment.supporting = named
            return entailment

        turns = citation_messages(unit.text, unit.cited, stance=self.stance)
        got, error = await self.ask(
            turns, parse, 'one JSON object {"explanation", "supporting", "entailed"}'
        )
        if got is None:
            return _failed(error or "no verdict")
        verdict = _from_entailment(got)
        if got.entailed:
            verdict.supporting = list(citations) if len(citations) == 1 else got.supporting
        return verdict


class NLIJudge:
    """Entailment by an NLI model: claims against a premise, statements with the necessary-
    citation rule (each citation alone, and the others without it).

    Args:
        settings: DocLens settings naming the model.
        ctx: The sample whose ``calls`` record each forward pass (role ``nli``).
    """

    _lock = threading.Lock()

    def __init__(self, settings: DocLensSettings, ctx: SampleContext | None = None):
        from clinjudge.judges._nli import load_nli

        self._ctx = ctx
        self._name = settings.nli_model or ""
        self.threshold = settings.nli_threshold
        self.model = load_nli(
            settings.nli_model or "",
            device=settings.nli_device,
            max_length=settings.nli_max_length,
            stride=settings.nli_stride,
            batch_size=settings.nli_batch_size,
            truncate=settings.nli_truncate_words,
        )

    def _probs_sync(self, premises: list[str], hypotheses: list[str]) -> list[float]:
        with self._lock:
            return self.model.entailment_probs(premises, hypotheses)

    async def _probs(self, premises: list[str], hypotheses: list[str]) -> list[float]:
        started, clock = now(), time.perf_counter()
        error = None
        try:
            return await asyncio.to_thread(self._probs_sync, premises, hypotheses)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
            raise
        finally:
            if self._ctx is not None:
                self._ctx.record_local_call(
                    NLI_AGENT, NLI_AGENT, self._name, started=started,
                    latency_s=time.perf_counter() - clock, error=error,
                )  # fmt: skip

    def _verdict(self, prob: float) -> UnitVerdict:
        verdict = ENTAILED if prob >= self.threshold else NOT_ENTAILED
        return UnitVerdict(verdict, f"NLI P(entailment) = {prob:.3f}", prob)

    async def claims(self, units: Sequence[Unit], premise: str, label: str) -> list[UnitVerdict]:
        """Verdicts for claims against one premise."""
        if not units:
            return []
        try:
            probs = await self._probs([premise] * len(units), [u.text for u in units])
        except Exception as exc:  # noqa: BLE001 - a model error fails these judgments only
            return [_failed(f"nli: {exc}") for _ in units]
        return [self._verdict(p) for p in probs]

    async def statement(self, unit: Unit) -> UnitVerdict:
        """Citation verdict of one statement by the two-condition rule."""
        if unit.fixed is not None:
            return unit.fixed
        citations = list(unit.citations)
        try:
            (joint,) = await self._probs([" ".join(unit.cited.values())], [unit.text])
            verdict = self._verdict(joint)
            if verdict.verdict != ENTAILED:
                return verdict
            if len(citations) == 1:
                verdict.supporting = citations
                return verdict
            alone_probs = await self._probs(
                [unit.cited[c] for c in citations], [unit.text] * len(citations)
            )
            alone = {c: p >= self.threshold for c, p in zip(citations, alone_probs, strict=True)}
            others = [c for c in citations if not alone[c]]
            rest = [" ".join(t for n, t in unit.cited.items() if n != c) for c in others]
            rest_probs = await self._probs(rest, [unit.text] * len(others)) if others else []
            without = {c: p >= self.threshold for c, p in zip(others, rest_probs, strict=True)}
        except Exception as exc:  # noqa: BLE001 - a model error fails this judgment only
            return _failed(f"nli: {exc}")
        verdict.supporting = counted_citations(citations, True, alone, without)
        return verdict


Judge = LLMJudge | NLIJudge


def _statement_unit(position: int, statement: Statement, source: NumberedSource) -> Unit:
    note = "citations borrowed from the next cited sentence" if statement.borrowed else None
    unit = Unit(CITATION, position, statement.text, statement.citations, note=note)
    if not statement.citations:
        unit.fixed = UnitVerdict(NOT_ENTAILED, "the sentence cites no source unit", 0.0)
        return unit
    unknown = [c for c in statement.citations if c not in source.units]
    if unknown:
        unit.fixed = UnitVerdict(
            NOT_ENTAILED, f"cites unknown source unit(s) {unknown}; counted as unsupported", 0.0
        )
        return unit
    unit.cited = {c: source.units[c] for c in statement.citations}
    return unit


async def plan_sample(ctx: SampleContext, extractor: LLMJudge) -> Plan:
    """Extract claims and split statements for one sample.

    Args:
        ctx: The sample's context.
        extractor: Who extracts the claims.
    """
    item, settings = ctx.item, ctx.config.doclens
    output = remove_citations(item.summary)
    reference = remove_citations(item.reference or "")
    tasks: dict[str, Awaitable[tuple[list[str] | None, str | None]]] = {
        "output": extractor.extract(output)
    }
    if reference.strip():
        tasks["reference"] = extractor.extract(reference)
    results = dict(zip(tasks, await asyncio.gather(*tasks.values()), strict=True))
    reference_claims, reference_error = results.get("reference", ([], None))
    output_claims, output_error = results["output"]
    units = [Unit(RECALL, i, c) for i, c in enumerate(reference_claims or [])]
    units += [Unit(PRECISION, i, c) for i, c in enumerate(output_claims or [])]
    if settings.citations:
        source = source_units(item.notes, settings)
        statements = output_statements(item.summary, settings)
        units += [_statement_unit(i, s, source) for i, s in enumerate(statements)]
    extraction = {
        "reference": (None if reference_claims is None else len(reference_claims), reference_error),
        "output": (None if output_claims is None else len(output_claims), output_error),
    }
    section = str(item.meta.get("section") or DEFAULT_SECTION)
    return Plan(section, output, reference, units, extraction, settings.citations)


async def judge_plan(judge: Judge, plan: Plan) -> Verdicts:
    """Every unit of a plan judged by one judge."""
    recall, precision = plan.of(RECALL), plan.of(PRECISION)
    statements = plan.of(CITATION)
    results = await asyncio.gather(
        judge.claims(recall, plan.output, _OUTPUT_LABEL),
        judge.claims(precision, plan.reference, _REFERENCE_LABEL),
        *(judge.statement(u) for u in statements),
    )
    verdicts: Verdicts = {}
    for unit, verdict in zip(recall + precision, [*results[0], *results[1]], strict=True):
        verdicts[unit.key] = verdict
    for unit, verdict in zip(statements, results[2:], strict=True):
        verdicts[unit.key] = verdict  # type: ignore[assignment]
    return verdicts


def _claim_note(tally: Tally, what: str) -> str:
    note = f"{tally.hits}/{tally.total} {what}"
    if tally.failed:
        note += f"; {tally.failed} judgment(s) failed (counted as not entailed)"
    return note


def tallies(plan: Plan, verdicts: Verdicts) -> dict[str, Tally | None]:
    """Per-instance tallies of the four metrics (None where extraction failed)."""
    result: dict[str, Tally | None] = {}
    for kind, source, key in (
        (RECALL, "reference", "claim_recall"),
        (PRECISION, "output", "claim_precision"),
    ):
        if plan.extraction[source][1] is not None:
            result[key] = None
        else:
            result[key] = claim_tally([verdicts[u.key].verdict for u in plan.of(kind)])
    if not plan.citations:
        result["citation_recall"] = result["citation_precision"] = None
        return result
    statements = plan.of(CITATION)
    recall, precision = citation_tallies(
        [verdicts[u.key].verdict for u in statements],
        [len(u.citations) for u in statements],
        [len(verdicts[u.key].supporting) for u in statements],
    )
    result["citation_recall"], result["citation_precision"] = recall, precision
    return result


def sample_verdict(plan: Plan, verdicts: Verdicts, transcript: Transcript) -> SampleVerdict:
    """The sample's four proportions, with counts in the rationales and failures in the error."""
    counts = tallies(plan, verdicts)
    what = {
        "claim_recall": "reference claims entailed by the output",
        "claim_precision": "output claims entailed by the reference",
        "citation_recall": "output statements entailed by their citations",
        "citation_precision": "citations needed",
    }
    values: dict[str, float | None] = {}
    rationales: dict[str, str] = {}
    for key, description in what.items():
        tally = counts.get(key)
        values[key] = tally.value if tally is not None else None
        if tally is None and key.startswith("citation"):
            rationales[key] = "citations not evaluated (doclens.citations is off)"
        elif tally is None:
            source = "reference" if key == "claim_recall" else "output"
            rationales[key] = f"{source} claims could not be extracted"
        else:
            rationales[key] = _claim_note(tally, description)
    problems = [
        f"{source} extraction failed: {error}"
        for source, (_, error) in plan.extraction.items()
        if error is not None
    ]
    failed = sum(1 for v in verdicts.values() if v.verdict == FAILED)
    if failed:
        problems.append(f"{failed} entailment judgment(s) failed")
    status = "ok"
    if all(v is None for v in values.values()) and problems:
        status = "failed"
    return SampleVerdict(
        status,
        values=values,  # type: ignore[arg-type]  # proportions, not integer scores
        rationales=rationales,
        rationale=f"DocLens, section {plan.section}: {len(verdicts)} judgments",
        error="; ".join(problems) or None,
        transcript=[turn for _, turn in transcript],
    )


def claim_rows(
    ctx: SampleContext, agent: str, plan: Plan, verdicts: Verdicts, *, extraction: bool = True
) -> list[dict[str, Any]]:
    """``claims`` rows of one agent: every unit with its verdict, plus the extraction rows."""
    base = {"run_id": ctx.run_id, "item_id": ctx.item.id, "sample": ctx.sample, "agent": agent}
    rows: list[dict[str, Any]] = []
    if extraction:
        for idx, (source, (count, error)) in enumerate(sorted(plan.extraction.items())):
            rows.append(
                {
                    **base,
                    "kind": EXTRACTION,
                    "idx": idx,
                    "section": plan.section,
                    "text": source,
                    "score": count,
                    "status": "failed" if error else "ok",
                    "error": error,
                }
            )
    for unit in plan.units:
        verdict = verdicts[unit.key]
        explanation = verdict.explanation
        if unit.note:
            explanation = f"{explanation} ({unit.note})" if explanation else unit.note
        row = {
            **base,
            "kind": unit.kind,
            "idx": unit.idx,
            "section": plan.section,
            "text": unit.text,
            "verdict": verdict.verdict,
            "score": verdict.score,
            "explanation": explanation,
            "status": "failed" if verdict.verdict == FAILED else "ok",
            "error": verdict.error,
        }
        if unit.kind == CITATION:
            row["citations"] = json.dumps(list(unit.citations))
            row["supporting"] = json.dumps(verdict.supporting)
        rows.append(row)
    return rows


def _stance(persona: Persona) -> str:
    return (
        f"You are {persona.display_name}, a physician reviewer on a panel. Your reviewing "
        f"stance: {persona.description.strip()} Apply it to the facts only; never bend a "
        "verdict against clear evidence."
    )


def _extractor(ctx: SampleContext, transcript: Transcript, agent: str, role: str) -> LLMJudge:
    return LLMJudge(ctx, agent, role, transcript)


def _result(
    ctx: SampleContext,
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


async def doclens_single(ctx: SampleContext) -> WorkflowResult:
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
        return _failed(f"every member failed: {errors}")
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
    return decided


async def _member_votes(
    ctx: SampleContext, plan: Plan, personas: Sequence[Persona], transcript: Transcript
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


def _panel_personas(ctx: SampleContext) -> list[Persona]:
    return _personas_of(ctx.config)


async def doclens_panel(ctx: SampleContext) -> WorkflowResult:
    """Each persona judges every claim; the majority decides (ties: not entailed)."""
    transcript: Transcript = []
    plan = await plan_sample(ctx, _extractor(ctx, transcript, EXTRACTOR_AGENT, "extractor"))
    if ctx.config.doclens.nli_model:
        verdicts = await judge_plan(NLIJudge(ctx.config.doclens, ctx), plan)
        return _result(ctx, PANEL_AGENT, plan, verdicts, transcript)
    members, _ = await _member_votes(ctx, plan, _panel_personas(ctx), transcript)
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
    ctx: SampleContext,
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
    shape = 'one JSON list of {"id", "explanation", "entailed"} objects'
    context = _context(plan)
    for round_number in range(1, ctx.config.rounds + 1):
        for name, judge in judges.items():  # round-robin: later speakers hear earlier ones
            turns = discussion_messages(
                context, _dispute_payload(disputed, arguments), stance=judge.stance
            )
            got, _ = await judge.ask(turns, lambda t: parse_keyed(t, ids), shape)
            for key, entailment in (got or {}).items():
                arguments[key].append(_argument(name, f"round {round_number}", entailment))
    chair = LLMJudge(ctx, ORCHESTRATOR_AGENT, "orchestrator", transcript)
    turns = decision_messages(context, _dispute_payload(disputed, arguments))
    got, error = await chair.ask(
        turns,
        lambda t: parse_keyed(t, ids),
        'one JSON list of {"id", "explanation", "supporting", "entailed"} objects',
    )
    decided: Verdicts = {}
    for unit in disputed:
        entailment = (got or {}).get(unit.key)
        if entailment is None:
            decided[unit.key] = _failed(
                f"orchestrator gave no verdict: {error or 'id missing from its reply'}"
            )
            continue
        verdict = _from_entailment(entailment)
        if entailment.entailed:
            named = [c for c in entailment.supporting if c in unit.citations]
            verdict.supporting = list(unit.citations) if len(unit.citations) == 1 else named
        decided[unit.key] = verdict
    return decided


async def doclens_magentic(ctx: SampleContext) -> WorkflowResult:
    """Personas judge independently; the orchestrator decides the disputed claims after a
    moderated discussion."""
    transcript: Transcript = []
    plan = await plan_sample(ctx, _extractor(ctx, transcript, EXTRACTOR_AGENT, "extractor"))
    if ctx.config.doclens.nli_model:
        verdicts = await judge_plan(NLIJudge(ctx.config.doclens, ctx), plan)
        return _result(ctx, ORCHESTRATOR_AGENT, plan, verdicts, transcript)
    members, judges = await _member_votes(ctx, plan, _panel_personas(ctx), transcript)
    decided = _decide_by_majority(plan, members)
    disputed = _disputed(plan, members)
    if disputed:
        decided.update(await _discuss(ctx, plan, disputed, members, judges, transcript))
    return _result(ctx, ORCHESTRATOR_AGENT, plan, decided, transcript, members)


register_claims_workflow("single", JUDGE_AGENT, doclens_single)
register_claims_workflow("panel", PANEL_AGENT, doclens_panel)
register_claims_workflow("magentic", ORCHESTRATOR_AGENT, doclens_magentic)


def doclens_estimate_prompts(item: Item, config: RunConfig) -> list[list[ChatTurn]]:
    """Representative prompts of one DocLens sample, for ``--dry-run`` and budget estimates.

    Claims are not known before extraction, so each text's sentences stand in for its claims;
    panel modes repeat the entailment prompts once per persona (the magentic discussion comes
    on top and is not estimated).

    Args:
        item: The item.
        config: The run configuration (mode, personas, DocLens settings).
    """
    settings = config.doclens
    output = remove_citations(item.summary)
    reference = remove_citations(item.reference or "")
    limits = {"min_claims": settings.min_claims, "max_claims": settings.max_claims}
    prompts = [extraction_messages(output, **limits)]
    if reference.strip():
        prompts.append(extraction_messages(reference, **limits))
    judging: list[list[ChatTurn]] = []
    if not settings.nli_model:
        for premise, text, label in (
            (output, reference, _OUTPUT_LABEL),
            (reference, output, _REFERENCE_LABEL),
        ):
            stand_in = [s.text for s in split_statements(text)][: settings.max_claims]
            if stand_in:
                judging.append(entailment_messages(premise, stand_in, document_label=label))
        if settings.citations:
            source = source_units(item.notes, settings)
            for position, statement in enumerate(output_statements(item.summary, settings)):
                unit = _statement_unit(position, statement, source)
                if unit.fixed is None:
                    judging.append(citation_messages(unit.text, unit.cited))
    members = 1 if config.mode == "single" else max(len(_personas_of(config)), 1)
    return prompts + judging * members


def _personas_of(config: RunConfig) -> list[Persona]:
    from clinjudge.orchestration._panel import panel_personas

    return panel_personas(config.personas)


def check_doclens_config(config: RunConfig) -> None:
    """Fail before anything is written when the DocLens settings cannot work (for
    ``prepare_run`` with a claim rubric): loads the NLI model once, so a bad path or a model
    without an entailment label is a configuration error, not a crash mid-run.

    Args:
        config: The run configuration.

    Raises:
        ConfigError: The NLI model cannot be loaded or used.
    """
    settings = config.doclens
    if not settings.nli_model:
        return
    from clinjudge.judges._nli import NLIError, load_nli

    try:
        load_nli(settings.nli_model, device=settings.nli_device)
    except NLIError as exc:
        raise ConfigError(f"doclens.nli_model: {exc}") from exc
