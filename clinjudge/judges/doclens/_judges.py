"""DocLens judges: an LLM (with repair and per-claim fallback) or an NLI model, and the units
they judge (claims and cited statements) with their verdicts."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from clinjudge._util.timestamps import now
from clinjudge.judges.clients import CallConfig, ProviderFault, ReplySchema, reply_schema_for
from clinjudge.judges.doclens._context import DocLensContext
from clinjudge.judges.doclens._metrics import (
    ENTAILED,
    FAILED,
    NOT_ENTAILED,
    counted_citations,
)
from clinjudge.judges.doclens._parse import (
    DocLensParseError,
    Entailment,
    parse_claims,
    parse_entailment,
    parse_entailments,
)
from clinjudge.judges.doclens._prompts import (
    citation_messages,
    citation_schema,
    claim_messages,
    claim_schema,
    entailment_messages,
    entailment_schema,
    extraction_messages,
    extraction_schema,
    repair_message,
)
from clinjudge.judges.doclens._settings import DocLensSettings
from clinjudge.judges.workflows import CallFn, repair_max_tokens, reply_problem
from clinjudge.rubrics import ChatTurn

RECALL, PRECISION, CITATION, EXTRACTION = "recall", "precision", "citation", "extraction"
EXTRACTOR_AGENT = "extractor"
NLI_AGENT = "nli"
DEFAULT_SECTION = "all"
OUTPUT_LABEL = "generated note"
REFERENCE_LABEL = "reference note"

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
        named: Citations the judge itself named as support (an LLM's ``supporting`` list, the
            NLI rule's result), before our rules; None when the same as ``supporting``. The
            official DocLens arithmetic counts these.
    """

    verdict: str
    explanation: str | None = None
    score: float | None = None
    supporting: list[int] = field(default_factory=list)
    error: str | None = None
    named: list[int] | None = None


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
        official: The citations the official DocLens evaluator counts (statements).
        official_unknown: Whether that list names a source unit that does not exist (the
            official evaluator then scores the statement 0 without judging it).
    """

    kind: str
    idx: int
    text: str
    citations: tuple[int, ...] = ()
    cited: dict[int, str] = field(default_factory=dict)
    fixed: UnitVerdict | None = None
    note: str | None = None
    official: tuple[int, ...] = ()
    official_unknown: bool = False

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


def failed_verdict(error: str) -> UnitVerdict:
    return UnitVerdict(FAILED, error=error)


def verdict_of(entailment: Entailment) -> UnitVerdict:
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
        ctx: DocLensContext,
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
        self.official = self.settings.compat == "official"

    def _log(self, turns: list[ChatTurn]) -> None:
        self.transcript.extend((self.agent, turn) for turn in turns)

    async def ask(
        self,
        turns: list[ChatTurn],
        parse: Callable[[str], T],
        shape: str,
        schema: ReplySchema | None = None,
    ) -> tuple[T | None, str | None]:
        """One conversation with bounded repair; (value, None) or (None, reason).

        Args:
            turns: The rendered messages.
            parse: Reads a reply; raises DocLensParseError when it cannot.
            shape: The expected answer shape, in words, for the repair message.
            schema: The reply's schema, sent as structured output on every call of the
                conversation (the endpoint and ``structured_output`` decide the form).
        """
        config = CallConfig(schema=schema)
        problem = ""
        first_cap: int | None = None
        for _ in range(self.max_repairs + 1):
            try:
                outcome = await self.call(list(turns), config)
            except ProviderFault as fault:
                self._log(turns)
                return None, f"provider: {fault.reason}"
            first_cap = first_cap or outcome.max_tokens
            turns.append(ChatTurn("assistant", outcome.text))
            try:
                value = parse(outcome.text)
            except DocLensParseError as exc:
                # A reply cut at the token limit is re-asked with more room (the same cap would
                # cut a greedy model's reply in the same place again).
                problem = reply_problem(str(exc), outcome.finish_reason, outcome.max_tokens)
                if outcome.finish_reason == "length":
                    config = config.capped(repair_max_tokens(outcome.max_tokens, first_cap))
                turns.append(ChatTurn("user", repair_message(problem, shape)))
                continue
            self._log(turns)
            return value, None
        turns.pop()  # the last repair request was never sent
        self._log(turns)
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
        schema = extraction_schema(settings.min_claims, settings.max_claims)
        return await self.ask(
            turns,
            parse,
            'one JSON object {"claims": [...]}',
            reply_schema_for("doclens_claims", schema),
        )

    async def _one_claim(self, premise: str, claim: str, label: str) -> UnitVerdict:
        turns = claim_messages(premise, claim, document_label=label, stance=self.stance)
        got, error = await self.ask(
            turns,
            parse_entailment,
            'one JSON object {"explanation": ..., "entailed": 1 or 0}',
            reply_schema_for("doclens_claim_verdict", claim_schema()),
        )
        return verdict_of(got) if got is not None else failed_verdict(error or "no verdict")

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
                turns,
                parse,
                'one JSON object {"verdicts": [...]} with one object per claim',
                reply_schema_for("doclens_verdicts", entailment_schema(len(texts))),
            )
            for position, entailment in enumerate(got or []):
                if entailment is not None:
                    found[position] = verdict_of(entailment)
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
            if entailment.entailed and len(citations) > 1 and not named and not self.official:
                raise DocLensParseError(
                    "the sentence is judged entailed but no cited unit is named as supporting"
                )
            entailment.supporting = named
            return entailment

        turns = citation_messages(unit.text, unit.cited, stance=self.stance)
        got, error = await self.ask(
            turns,
            parse,
            'one JSON object {"explanation", "supporting", "entailed"}',
            reply_schema_for("doclens_citation_verdict", citation_schema(list(unit.cited))),
        )
        if got is None:
            return failed_verdict(error or "no verdict")
        verdict = verdict_of(got)
        verdict.named = list(got.supporting)
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

    def __init__(self, settings: DocLensSettings, ctx: DocLensContext | None = None):
        from clinjudge.judges.doclens._nli import load_nli

        self._ctx = ctx
        self._name = settings.nli_model or ""
        self.threshold = settings.nli_threshold
        self.official = settings.compat == "official"
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
            return [failed_verdict(f"nli: {exc}") for _ in units]
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
                verdict.named = list(citations)
                return verdict
            alone_probs = await self._probs(
                [unit.cited[c] for c in citations], [unit.text] * len(citations)
            )
            alone = {c: p >= self.threshold for c, p in zip(citations, alone_probs, strict=True)}
            others = [c for c in citations if not alone[c]]
            # The official evaluator joins the other citations with a newline here (and with
            # a space for the joint premise); a tokenizer may tell the two apart.
            glue = "\n" if self.official else " "
            rest = [glue.join(t for n, t in unit.cited.items() if n != c) for c in others]
            rest_probs = await self._probs(rest, [unit.text] * len(others)) if others else []
            without = {c: p >= self.threshold for c, p in zip(others, rest_probs, strict=True)}
        except Exception as exc:  # noqa: BLE001 - a model error fails this judgment only
            return failed_verdict(f"nli: {exc}")
        verdict.supporting = counted_citations(citations, True, alone, without)
        verdict.named = list(verdict.supporting)
        return verdict


Judge = LLMJudge | NLIJudge
