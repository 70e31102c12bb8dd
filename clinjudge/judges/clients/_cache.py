"""An opt-in response cache: the same request to the same model for the same sample is answered
from the run database instead of the provider, at no cost.

The key is a SHA-256 of the model, its sampling settings, the full request (every message, the
tools offered, JSON mode) and the sample's variation (seed and sample number), so a repeated
sample of a run still gets its own answer. Only text replies are cached.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from autogen_core.models import LLMMessage

from clinjudge.judges.clients._base_client import message_text
from clinjudge.judges.clients._settings import ModelSettings


def _tool_name(tool: Any) -> str:
    schema = getattr(tool, "schema", None)
    if isinstance(schema, dict):
        return json.dumps(schema, sort_keys=True, default=str)
    return str(getattr(tool, "name", tool))


def cache_key(
    settings: ModelSettings,
    messages: Sequence[LLMMessage],
    tools: Sequence[Any],
    json_output: Any,
    variation: str,
) -> str:
    """The cache key of one request.

    Args:
        settings: The model's settings (model name and sampling settings are part of the key).
        messages: The full request.
        tools: Tools offered with it.
        json_output: JSON mode flag.
        variation: Seed and sample number of the sample asking.
    """
    payload = {
        "model": settings.model,
        "sampling": settings.model_dump(
            mode="json",
            include={"temperature", "top_p", "max_tokens", "seed", "reasoning_effort"},
        ),
        "messages": [
            [type(m).__name__, getattr(m, "source", ""), message_text(m)] for m in messages
        ],
        "tools": [_tool_name(t) for t in tools],
        "json_output": json_output if isinstance(json_output, bool | None) else str(json_output),
        "variation": variation,
    }
    encoded = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()


class ResponseCache:
    """Cached replies by key, plus the entries added since the last :meth:`take_new`.

    Args:
        entries: Known replies: key to ``{"text", "finish_reason", "prompt_tokens",
            "completion_tokens", "tokens_estimated"}``.
    """

    def __init__(self, entries: dict[str, dict[str, Any]] | None = None) -> None:
        self._entries = dict(entries or {})
        self._new: list[dict[str, Any]] = []
        self.hits = 0

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached reply for ``key``, if any."""
        entry = self._entries.get(key)
        if entry is not None:
            self.hits += 1
        return entry

    def put(self, key: str, model: str, reply: dict[str, Any]) -> None:
        """Remember a reply (written to the database by the caller of :meth:`take_new`)."""
        if key in self._entries:
            return
        self._entries[key] = reply
        self._new.append(
            {
                "key": key,
                "model": model,
                "created_at": datetime.now(UTC),
                "response": json.dumps(reply),
            }
        )

    def take_new(self) -> list[dict[str, Any]]:
        """Rows of the ``response_cache`` table added since the last call."""
        rows, self._new = self._new, []
        return rows
