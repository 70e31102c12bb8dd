"""Token counts and dollar costs for model calls.

Prices come from the price map bundled in the litellm wheel, read as a file so that the CLI does
not pay litellm's multi-second import just to price a call; config can override any model.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path
from typing import Any

from clinjudge.judges.clients._settings import AZURE_PROVIDERS, OPENAI_PROVIDERS, ModelSettings

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


def price_per_token(settings: ModelSettings) -> tuple[float, float] | None:
    """Dollars per input and per output token, or None when the model has no known price.

    Args:
        settings: The model's settings (its ``price`` override wins).
    """
    if settings.price is not None:
        return settings.price.input_per_mtok / 1e6, settings.price.output_per_mtok / 1e6
    if settings.is_mock or settings.provider == "hf":  # simulated, or run in this process
        return 0.0, 0.0
    prices = bundled_model_map()
    for name in model_map_names(settings):
        entry = prices.get(name)
        if entry and "input_cost_per_token" in entry:
            return float(entry["input_cost_per_token"]), float(
                entry.get("output_cost_per_token", 0.0)
            )
    return None


def call_cost(settings: ModelSettings, prompt_tokens: int, completion_tokens: int) -> float | None:
    """Dollar cost of one call, or None when the price is unknown.

    Args:
        settings: The model's settings.
        prompt_tokens: Tokens sent.
        completion_tokens: Tokens generated.
    """
    return cost_at(price_per_token(settings), prompt_tokens, completion_tokens)


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
