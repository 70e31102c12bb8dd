"""The tables of runs sent through a provider's batch API: what was submitted, and its state.

A run sent as a batch keeps its batches and request lines here, so a resume polls the batch
that is out instead of submitting it again.
"""

from __future__ import annotations

from clinjudge.runs._store import RunStore

BATCH_DDL = """
CREATE TABLE IF NOT EXISTS provider_batches (
    run_id VARCHAR,
    attempt INTEGER,
    batch_id VARCHAR,
    status VARCHAR,
    provider VARCHAR,
    model VARCHAR,
    created_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ,
    request_count INTEGER,
    completed INTEGER,
    failed INTEGER,
    input_file_id VARCHAR,
    output_file_id VARCHAR,
    error_file_id VARCHAR,
    errors JSON,
    ingested BOOLEAN,
    PRIMARY KEY (run_id, attempt)
);
CREATE TABLE IF NOT EXISTS provider_batch_requests (
    run_id VARCHAR,
    custom_id VARCHAR,
    item_id VARCHAR,
    sample INTEGER,
    seq INTEGER,
    tries INTEGER,
    repairs INTEGER,
    messages JSON,
    attempt INTEGER,
    state VARCHAR,
    PRIMARY KEY (run_id, custom_id)
);
"""
"""``provider_batches``: one row per batch (``attempt`` numbers a run's batches from 1);
``provider_batch_requests``: one row per request line, ``queued``, ``submitted`` or ``done``."""


def ensure_batch_tables(store: RunStore) -> None:
    """Create the batch tables if the database lacks them."""
    store.con.execute(BATCH_DDL)


def is_batch_run(store: RunStore, run_id: str) -> bool:
    """Whether a run has been sent through a batch API (so ``--resume`` keeps doing that)."""
    if not store.has_table("provider_batch_requests"):
        return False
    rows = store.query("SELECT 1 FROM provider_batch_requests WHERE run_id = ? LIMIT 1", [run_id])
    return bool(rows)
