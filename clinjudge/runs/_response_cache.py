"""The ``response_cache`` table behind ``judge run --cache``: replies by request key.

Each row records the run that wrote it (``run_id``), so ``judge runs delete`` removes a run's
replies with the rest of it. A run writes its replies with the samples that received them, in
the same transaction (see the sample runner); :func:`save_response_cache` writes the rest.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from clinjudge.runs._store import RunStore, _owner_only_files

if TYPE_CHECKING:
    from clinjudge.judges import ResponseCache


def _decoded(response: Any) -> Any:
    if not isinstance(response, str):
        return response
    try:
        return json.loads(response)
    except ValueError:
        return None  # refused by the cache like any other bad entry


def load_response_cache(store: RunStore, run_id: str | None = None) -> ResponseCache:
    """Every cached reply in the database; entries that fail validation are misses and, when
    the store is writable, are deleted so that the fresh reply can take their key.

    Args:
        store: The run store.
        run_id: The run that will write new entries.
    """
    from clinjudge.judges import ResponseCache  # here: `judge runs` must not load the clients

    if not store.has_table("response_cache"):
        return ResponseCache(run_id=run_id)
    rows = store.query("SELECT key, response FROM response_cache")
    cache = ResponseCache({row["key"]: _decoded(row["response"]) for row in rows}, run_id=run_id)
    if cache.rejected and not store.read_only:
        # Rows are inserted "or ignore" (by key): a bad row left in place would keep its key.
        with _owner_only_files():
            store.con.execute(
                "DELETE FROM response_cache WHERE key IN (SELECT unnest(?::VARCHAR[]))",
                [cache.rejected],
            )
    return cache


def save_response_cache(store: RunStore, cache: ResponseCache | None) -> int:
    """Write the replies added to ``cache`` that are not written yet (those of samples the
    run did not store: stopped by Ctrl-C, a 401, the circuit breaker).

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
