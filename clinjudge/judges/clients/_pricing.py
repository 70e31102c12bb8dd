"""Prices and token-count exactness of a model, as its provider answers them."""

from __future__ import annotations

from clinjudge.judges.clients._accounting import TokenPrices, override_prices
from clinjudge.judges.clients._settings import ModelSettings
from clinjudge.judges.clients.providers import provider_for


def token_prices(settings: ModelSettings) -> TokenPrices | None:
    """The model's prices per token, or None when the model has no known price.

    A ``price`` in the settings wins; its unset cache prices fall back to the input price.
    Otherwise the provider prices it (litellm's bundled map for hosted APIs, nothing for
    simulated and in-process models).

    Args:
        settings: The model's settings.
    """
    if settings.price is not None:
        return override_prices(settings.price)
    return provider_for(settings).token_prices(settings)


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


def counts_exactly(settings: ModelSettings) -> bool:
    """Whether :func:`count_tokens` counts with the model's own tokenizer (an OpenAI-family
    model that tiktoken maps to ``COUNT_ENCODING``). Other models' tokenizers are unknown
    here, so their counts are approximate (a local model's own may count 10-20% more).

    Args:
        settings: The model's settings.
    """
    return provider_for(settings).counts_exactly(settings)


def context_window(settings: ModelSettings) -> int | None:
    """Input tokens the model accepts, when its provider knows (litellm's bundled map's
    ``max_input_tokens`` for hosted APIs); None: prompts are not checked.

    Args:
        settings: The model's settings (``price_as`` names the model behind a deployment).
    """
    return provider_for(settings).context_window(settings)
