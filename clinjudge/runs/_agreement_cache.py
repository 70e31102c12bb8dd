"""Agreement analyses kept in the store (``agreement_cache``), keyed by run and settings.

Each row holds the fingerprint of the analysis' exact input (ratings, final judgments, rubric):
a kept analysis is reused only while that fingerprint is unchanged. The analysis itself is
``analysis``'s to compute; the store only keeps it.
"""

from __future__ import annotations

import json
from typing import Any

from clinjudge.runs._store import RunStore, now


def load_agreement(
    store: RunStore, run_id: str, settings: str, fingerprint: str
) -> dict[str, Any] | None:
    """The kept analysis of a run for these settings and this input, if any.

    Args:
        store: The run store.
        run_id: Full run id.
        settings: The analysis settings as one key (resamples, seed, version).
        fingerprint: The fingerprint of the analysis' input.
    """
    if not store.has_table("agreement_cache"):  # an older file opened read-only
        return None
    rows = store.query(
        "SELECT analysis FROM agreement_cache WHERE run_id = ? AND settings = ? "
        "AND fingerprint = ?",
        [run_id, settings, fingerprint],
    )
    if not rows:
        return None
    value = rows[0]["analysis"]
    return json.loads(value) if isinstance(value, str) else value


def save_agreement(
    store: RunStore, run_id: str, settings: str, fingerprint: str, analysis: dict[str, Any]
) -> None:
    """Keep an analysis (replacing the run's earlier one for the same settings); nothing is
    kept in a store opened read-only or one without the table.

    Args:
        store: The run store.
        run_id: Full run id.
        settings: The analysis settings as one key.
        fingerprint: The fingerprint of the analysis' input.
        analysis: The analysis (JSON-ready).
    """
    if store.read_only or not store.has_table("agreement_cache"):
        return  # nothing to keep it in; the next writable open can
    store.upsert_rows(
        "agreement_cache",
        [
            {
                "run_id": run_id,
                "settings": settings,
                "fingerprint": fingerprint,
                "analysis": json.dumps(analysis),
                "computed_at": now(),
            }
        ],
    )
