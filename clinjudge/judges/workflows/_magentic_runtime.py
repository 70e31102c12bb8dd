"""The agent runtime a magentic discussion runs on: AutoGen's single-threaded runtime, without
paying for telemetry and logs nobody receives.

AutoGen 0.7.5's ``SingleThreadedAgentRuntime`` opens an OpenTelemetry span for every message it
sends, publishes and delivers, builds the span attributes first (the sender and recipient agents
looked up, the whole message serialised to JSON), serialises every message once more for its
``autogen_core.events`` log record and formats every published message (its ``repr``) into an
``autogen_core`` info line, whether or not anyone traces or listens. In a discussion that was
about a quarter of the process's CPU (bench/mode_cpu.py). When no tracer provider is set
(OpenTelemetry's default proxy, or ``AUTOGEN_DISABLE_RUNTIME_TRACING=true``), spans are
non-recording anyway; this runtime then skips the spans and their attributes, serialises a
message for the event log only when that logger is enabled, and publishes without the info line
when ``autogen_core`` does not log at info level. With a tracer provider set it is the stock
runtime.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Mapping
from importlib.metadata import version
from typing import Any

from autogen_core import (
    EVENT_LOGGER_NAME,
    ROOT_LOGGER_NAME,
    AgentId,
    CancellationToken,
    SingleThreadedAgentRuntime,
    TopicId,
)
from autogen_core._single_threaded_agent_runtime import PublishMessageEnvelope
from autogen_core._telemetry import get_telemetry_envelope_metadata
from autogen_core.logging import DeliveryStage, MessageEvent, MessageKind
from opentelemetry import trace

__all__ = ["DiscussionRuntime", "runtime_traced"]

_EVENTS = logging.getLogger(EVENT_LOGGER_NAME)
_CORE = logging.getLogger(ROOT_LOGGER_NAME)
_PUBLISH_AS_0_7_5 = version("autogen-core") == "0.7.5"
"""Our publish_message repeats AutoGen 0.7.5's; any other version publishes with its own."""


def runtime_traced() -> bool:
    """Whether AutoGen's runtime spans would be recorded: a tracer provider has been set
    (``opentelemetry.trace.set_tracer_provider``) and AutoGen's own switch does not turn
    them off."""
    if os.environ.get("AUTOGEN_DISABLE_RUNTIME_TRACING") == "true":
        return False
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


class _NoSpans:
    """Stands in for the runtime's ``TraceHelper``: every block runs under no span at all, as it
    would under a non-recording one."""

    _block: contextlib.nullcontext[trace.Span] = contextlib.nullcontext(trace.INVALID_SPAN)

    def trace_block(self, *args: Any, **kwargs: Any) -> contextlib.nullcontext[trace.Span]:
        return self._block


class DiscussionRuntime(SingleThreadedAgentRuntime):
    """AutoGen's single-threaded runtime (background exceptions surface, as in a team's own
    runtime) that skips telemetry no one records; see the module docstring."""

    def __init__(self) -> None:
        self._traced = runtime_traced()
        provider = trace.get_tracer_provider() if self._traced else None
        super().__init__(tracer_provider=provider, ignore_unhandled_exceptions=False)
        if not self._traced:
            self._tracer_helper = _NoSpans()  # type: ignore[assignment]

    async def _create_otel_attributes(self, *args: Any, **kwargs: Any) -> Mapping[str, str]:
        if not self._traced:
            return {}  # only ever handed to a span
        return await super()._create_otel_attributes(*args, **kwargs)

    def _try_serialize(self, message: Any) -> str:
        # The payload of an event-log record (and of span attributes, skipped above).
        if self._traced or _EVENTS.isEnabledFor(logging.INFO):
            return super()._try_serialize(message)
        return ""

    async def publish_message(
        self,
        message: Any,
        topic_id: TopicId,
        *,
        sender: AgentId | None = None,
        cancellation_token: CancellationToken | None = None,
        message_id: str | None = None,
    ) -> None:
        if self._traced or not _PUBLISH_AS_0_7_5 or _CORE.isEnabledFor(logging.INFO):
            await super().publish_message(
                message,
                topic_id,
                sender=sender,
                cancellation_token=cancellation_token,
                message_id=message_id,
            )
            return
        # AutoGen 0.7.5's publish_message less its span and its info line (which formats the
        # whole message, then is dropped): the same event record (when logged) and envelope.
        if cancellation_token is None:
            cancellation_token = CancellationToken()
        if message_id is None:
            message_id = str(uuid.uuid4())
        if _EVENTS.isEnabledFor(logging.INFO):
            _EVENTS.info(
                MessageEvent(
                    payload=self._try_serialize(message),
                    sender=sender,
                    receiver=topic_id,
                    kind=MessageKind.PUBLISH,
                    delivery_stage=DeliveryStage.SEND,
                )
            )
        await self._message_queue.put(
            PublishMessageEnvelope(
                message=message,
                cancellation_token=cancellation_token,
                sender=sender,
                topic_id=topic_id,
                metadata=get_telemetry_envelope_metadata(),
                message_id=message_id,
            )
        )
