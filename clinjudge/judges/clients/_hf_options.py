"""Which engine decodes an in-process model's batches: read by the client that asks and by
the engine itself, so it lies below both."""

from __future__ import annotations

import os

from clinjudge.judges.clients._settings import ModelConfigError

ENGINE_ENV = "CLINJUDGE_HF_ENGINE"
"""How batches are decoded when the settings name no engine (see :data:`ENGINES`)."""
ENGINES = ("padded", "paged")
"""``padded`` (default): one ``generate`` call per batch over padded rows; ``paged``:
transformers' continuous batching with paged attention."""


def resolve_engine(engine: str | None) -> str:
    """The engine named, else ``CLINJUDGE_HF_ENGINE``, else ``padded``.

    Args:
        engine: ``padded``, ``paged`` or None.

    Raises:
        ModelConfigError: Another name.
    """
    chosen = engine or os.environ.get(ENGINE_ENV) or "padded"
    if chosen not in ENGINES:
        raise ModelConfigError(f"hf/ engine {chosen!r} must be one of: {', '.join(ENGINES)}")
    return chosen
