"""What a model's client is to the call path: one request in (:class:`Generation`), one reply
out (:class:`~clinjudge.judges.clients.Completion`). Every built-in client implements
:class:`ModelClient`; a provider written in the plain form (:meth:`Provider.generate`) gets one
that calls it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from clinjudge.judges.clients._call_config import CallConfig
from clinjudge.judges.clients._completion import Completion
from clinjudge.judges.clients._messages import ChatMessage, wire_messages
from clinjudge.judges.clients._settings import ModelSettings
from clinjudge.judges.clients._structured import OutputMode, ReplySchema
from clinjudge.rubrics import Rubric

GENERIC_MODEL_INFO: dict[str, Any] = {
    "vision": False,
    "function_calling": True,
    "json_output": True,
    "structured_output": False,
    "family": "unknown",
    "multiple_system_messages": False,
}
"""What a model can do, as an agent framework asks (AutoGen's ``ModelInfo`` keys), where
nothing more is known: text only, tools and JSON mode taken."""


class Generation:
    """One request to a model's client.

    Args:
        settings: The model's settings.
        rubric: The run's rubric.
        conversation: The conversation (see :class:`ChatMessage`).
        config: What the call asks for: ``config.schema`` is the JSON Schema the reply must
            follow when ``mode`` is ``json_schema``; ``config.tools`` the tools offered
            (``{"name", "description", "parameters"}``).
        mode: ``json_schema`` (follow ``config.schema``), ``json_object`` (reply with a JSON
            object) or ``off``.
        args: The request's sampling arguments (``temperature``, ``max_tokens``, ``seed``,
            ...): the model's settings, overridden by the call's.
    """

    __slots__ = ("_messages", "args", "config", "conversation", "mode", "rubric", "settings")

    def __init__(
        self,
        settings: ModelSettings,
        rubric: Rubric,
        conversation: Sequence[ChatMessage],
        config: CallConfig,
        mode: OutputMode,
        args: Mapping[str, Any],
    ) -> None:
        self.settings = settings
        self.rubric = rubric
        self.conversation = conversation
        self.config = config
        self.mode = mode
        self.args = args
        self._messages: list[dict[str, Any]] | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation in chat-completions format (``{"role", "content"}`` dicts; an
        agent's tool calls and results as OpenAI's API writes them), made once."""
        if self._messages is None:
            self._messages = wire_messages(self.conversation)
        return self._messages

    @property
    def reply_schema(self) -> ReplySchema | None:
        """The schema the reply must follow where the request is sent in ``json_schema`` mode,
        else None."""
        return self.config.schema if self.mode == "json_schema" else None


class ModelClient:
    """A model's connection: every request of a run goes through :meth:`generate`.

    Attributes:
        model_info: What the model can do, for agents that ask (AutoGen's ``ModelInfo`` keys).
    """

    model_info: Mapping[str, Any] = GENERIC_MODEL_INFO

    async def generate(self, call: Generation) -> Completion:
        """Send one request and return its reply; faults are exceptions (the provider
        classifies them), and the caller bounds the wait.

        Args:
            call: The request.
        """
        raise NotImplementedError

    async def close(self) -> None:
        """Release the client's connections (nothing by default)."""


class ProviderClient(ModelClient):
    """The client of a provider written in the plain form: each request goes to its
    :meth:`~clinjudge.judges.clients.Provider.generate`.

    Args:
        generate: The provider's ``generate``.
    """

    def __init__(self, generate: Callable[[Generation], Awaitable[Completion]]) -> None:
        self._generate = generate

    async def generate(self, call: Generation) -> Completion:
        """The provider's reply to ``call``.

        Args:
            call: The request.
        """
        return await self._generate(call)
