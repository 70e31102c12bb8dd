"""Token counts and dollar costs for model calls.

Prices come from the price map bundled in the litellm wheel, read as a file so that the CLI does
not pay litellm's multi-second import just to price a call; config can override any model.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from clinjudge.judges.clients._settings import ModelSettings, Price

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
"""What a simulated or in-process model's calls cost."""


BATCH_DISCOUNT = 0.5
"""Share of the list price a batch request costs where the price map has no batch price."""

CachePrices = Callable[[ModelSettings, dict[str, Any], float], tuple[float, float]]
"""A provider's cache read and write prices per token from a price-map entry and the input
price (see ``Provider.cache_prices``)."""


def listed_cache_prices(entry: dict[str, Any], input_price: float) -> tuple[float, float]:
    """Cache read and write prices per token as a map entry lists them; a model listed without
    a discount gets none here: cached tokens are then priced as ordinary input.

    Args:
        entry: The model's entry in the price map.
        input_price: Its input price per token.
    """
    read = entry.get("cache_read_input_token_cost")
    write = entry.get("cache_creation_input_token_cost")
    return (
        input_price if read is None else float(read),
        input_price if write is None else float(write),
    )


def override_prices(price: Price) -> TokenPrices:
    """Prices per token from a ``price`` in the settings; unset cache prices are the input's.

    Args:
        price: The settings' price override.
    """
    read = price.cached_input_per_mtok
    write = price.cache_write_input_per_mtok
    return TokenPrices(
        input=price.input_per_mtok / 1e6,
        output=price.output_per_mtok / 1e6,
        cached_input=(price.input_per_mtok if read is None else read) / 1e6,
        cache_write=(price.input_per_mtok if write is None else write) / 1e6,
    )


def map_prices(settings: ModelSettings, cache_prices: CachePrices) -> TokenPrices | None:
    """The model's prices per token from litellm's bundled map (its
    ``cache_read_input_token_cost`` and ``cache_creation_input_token_cost`` too, e.g.
    gpt-4o-mini $0.075/M cached against $0.15/M), or None when the map has no price.

    Args:
        settings: The model's settings.
        cache_prices: The provider's reading of an entry's cache prices.
    """
    prices = bundled_model_map()
    for name in model_map_names(settings):
        entry = prices.get(name)
        if entry and "input_cost_per_token" in entry:
            input_price = float(entry["input_cost_per_token"])
            read, write = cache_prices(settings, entry, input_price)
            return TokenPrices(
                input=input_price,
                output=float(entry.get("output_cost_per_token", 0.0)),
                cached_input=read,
                cache_write=write,
            )
    return None


def map_batch_prices(
    settings: ModelSettings, listed: TokenPrices | None
) -> tuple[float, float] | None:
    """Dollars per input and output token of a batch request: the map's batch prices, or
    :data:`BATCH_DISCOUNT` of the listed ones; None when neither is known.

    Args:
        settings: The model's settings.
        listed: The model's ordinary prices.
    """
    prices = bundled_model_map()
    for name in model_map_names(settings):
        entry = prices.get(name) or {}
        if "input_cost_per_token_batches" in entry:
            return float(entry["input_cost_per_token_batches"]), float(
                entry.get("output_cost_per_token_batches", 0.0)
            )
    if listed is None:
        return None
    return listed.input * BATCH_DISCOUNT, listed.output * BATCH_DISCOUNT


def map_context_window(settings: ModelSettings) -> int | None:
    """Input tokens the model accepts, when the bundled model map knows it.

    Args:
        settings: The model's settings (``price_as`` names the model behind a deployment).
    """
    models = bundled_model_map()
    for name in model_map_names(settings):
        entry = models.get(name) or {}
        limit = entry.get("max_input_tokens") or entry.get("max_tokens")
        if isinstance(limit, int) and limit > 0:
            return limit
    return None


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


def tiktoken_counts_exactly(settings: ModelSettings) -> bool:
    """Whether tiktoken maps the model (``price_as`` names a deployment's model) to
    :data:`COUNT_ENCODING`, so that :func:`count_tokens` counts with its own tokenizer.

    Args:
        settings: The model's settings.
    """
    from tiktoken.model import encoding_name_for_model

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
