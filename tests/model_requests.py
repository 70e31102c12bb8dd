"""Requests to a model's client built in tests: one :class:`Generation` from a few texts, as the
call path would build it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from clinjudge.judges.clients import (
    PLAIN_CALL,
    CallConfig,
    ChatMessage,
    Completion,
    Generation,
    ModelClient,
    ModelSettings,
)
from clinjudge.judges.clients._structured import OutputMode
from clinjudge.rubrics import Rubric, load_rubric


def conversation(*texts: str | ChatMessage) -> list[ChatMessage]:
    """Messages from texts: a lone text is the user's; with two or more the first is the
    system prompt and the rest the user's (a message passed as one is kept)."""
    messages = []
    for n, text in enumerate(texts):
        if isinstance(text, ChatMessage):
            messages.append(text)
        elif n == 0 and len(texts) > 1:
            messages.append(ChatMessage("system", text))
        else:
            messages.append(ChatMessage("user", text, "user"))
    return messages


def generation(
    messages: Sequence[ChatMessage],
    *,
    config: CallConfig = PLAIN_CALL,
    mode: OutputMode | None = None,
    args: Mapping[str, Any] | None = None,
    settings: ModelSettings | None = None,
    rubric: Rubric | None = None,
) -> Generation:
    """One request: ``mode`` defaults to ``json_schema`` when ``config`` has a schema, to
    ``json_object`` when it asks for JSON, else ``off``."""
    if mode is None:
        mode = "json_schema" if config.schema else "json_object" if config.json_output else "off"
    return Generation(
        settings or ModelSettings(model="mock/test"),
        rubric or load_rubric("pdsqi9"),
        list(messages),
        config,
        mode,
        dict(args or {}),
    )


async def ask(client: ModelClient, *texts: str | ChatMessage, **options: Any) -> Completion:
    """``client``'s reply to the conversation of ``texts`` (see :func:`conversation`)."""
    return await client.generate(generation(conversation(*texts), **options))


def ask_now(client: ModelClient, *texts: str | ChatMessage, **options: Any) -> Completion:
    """:func:`ask` on a new event loop."""
    return asyncio.run(ask(client, *texts, **options))
