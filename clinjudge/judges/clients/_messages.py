"""A conversation in clinjudge's own terms: what every client is sent and the response cache
keys, whichever agent framework (if any) wrote it.

A :class:`ChatMessage` holds what any chat API can be sent (role, text, an agent's tool calls
and their results) plus who said it (``source``), which is never sent but tells two agents'
identical words apart in the response cache. The single judge's rendered turns become
messages with :func:`chat_messages`; the magentic workflow converts its agents' messages at its
own edge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from clinjudge.judges.clients._completion import ToolCall
from clinjudge.rubrics import ChatTurn

Role = Literal["system", "user", "assistant", "tool"]
"""Who a message is from: the instructions, the asking side, the model, or a tool's results."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What one tool call returned.

    Args:
        call_id: The id of the call it answers.
        name: The tool's name.
        content: Its output, as text.
        is_error: Whether the tool failed (None: not said).
    """

    call_id: str
    name: str
    content: str
    is_error: bool | None = None


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a conversation.

    Args:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: Its text (an assistant's text beside tool calls goes in ``thought``).
        source: Who said it: an agent's name, ``user`` for the asking side, empty for system
            and tool messages. Never sent; part of the response-cache key.
        tool_calls: The tools an assistant message calls.
        thought: An assistant's reasoning, or its text beside tool calls.
        results: A tool message's results, one per call answered.
    """

    role: Role
    content: str = ""
    source: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    thought: str | None = None
    results: tuple[ToolResult, ...] = ()

    @property
    def text(self) -> str:
        """Everything the message says, as plain text (what token estimates count)."""
        if self.results:
            return "\n".join(result.content for result in self.results)
        if self.tool_calls:
            return "\n".join(f"{call.name}({call.arguments})" for call in self.tool_calls)
        return self.content


def chat_messages(turns: Sequence[ChatTurn], agent: str = "judge") -> list[ChatMessage]:
    """Rendered turns as messages (a role other than system or assistant is the user's).

    Args:
        turns: The rendered conversation.
        agent: Who speaks in the assistant turns (few-shot answers).
    """
    converted = []
    for turn in turns:
        role = turn.role
        if role == "system":
            converted.append(ChatMessage("system", turn.content))
        elif role == "assistant":
            converted.append(ChatMessage("assistant", turn.content, agent))
        else:
            converted.append(ChatMessage("user", turn.content, "user"))
    return converted


def wire_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Messages in the chat-completions format every OpenAI-style API takes (a tool message
    becomes one ``tool`` message per result; who said a message is not sent).

    Args:
        messages: The conversation.
    """
    converted: list[dict[str, Any]] = []
    for message in messages:
        role = message.role
        if role == "tool":
            converted.extend(
                {"role": "tool", "tool_call_id": r.call_id, "content": r.content}
                for r in message.results
            )
        elif message.tool_calls:
            # The tool results that follow must answer a real tool_calls message.
            converted.append(
                {
                    "role": "assistant",
                    "content": message.thought,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        }
                        for call in message.tool_calls
                    ],
                }
            )
        else:
            converted.append({"role": role, "content": message.content})
    return converted


def tool_schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool offered to the model (``{"name", "description", "parameters"}``) as an entry of
    a chat-completions request's ``tools``.

    Args:
        tool: The tool's name, description and JSON Schema of its parameters.
    """
    return {
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "parameters": tool.get("parameters", {"type": "object", "properties": {}}),
        },
    }
