"""AutoGen ``ChatCompletionClient`` over ``litellm.acompletion``, for every non-OpenAI provider.

autogen-ext 0.7.5 ships no litellm client. This adapter covers chat completion with tools (what
the judges and the PRM tool need); litellm is imported lazily because its import costs seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autogen_core.models import CreateResult, LLMMessage, ModelInfo

from clinjudge.judges._base_client import (
    SimpleChatCompletionClient,
    openai_result,
    to_openai_messages,
    tool_schema,
)


class LiteLLMChatCompletionClient(SimpleChatCompletionClient):
    """Chat completions through litellm.

    Args:
        model: litellm model string, e.g. ``anthropic/claude-sonnet-4-5`` or ``ollama/llama3``.
        model_info: Capabilities reported to AutoGen.
        **litellm_kwargs: Passed to every ``litellm.acompletion`` call (api_base, api_key,
            temperature, top_p, max_tokens, seed, timeout, ...).
    """

    def __init__(self, model: str, model_info: ModelInfo | None = None, **litellm_kwargs: Any):
        super().__init__(model_info)
        # Import now (seconds), not inside the first call, whose timeout and latency it would eat.
        import litellm  # noqa: F401

        self._model = model
        self._kwargs = {k: v for k, v in litellm_kwargs.items() if v is not None}

    async def _complete(
        self,
        messages: Sequence[LLMMessage],
        json_output: Any,
        extra: Mapping[str, Any],
        tools: Sequence[Any] = (),
    ) -> CreateResult:
        import litellm

        litellm.telemetry = False
        kwargs = {**self._kwargs, **extra}
        if json_output is True:
            kwargs["response_format"] = {"type": "json_object"}
        if tools:
            kwargs["tools"] = [tool_schema(t) for t in tools]
        response = await litellm.acompletion(
            model=self._model, messages=to_openai_messages(messages), num_retries=0, **kwargs
        )
        # Zero usage in the result tells the caller to estimate tokens and mark them estimated.
        return openai_result(response.model_dump())
