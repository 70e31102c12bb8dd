"""How one request reaches a provider: the AutoGen form of a call (the request hook's
default), and the plain form a provider may implement instead of an AutoGen client
(:meth:`Provider.generate`, adapted here by :class:`GenerateClient`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clinjudge.judges.clients._base_client import (
    SimpleChatCompletionClient,
    to_openai_messages,
)
from clinjudge.judges.clients._call_config import CallConfig
from clinjudge.judges.clients._completion import Completion
from clinjudge.judges.clients._settings import ModelSettings, sampling_args
from clinjudge.judges.clients._structured import OutputMode
from clinjudge.rubrics import Rubric

if TYPE_CHECKING:
    from autogen_core.models import LLMMessage


def json_flag(config: CallConfig, mode: OutputMode) -> Any:
    """AutoGen's ``json_output`` argument of a call sent in ``mode``.

    Args:
        config: The call.
        mode: The output mode it is sent in.
    """
    if mode == "json_schema" and config.schema is not None:
        return None  # the schema itself goes with the request
    if mode == "json_object":
        return True
    if mode == "off" and isinstance(config.json_output, bool):
        return None
    # A structured-output type (AutoGen's pydantic form) goes on as it came.
    return config.json_output


@dataclass(frozen=True, slots=True)
class Generation:
    """One request to a provider that implements :meth:`Provider.generate`.

    Args:
        settings: The model's settings.
        rubric: The run's rubric.
        messages: The conversation in chat format (``{"role", "content"}`` dicts; an agent's
            tool calls and results as OpenAI's chat API writes them).
        config: What the call asks for: ``config.schema`` is the JSON Schema the reply must
            follow when ``mode`` is ``json_schema``; ``config.tools`` the tools offered.
        mode: ``json_schema`` (follow ``config.schema``), ``json_object`` (reply with a JSON
            object) or ``off``.
        args: The request's sampling arguments (``temperature``, ``max_tokens``, ``seed``,
            ...): the model's settings, overridden by the call's.
    """

    settings: ModelSettings
    rubric: Rubric
    messages: list[dict[str, Any]]
    config: CallConfig
    mode: OutputMode
    args: Mapping[str, Any]


def _mode_of(config: CallConfig) -> OutputMode:
    """The output mode a request in AutoGen's form asks for (what :func:`json_flag` made)."""
    if config.schema is not None:
        return "json_schema"
    return "json_object" if config.json_output is True else "off"


class GenerateClient(SimpleChatCompletionClient):
    """The client of a provider that implements :meth:`Provider.generate`. The call path
    hands it each request as it stands (:meth:`generate`); AutoGen's ``create`` is the
    adapter for callers of AutoGen's interface.

    Args:
        generate: The provider's ``generate``.
        settings: The model's settings.
        rubric: The run's rubric.
    """

    def __init__(
        self,
        generate: Callable[[Generation], Awaitable[Completion]],
        settings: ModelSettings,
        rubric: Rubric,
    ) -> None:
        super().__init__()
        self._generate = generate
        self._settings = settings
        self._rubric = rubric
        self._sampling = sampling_args(settings)

    async def generate(
        self,
        messages: Sequence[LLMMessage],
        config: CallConfig,
        extra: Mapping[str, Any],
        mode: OutputMode,
    ) -> Completion:
        """One request, as the call path has it, through the provider's ``generate``.

        Args:
            messages: The conversation.
            config: What the call asks for (its schema, in ``json_schema`` mode).
            extra: The request arguments worked out for it (no schema among them).
            mode: The output mode it is sent in.
        """
        completion = await self._ask(messages, config, extra, mode)
        self._count(completion.prompt_tokens, completion.completion_tokens)
        return completion

    async def _ask(
        self,
        messages: Sequence[LLMMessage],
        config: CallConfig,
        extra: Mapping[str, Any],
        mode: OutputMode,
    ) -> Completion:
        generation = Generation(
            settings=self._settings,
            rubric=self._rubric,
            messages=to_openai_messages(messages),
            config=config,
            mode=mode,
            args={**self._sampling, **extra},
        )
        return await self._generate(generation)

    async def _complete(
        self,
        messages: Sequence[LLMMessage],
        json_output: Any,
        extra: Mapping[str, Any],
        tools: Sequence[Any] = (),
    ) -> Completion:
        # AutoGen's arguments back into the call's: the schema under its key, the rest extra.
        config = CallConfig.from_create_args(
            tools=tools, json_output=json_output, extra_create_args=extra
        )
        return await self._ask(messages, config, config.extra or {}, _mode_of(config))
