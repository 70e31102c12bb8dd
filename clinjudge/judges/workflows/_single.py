"""Single-judge workflow: one rendered prompt, one reply, bounded repair, a verdict."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from clinjudge._util.identity_memo import IdentityMemo
from clinjudge.errors import UserError
from clinjudge.judges.clients import CallConfig, CallOutcome, ProviderFault, reply_schema_for
from clinjudge.rubrics import (
    ChatTurn,
    Item,
    JudgmentParseError,
    ParsedJudgment,
    Rubric,
    Shot,
    parse_judgment,
    render_messages,
    render_repair,
    shared_reply_schema,
)

REPAIR_MAX_TOKENS = 4096
"""A repair of a reply cut at the token limit asks for more room: double the cut cap, up to
4x the first call's cap and at most this (never below the first call's cap)."""


class CallFn(Protocol):
    """Sends a conversation to the model (with retries) and returns the reply.

    ``config`` says what the call asks for beyond the model's settings: the reply schema, and
    a cap on generated tokens instead of the model's (a repair of a reply cut at the limit).
    The runner adds the sample's variation.
    """

    def __call__(self, turns: list[ChatTurn], config: CallConfig, /) -> Awaitable[CallOutcome]: ...


_JUDGE_CALLS: IdentityMemo[CallConfig] = IdentityMemo()


def judge_call_config(rubric: Rubric, *, explanations: bool = False) -> CallConfig:
    """The call a single judge makes (and a batch request line carries): replies follow the
    rubric's schema, under the model's own cap. Built once per rubric object.

    Args:
        rubric: The rubric.
        explanations: Ask for an explanation with every score.
    """

    def build() -> CallConfig:
        schema = shared_reply_schema(rubric, explanations=explanations)
        return CallConfig(schema=reply_schema_for(rubric.name, schema, shared=True))

    return _JUDGE_CALLS.get(rubric, explanations, build)


@dataclass
class SampleVerdict:
    """Result of judging one item once.

    Args:
        status: ``ok`` or ``failed``.
        values: Scores per key when ok.
        rationales: Per-key explanations the judge gave.
        rationale: Overall rationale the judge gave.
        error: Why the sample failed.
        raw_text: Last reply text, kept for failed samples.
        transcript: Every turn sent and received, in order.
        coerced: Scores the judge gave where the rubric's gate says null, stored as null.
        notes: What reading the reply had to decide (stored as a ``reply_ambiguous`` flag).
    """

    status: str
    values: dict[str, int | None] = field(default_factory=dict)
    rationales: dict[str, str] = field(default_factory=dict)
    rationale: str | None = None
    error: str | None = None
    raw_text: str | None = None
    transcript: list[ChatTurn] = field(default_factory=list)
    coerced: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def judged(cls, parsed: ParsedJudgment, transcript: list[ChatTurn]) -> SampleVerdict:
        """The verdict of a reply that parsed.

        Args:
            parsed: The parsed reply.
            transcript: Every turn sent and received, the reply last.
        """
        return cls(
            "ok",
            values=parsed.values,
            rationales=parsed.rationales,
            rationale=parsed.rationale,
            transcript=transcript,
            coerced=parsed.coerced,
            notes=parsed.notes,
        )


def draw_shots(pool: Sequence[Shot], k: int, *, seed: int, item_id: str, sample: int) -> list[Shot]:
    """Draw k examples reproducibly for one (item, sample), never the item itself.

    Args:
        pool: Candidate examples with human scores.
        k: How many to draw.
        seed: Run seed.
        item_id: The item being judged (excluded from its own examples).
        sample: Sample number, so repeated samples see different examples.
    """
    if k <= 0:
        return []
    candidates = [shot for shot in pool if shot.item.id != item_id]
    if len(candidates) < k:
        raise UserError(
            f"shot pool has {len(candidates)} usable examples for {item_id!r}, need {k}"
        )
    digest = hashlib.sha256(f"{seed}|{item_id}|{sample}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big")).sample(candidates, k)


def reply_problem(problem: str, finish_reason: str | None, max_tokens: int | None = None) -> str:
    """Why a reply was rejected, noting truncation at the token limit.

    Args:
        problem: What the parser found wrong.
        finish_reason: The provider's finish reason for the reply.
        max_tokens: The cap on generated tokens the call was sent with, when known.
    """
    if finish_reason == "length":
        cap = "" if max_tokens is None else f"max_tokens {max_tokens}, "
        return f"reply truncated at the token limit ({cap}finish_reason=length); {problem}"
    return problem


def repair_max_tokens(cut: int | None, first: int | None) -> int | None:
    """The cap for re-asking after a reply was cut at ``cut`` tokens: twice as many, up to 4x
    the first call's cap and :data:`REPAIR_MAX_TOKENS` (a greedy model given the same cap
    would only write the same cut-off reply again).

    Args:
        cut: The cap the truncated reply hit (None: unknown, the model's own setting stays).
        first: The cap of the sample's first call.
    """
    if cut is None:
        return None
    first = first or cut
    ceiling = max(first, min(4 * first, REPAIR_MAX_TOKENS))
    return max(min(2 * cut, ceiling), cut)


def first_turns(
    item: Item,
    rubric: Rubric,
    shots: list[Shot] | None = None,
    *,
    explanations: bool = False,
    system_prefix: str | None = None,
    evidence: str | None = None,
) -> list[ChatTurn]:
    """The opening conversation of a single judge (shared by direct calls and batch requests).

    Args:
        item: The item to judge.
        rubric: The rubric to apply.
        shots: Few-shot examples.
        explanations: Ask for an explanation with every score.
        system_prefix: Text placed before the rubric's system prompt (a persona's instructions).
        evidence: A process reward model's report on the item.
    """
    turns = render_messages(item, rubric, shots, explanations=explanations, evidence=evidence)
    if system_prefix:
        turns[0] = ChatTurn(turns[0].role, f"{system_prefix.strip()}\n\n{turns[0].content}")
    return turns


async def judge_single_sample(
    item: Item,
    rubric: Rubric,
    call: CallFn,
    *,
    shots: list[Shot] | None = None,
    explanations: bool = False,
    max_repairs: int = 1,
    system_prefix: str | None = None,
    evidence: str | None = None,
) -> SampleVerdict:
    """Judge one item once, re-asking up to ``max_repairs`` times when the reply is invalid.

    Args:
        item: The item to judge.
        rubric: The rubric to apply.
        call: Sends a conversation to the model (with retries) and returns the reply; raises
            ProviderFault when the provider keeps failing. After a reply cut at the token limit
            the repair is sent with a larger ``max_tokens`` (:func:`repair_max_tokens`).
        shots: Few-shot examples.
        explanations: Ask for an explanation with every score.
        max_repairs: How many corrective re-asks after an invalid reply.
        system_prefix: Text placed before the rubric's system prompt in the first system turn
            (a panel member's persona instructions).
        evidence: A process reward model's report on the item, shown after the document.
    """
    turns = first_turns(
        item,
        rubric,
        shots,
        explanations=explanations,
        system_prefix=system_prefix,
        evidence=evidence,
    )
    # Every call of this sample (repairs too) asks for replies following the rubric's schema.
    config = judge_call_config(rubric, explanations=explanations)
    # The repair loop runs here, not in a coroutine of its own: one frame less per call.
    outcome: CallOutcome | None = None
    problem = ""
    first_cap: int | None = None
    for _ in range(max_repairs + 1):
        try:
            outcome = await call(list(turns), config)
        except ProviderFault as fault:
            raw = outcome.text if outcome else None
            return SampleVerdict(
                "failed", error=f"provider: {fault.reason}", raw_text=raw, transcript=turns
            )
        first_cap = first_cap or outcome.max_tokens
        turns.append(ChatTurn("assistant", outcome.text))
        try:
            parsed = parse_judgment(outcome.text, rubric)
        except JudgmentParseError as exc:
            problem = reply_problem(str(exc), outcome.finish_reason, outcome.max_tokens)
            truncated = outcome.finish_reason == "length"
            if truncated:
                config = config.capped(repair_max_tokens(outcome.max_tokens, first_cap))
            turns.append(ChatTurn("user", render_repair(problem, rubric, truncated=truncated)))
            continue
        return SampleVerdict.judged(parsed, turns)
    assert outcome is not None
    turns.pop()  # the last repair request was never sent
    return SampleVerdict(
        "failed",
        error=f"invalid reply after {max_repairs} repair(s): {problem}",
        raw_text=outcome.text,
        transcript=turns,
    )
