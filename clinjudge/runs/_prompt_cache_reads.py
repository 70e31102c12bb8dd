"""Reads of the provider prompt-cache columns of ``calls`` (schema version 5).

A store written before version 5 and opened read-only lacks the columns: every read here then
answers None ("not recorded"), never an error.
"""

from __future__ import annotations

from typing import TypedDict, cast

from clinjudge.runs._store import RunStore


class PromptCacheTotals(TypedDict):
    """A run's (or an agent's) prompt tokens the provider served from or wrote to its cache.

    Args:
        tokens_in: Every prompt token sent (the cached ones included).
        cached_input_tokens: Prompt tokens read from the provider's prompt cache (None: no
            call recorded it, e.g. a run stored before version 5).
        cache_write_tokens: Prompt tokens written to it (Anthropic; None as above).
        cache_saving_usd: Dollars saved against full input prices (None: no call priced).
        items: Items with calls.
    """

    tokens_in: int
    cached_input_tokens: int | None
    cache_write_tokens: int | None
    cache_saving_usd: float | None
    items: int


def records_prompt_cache(store: RunStore) -> bool:
    """Whether the store has the prompt-cache columns (a version 5 store)."""
    return store.has_column("calls", "cached_input_tokens")


def prompt_cache_totals(store: RunStore, run_id: str) -> PromptCacheTotals | None:
    """Prompt tokens, cached and cache-written tokens, the saving, and items of a run.

    Args:
        store: The run store.
        run_id: Full run id.

    Returns:
        The totals, or None when the store predates the columns.
    """
    if not records_prompt_cache(store):
        return None
    rows = store.query(
        """
        SELECT coalesce(sum(prompt_tokens), 0) AS tokens_in,
               sum(cached_input_tokens) AS cached_input_tokens,
               sum(cache_write_tokens) AS cache_write_tokens,
               sum(cache_saving_usd) AS cache_saving_usd,
               count(DISTINCT item_id) AS items
        FROM calls WHERE run_id = ?""",
        [run_id],
    )
    return cast(PromptCacheTotals, rows[0])


class AgentPromptCache(TypedDict):
    """Cached and cache-written prompt tokens of one (role, agent, model) of a run."""

    role: str
    agent: str
    model: str
    cached_input_tokens: int
    cache_write_tokens: int


def prompt_cache_by_agent(store: RunStore, run_id: str) -> list[AgentPromptCache] | None:
    """Cached and cache-written prompt tokens per role, agent and model (the grouping of
    ``calls_by_agent``), or None when the store predates the columns.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    if not records_prompt_cache(store):
        return None
    rows = store.query(
        """
        SELECT role, agent, model,
               coalesce(sum(cached_input_tokens), 0) AS cached_input_tokens,
               coalesce(sum(cache_write_tokens), 0) AS cache_write_tokens
        FROM calls WHERE run_id = ?
        GROUP BY role, agent, model ORDER BY role, agent, model""",
        [run_id],
    )
    return cast(list[AgentPromptCache], rows)
