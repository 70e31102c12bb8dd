"""The ``mock/`` provider: simulated judge replies for trying clinjudge without a key.

Replies follow the rubric's JSON contract and are a pure function of the request, so runs are
reproducible. The scores are simulated, not judgments; every run made with this provider is
marked as such in the database, exports and reports.
"""

from __future__ import annotations

import hashlib
import json
import random
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from clinjudge._util.modes import SIMULATED_NOTICE
from clinjudge.judges.clients._accounting import count_message_tokens, count_tokens
from clinjudge.judges.clients._client import Generation, ModelClient
from clinjudge.judges.clients._completion import Completion
from clinjudge.judges.clients._messages import ChatMessage
from clinjudge.rubrics import (
    Attribute,
    JudgmentParseError,
    Polarity,
    Rubric,
    median_scores,
    parse_judgment,
)

SimulatedReplies = Callable[[Sequence[str], str], "str | None"]
"""Answers a conversation (its message texts, a request-independent seed) or returns None."""

_SIMULATORS: list[SimulatedReplies] = []


def register_simulated_replies(simulator: SimulatedReplies) -> None:
    """Let a workflow with its own prompts (DocLens) answer them in the mock provider.

    Args:
        simulator: Called with the conversation's message texts and a seed; returns a reply for
            prompts it recognises and None for the rest, which get rubric JSON.
    """
    if simulator not in _SIMULATORS:
        _SIMULATORS.append(simulator)


def _workflow_reply(texts: Sequence[str], seed: str) -> str | None:
    for simulator in _SIMULATORS:
        reply = simulator(texts, seed)
        if reply is not None:
            return reply
    return None


def _draw(attribute: Attribute, rng: random.Random) -> int:
    if attribute.max - attribute.min == 1:
        return attribute.min if rng.random() < 0.8 else attribute.max
    # Lean toward the upper-middle of the scale, as real judges of decent summaries do.
    span = list(attribute.values)
    weights = [1 + i for i in range(len(span))]
    weights[-1] = max(1, weights[-1] - 2)
    return rng.choices(span, weights=weights)[0]


# How far a persona's stance moves each score toward the favourable (+) or unfavourable (-)
# end of its scale; a chair (moderator, orchestrator) stays on the shared draw, in between.
STANCE_SHIFT = {"lenient": 1, "strict": -1, "moderator": 0, "chair": 0, "neutral": 0}
STANCE_MARK = "|stance="


def _shifted(attribute: Attribute, value: int, shift: int) -> int:
    if not shift or attribute.polarity == Polarity.neutral:
        return value
    step = shift if attribute.polarity == Polarity.higher_better else -shift
    return min(max(value + step, attribute.min), attribute.max)


def simulated_scores(
    rubric: Rubric, seed_text: str, stance: str = "neutral"
) -> dict[str, int | None]:
    """Deterministic rubric-valid scores for a request.

    Args:
        rubric: The rubric whose contract the reply follows.
        seed_text: Text the draw is derived from (the request).
        stance: The asking persona's stance: ``lenient`` scores one step toward the favourable
            end of each scale, ``strict`` one step toward the other end, a chair and everyone
            else keep the draw (so a panel spreads high, middle, low on the same item).
    """
    digest = hashlib.sha256(seed_text.encode("utf-8")).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    shift = STANCE_SHIFT.get(stance, 0)
    values: dict[str, int | None] = {
        a.key: _shifted(a, _draw(a, rng), shift) for a in rubric.attributes
    }
    for attribute in rubric.attributes:
        gate = attribute.gate
        if gate is not None and values[gate.attribute] == gate.null_when:
            values[attribute.key] = None
    return values


def _chair_scores(rubric: Rubric, heard: Sequence[str]) -> dict[str, int | None] | None:
    """A simulated chair's decision: per attribute the middle (lower median) of the members'
    scores found in the discussion, so it lands between the high and the low scorer."""
    heard_scores = []
    for text in heard:
        try:
            heard_scores.append(parse_judgment(text, rubric).values)
        except JudgmentParseError:
            continue
    if not heard_scores:
        return None
    middle = median_scores(rubric, heard_scores, middle=statistics.median_low)
    values = {key: None if v is None else int(v) for key, v in middle.items()}
    for attribute in rubric.attributes:
        gate = attribute.gate
        gate_open = gate is not None and values[gate.attribute] != gate.null_when
        if gate_open and values[attribute.key] is None:
            values[attribute.key] = attribute.min  # every member said null, yet the gate is open
    return values


def _item_text(messages: Sequence[ChatMessage], stance: str) -> str:
    """What the draw is derived from: the last message, or for a persona with a stance the first
    user message (the item), which every member of a panel shares."""
    if stance:
        for message in messages:
            if message.role == "user":
                return message.text
    return messages[-1].text if messages else ""


class MockClient(ModelClient):
    """Simulated judge that answers every request with valid rubric JSON.

    Args:
        rubric: The rubric to answer for.
        name: The model name after ``mock/``; part of the draw, so two mock judges differ.
    """

    def __init__(self, rubric: Rubric, name: str = "judge") -> None:
        self._rubric = rubric
        self._name = name

    async def generate(self, call: Generation) -> Completion:
        """A simulated reply to ``call``, drawn from the request and the sample's variation.

        Args:
            call: The request.
        """
        messages = call.conversation
        texts = [m.text for m in messages]
        seed, _, stance = str(call.args.get("seed", "")).partition(STANCE_MARK)
        # Workflows with their own prompts (DocLens) answer them; the rest gets rubric JSON.
        content = _workflow_reply(texts, f"{self._name}|{seed}")
        if content is None:
            item = _item_text(messages, stance)
            content = self._rubric_reply(f"{self._name}|{seed}|{item}", stance, texts[1:])
        return Completion(content, count_message_tokens(texts), count_tokens(content))

    def _rubric_reply(self, seed_text: str, stance: str = "", heard: Sequence[str] = ()) -> str:
        chair = _chair_scores(self._rubric, heard) if stance == "chair" else None
        scores = chair or simulated_scores(self._rubric, seed_text, stance or "neutral")
        reply: dict[str, Any] = dict(scores)
        reply["rationale"] = f"{SIMULATED_NOTICE} No clinical reasoning was performed."
        return json.dumps(reply)
