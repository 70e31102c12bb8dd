"""The ``mock/`` provider: simulated judge replies for trying clinjudge without a key.

Replies follow the rubric's JSON contract and are a pure function of the request, so runs are
reproducible. The scores are simulated, not judgments; every run made with this provider is
marked as such in the database, exports and reports.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from autogen_core.models import CreateResult, LLMMessage, RequestUsage

from clinjudge.judges._accounting import count_message_tokens, count_tokens
from clinjudge.judges._base_client import SimpleChatCompletionClient, message_text
from clinjudge.judges._mock_doclens import simulated_doclens_reply
from clinjudge.rubrics import Attribute, Rubric

SIMULATED_NOTICE = "SIMULATED SCORES (mock provider): not judgments of any model or person."


def _draw(attribute: Attribute, rng: random.Random) -> int:
    if attribute.max - attribute.min == 1:
        return attribute.min if rng.random() < 0.8 else attribute.max
    # Lean toward the upper-middle of the scale, as real judges of decent summaries do.
    span = list(attribute.values)
    weights = [1 + i for i in range(len(span))]
    weights[-1] = max(1, weights[-1] - 2)
    return rng.choices(span, weights=weights)[0]


def simulated_scores(rubric: Rubric, seed_text: str) -> dict[str, int | None]:
    """Deterministic rubric-valid scores for a request.

    Args:
        rubric: The rubric whose contract the reply follows.
        seed_text: Text the draw is derived from (the request).
    """
    digest = hashlib.sha256(seed_text.encode("utf-8")).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    values: dict[str, int | None] = {a.key: _draw(a, rng) for a in rubric.attributes}
    for attribute in rubric.attributes:
        gate = attribute.gate
        if gate is not None and values[gate.attribute] == gate.null_when:
            values[attribute.key] = None
    return values


class MockChatCompletionClient(SimpleChatCompletionClient):
    """Simulated judge that answers every request with valid rubric JSON.

    Args:
        rubric: The rubric to answer for.
        name: The model name after ``mock/``; part of the draw, so two mock judges differ.
    """

    def __init__(self, rubric: Rubric, name: str = "judge") -> None:
        super().__init__()
        self._rubric = rubric
        self._name = name

    async def _complete(
        self,
        messages: Sequence[LLMMessage],
        json_output: Any,
        extra: Mapping[str, Any],
        tools: Sequence[Any] = (),
    ) -> CreateResult:
        texts = [message_text(m) for m in messages]
        seed = extra.get("seed", "")
        # DocLens prompts (claim rubrics) get their own simulated answers; the rest rubric JSON.
        content = simulated_doclens_reply(texts, f"{self._name}|{seed}")
        if content is None:
            content = self._rubric_reply(f"{self._name}|{seed}|{texts[-1] if texts else ''}")
        usage = RequestUsage(
            prompt_tokens=count_message_tokens(texts), completion_tokens=count_tokens(content)
        )
        return CreateResult(finish_reason="stop", content=content, usage=usage, cached=False)

    def _rubric_reply(self, seed_text: str) -> str:
        reply: dict[str, Any] = dict(simulated_scores(self._rubric, seed_text))
        reply["rationale"] = f"{SIMULATED_NOTICE} No clinical reasoning was performed."
        return json.dumps(reply)
