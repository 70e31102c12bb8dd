"""The ``response_cache`` table behind ``judge run --cache``: replies by request key."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from clinjudge.runs._store import RunStore

if TYPE_CHECKING:
    from clinjudge.judges import ResponseCache


def load_response_cache(store: RunStore) -> ResponseCache:
    """Every cached reply in the database.

    Args:
        store: The run store.
    """
    from clinjudge.judges import ResponseCache  # here: `judge runs` must not load the clients

    if not store.has_table("response_cache"):
        return ResponseCache()
    rows = store.query("SELECT key, response FROM response_cache")
    entries: dict[str, dict[str, Any]] = {}
    for row in rows:
        response = row["response"]
        entries[row["key"]] = json.loads(response) if isinstance(response, str) else response
    return ResponseCache(entries)


def save_response_cache(store: RunStore, cache: ResponseCache | None) -> int:
    """Write the replies added to ``cache`` since it was loaded or last saved.

    Args:
        store: The run store (opened for writing).
        cache: The run's cache, or None when the run does not cache.

    Returns:
        Rows written.
    """
    if cache is None:
        return 0
    rows = cache.take_new()
    if rows:
        store.write_batch({"response_cache": rows})
    return len(rows)
