"""Token counts and dollar costs for model calls.

Prices come from the price map bundled in the litellm wheel, read as a file so that the CLI does
not pay litellm's multi-second import just to price a call; config can override any model.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from clinjudge.judges.clients._settings import (
    AZURE_PROVIDERS,
    HF_PROVIDERS,
    OPENAI_PROVIDERS,
    ModelSettings,
)

_PRICE_FILE = "model_prices_and_context_window_backup.json"


@cache
def bundled_model_map() -> dict[str, Any]:
    """litellm's bundled model map (prices, context windows), or {} without litellm."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return {}
    path = Path(spec.origin).parent / _PRICE_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def model_map_names(settings: ModelSettings) -> list[str]:
    """Names under which a model may appear in the bundled map (``price_as`` wins)."""
    if settings.price_as:
        return [settings.price_as, settings.price_as.split("/", 1)[-1]]
    return [settings.model, settings.name, f"{settings.provider}/{settings.name}"]


@dataclass(frozen=True)
class TokenPrices:
    """Dollars per token of one model.

    Args:
        input: A prompt token the provider did not serve from its prompt cache.
        output: A generated token.
        cached_input: A prompt token read from the provider's prompt cache.
        cache_write: A prompt token written to the prompt cache (Anthropic).
    """

    input: float
    output: float
    cached_input: float
    cache_write: float

    def cost(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_input_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """Dollars for one call; ``prompt_tokens`` includes the cached and written ones."""
        uncached = max(prompt_tokens - cached_input_tokens - cache_write_tokens, 0)
        return (
            uncached * self.input
            + cached_input_tokens * self.cached_input
            + cache_write_tokens * self.cache_write
            + completion_tokens * self.output
        )

    def cache_saving(self, cached_input_tokens: int, cache_write_tokens: int) -> float:
        """Dollars the prompt cache saved against sending those tokens uncached (negative
        when writes, which cost more than input, outweigh the reads)."""
        return cached_input_tokens * (self.input - self.cached_input) + cache_write_tokens * (
            self.input - self.cache_write
        )


FREE = TokenPrices(0.0, 0.0, 0.0, 0.0)

ANTHROPIC_CACHE_READ = 0.1
ANTHROPIC_CACHE_WRITE = 1.25
"""Anthropic's published multipliers of the input price for prompt-cache reads and (5-minute)
writes, used where litellm's map lists a Claude model without its cache prices (Anthropic's
prompt-caching pricing page, docs.anthropic.com, as of 2025-11)."""


def _cache_prices(
    settings: ModelSettings, entry: dict[str, Any], input_price: float
) -> tuple[float, float]:
    """Cache read and write prices per token from a map entry. A provider that publishes no
    discount for a model gets none here: cached tokens are then priced as ordinary input."""
    read = entry.get("cache_read_input_token_cost")
    write = entry.get("cache_creation_input_token_cost")
    claude_elsewhere = settings.provider in {"bedrock", "vertex_ai"} and "claude" in settings.name
    if settings.provider == "anthropic" or claude_elsewhere:
        read = input_price * ANTHROPIC_CACHE_READ if read is None else read
        write = input_price * ANTHROPIC_CACHE_WRITE if write is None else write
    return (
        input_price if read is None else float(read),
        input_price if write is None else float(write),
    )


def token_prices(settings: ModelSettings) -> TokenPrices | None:
    """The model's prices per token, or None when the model has no known price.

    A ``price`` in the settings wins; its unset cache prices fall back to the input price.
    Otherwise litellm's bundled map supplies all four (its ``cache_read_input_token_cost`` and
    ``cache_creation_input_token_cost``, e.g. gpt-4o-mini $0.075/M cached against $0.15/M).

    Args:
        settings: The model's settings.
    """
    price = settings.price
    if price is not None:
        read = price.cached_input_per_mtok
        write = price.cache_write_input_per_mtok
        return TokenPrices(
            input=price.input_per_mtok / 1e6,
            output=price.output_per_mtok / 1e6,
            cached_input=(price.input_per_mtok if read is None else read) / 1e6,
            cache_write=(price.input_per_mtok if write is None else write) / 1e6,
        )
    if settings.is_mock or settings.provider in HF_PROVIDERS:  # simulated, or run in this process
        return FREE
    prices = bundled_model_map()
    for name in model_map_names(settings):
        entry = prices.get(name)
        if entry and "input_cost_per_token" in entry:
            input_price = float(entry["input_cost_per_token"])
            read, write = _cache_prices(settings, entry, input_price)
            return TokenPrices(
                input=input_price,
                output=float(entry.get("output_cost_per_token", 0.0)),
                cached_input=read,
                cache_write=write,
            )
    return None


def price_per_token(settings: ModelSettings) -> tuple[float, float] | None:
    """Dollars per input and per output token, or None when the model has no known price.

    Args:
        settings: The model's settings (its ``price`` override wins).
    """
    prices = token_prices(settings)
    return None if prices is None else (prices.input, prices.output)


def call_cost(
    settings: ModelSettings,
    prompt_tokens: int,
    completion_tokens: int,
    cached_input_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float | None:
    """Dollar cost of one call, or None when the price is unknown.

    Args:
        settings: The model's settings.
        prompt_tokens: Tokens sent, the cached and cache-written ones included.
        completion_tokens: Tokens generated.
        cached_input_tokens: Of the prompt, tokens read from the provider's prompt cache.
        cache_write_tokens: Of the prompt, tokens written to the prompt cache.
    """
    prices = token_prices(settings)
    if prices is None:
        return None
    return prices.cost(prompt_tokens, completion_tokens, cached_input_tokens, cache_write_tokens)


def cost_at(
    per_token: tuple[float, float] | None, prompt_tokens: int, completion_tokens: int
) -> float | None:
    """Dollars for these tokens at (prompt, completion) prices per token; None if unknown."""
    if per_token is None:
        return None
    return prompt_tokens * per_token[0] + completion_tokens * per_token[1]


COUNT_ENCODING = "o200k_base"
"""The tiktoken encoding every local token count uses (estimates, providers without usage)."""


@cache
def _encoding() -> Any:
    import tiktoken

    return tiktoken.get_encoding(COUNT_ENCODING)


def counts_exactly(settings: ModelSettings) -> bool:
    """Whether :func:`count_tokens` counts with the model's own tokenizer: an OpenAI model
    (``openai/``, ``azure/``; ``price_as`` names a deployment's model) that tiktoken maps to
    :data:`COUNT_ENCODING`. Other models' tokenizers are unknown here, so their counts are
    approximate (a local model's own tokenizer may count 10-20% more).

    Args:
        settings: The model's settings.
    """
    from tiktoken.model import encoding_name_for_model

    if settings.provider not in OPENAI_PROVIDERS | AZURE_PROVIDERS:
        return False
    name = (settings.price_as or settings.name).rsplit("/", 1)[-1]
    try:
        return encoding_name_for_model(name) == COUNT_ENCODING
    except KeyError:
        return False


def count_tokens(text: str) -> int:
    """Approximate token count with tiktoken's o200k_base (for providers that omit usage).

    Args:
        text: Text to count.
    """
    return len(_encoding().encode(text, disallowed_special=()))


def count_message_tokens(contents: list[str]) -> int:
    """Approximate prompt tokens of a chat request, with OpenAI's small per-message overhead.

    Args:
        contents: The text of each message.
    """
    return sum(count_tokens(c) + 4 for c in contents) + 3
