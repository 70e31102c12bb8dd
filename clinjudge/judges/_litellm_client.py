"""AutoGen ``ChatCompletionClient`` over ``litellm.acompletion``, for every non-OpenAI provider.

autogen-ext 0.7.5 ships no litellm client. This adapter covers plain chat completion (what the
judges need); litellm is imported lazily because its import costs seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autogen_core.models import CreateResult, LLMMessage, ModelInfo, RequestUsage

from clinjudge.judges._base_client import SimpleChatCompletionClient, to_openai_messages

_FINISH_REASONS = {"stop", "length", "function_calls", "content_filter", "unknown"}


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
        response = await litellm.acompletion(
            model=self._model, messages=to_openai_messages(messages), num_retries=0, **kwargs
        )
        choice = response.choices[0]
        content = choice.message.content or ""
        usage = getattr(response, "usage", None)
        # Zero usage tells the caller to estimate tokens and mark them as estimated.
        prompt_tokens = getattr(usage, "prompt_tokens", None) or 0
        completion_tokens = getattr(usage, "completion_tokens", None) or 0
        finish = choice.finish_reason if choice.finish_reason in _FINISH_REASONS else "unknown"
        return CreateResult(
            finish_reason=finish,
            content=content,
            usage=RequestUsage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
            cached=False,
        )
