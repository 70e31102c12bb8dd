"""Anthropic's Claude models (``anthropic/<model>``) through litellm, and Claude hosted on
Bedrock or Vertex AI: priced with Anthropic's prompt-cache multipliers."""

from __future__ import annotations

from typing import Any

from clinjudge.judges.clients._accounting import listed_cache_prices
from clinjudge.judges.clients._settings import ModelSettings
from clinjudge.judges.clients.providers._registry import register_provider
from clinjudge.judges.clients.providers.litellm import LiteLLMProvider

ANTHROPIC_CACHE_READ = 0.1
ANTHROPIC_CACHE_WRITE = 1.25
"""Anthropic's published multipliers of the input price for prompt-cache reads and (5-minute)
writes, used where litellm's map lists a Claude model without its cache prices (Anthropic's
prompt-caching pricing page, docs.anthropic.com, as of 2025-11)."""


def claude_cache_prices(entry: dict[str, Any], input_price: float) -> tuple[float, float]:
    """Cache read and write prices per token of a Claude model: the map's, else Anthropic's
    multipliers of the input price.

    Args:
        entry: The model's entry in the price map.
        input_price: Its input price per token.
    """
    read = entry.get("cache_read_input_token_cost")
    write = entry.get("cache_creation_input_token_cost")
    listed_read, listed_write = listed_cache_prices(entry, input_price)
    return (
        input_price * ANTHROPIC_CACHE_READ if read is None else listed_read,
        input_price * ANTHROPIC_CACHE_WRITE if write is None else listed_write,
    )


class AnthropicProvider(LiteLLMProvider):
    """Anthropic's API: it caches only the prefix a request marks (clinjudge marks the
    system message)."""

    names = ("anthropic",)
    prefix_cache = "marked"

    def cache_prices(
        self, settings: ModelSettings, entry: dict[str, Any], input_price: float
    ) -> tuple[float, float]:
        """Anthropic's cache prices (see :func:`claude_cache_prices`)."""
        return claude_cache_prices(entry, input_price)


class HostedClaudeProvider(LiteLLMProvider):
    """Bedrock and Vertex AI: their Claude models are priced like Anthropic's."""

    names = ("bedrock", "vertex_ai")

    def cache_prices(
        self, settings: ModelSettings, entry: dict[str, Any], input_price: float
    ) -> tuple[float, float]:
        """Anthropic's cache prices for a Claude model, the map's for any other."""
        if "claude" in settings.name:
            return claude_cache_prices(entry, input_price)
        return listed_cache_prices(entry, input_price)


ANTHROPIC = register_provider(AnthropicProvider())
HOSTED_CLAUDE = register_provider(HostedClaudeProvider())
