"""Single-judge workflow: one rendered prompt, one reply, bounded repair, a verdict."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from clinjudge.errors import UserError
from clinjudge.judges.clients import CallOutcome, ProviderFault
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
)

CallFn = Callable[[list[ChatTurn]], Awaitable[CallOutcome]]


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
    """

    status: str
    values: dict[str, int | None] = field(default_factory=dict)
    rationales: dict[str, str] = field(default_factory=dict)
    rationale: str | None = None
    error: str | None = None
    raw_text: str | None = None
    transcript: list[ChatTurn] = field(default_factory=list)
    coerced: dict[str, int] = field(default_factory=dict)

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


def _failure_reason(problem: str, outcome: CallOutcome) -> str:
    return reply_problem(problem, outcome.finish_reason)


def reply_problem(problem: str, finish_reason: str | None) -> str:
    """Why a reply was rejected, noting truncation at the token limit.

    Args:
        problem: What the parser found wrong.
        finish_reason: The provider's finish reason for the reply.
    """
    if finish_reason == "length":
        return f"reply truncated at the token limit (finish_reason=length); {problem}"
    return problem


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
            ProviderFault when the provider keeps failing.
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
    outcome: CallOutcome | None = None
    problem = ""
    for _ in range(max_repairs + 1):
        try:
            outcome = await call(list(turns))
        except ProviderFault as fault:
            raw = outcome.text if outcome else None
            return SampleVerdict(
                "failed", error=f"provider: {fault.reason}", raw_text=raw, transcript=turns
            )
        turns.append(ChatTurn("assistant", outcome.text))
        try:
            parsed = parse_judgment(outcome.text, rubric)
        except JudgmentParseError as exc:
            problem = str(exc)
            turns.append(ChatTurn("user", render_repair(problem, rubric)))
            continue
        return SampleVerdict.judged(parsed, turns)
    assert outcome is not None
    turns.pop()  # the last repair request was never sent
    return SampleVerdict(
        "failed",
        error=f"invalid reply after {max_repairs} repair(s): {_failure_reason(problem, outcome)}",
        raw_text=outcome.text,
        transcript=turns,
    )
