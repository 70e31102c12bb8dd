"""The tables of runs sent through a provider's batch API: what was submitted, and its state.

A run sent as a batch keeps its batches and request lines here, so a resume polls the batch
that is out instead of submitting it again. ``orchestration.BatchRun`` drives the rounds; every
read and write of these tables is a named function below, and each step that changes several
rows (recording a submitted batch, ingesting its results) is one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from clinjudge._util.secrets import redact_secrets
from clinjudge.runs._message_texts import SHARED_ROLE, TextIds
from clinjudge.runs._store import RunStore, StoreError, _owner_only_files, rollback

if TYPE_CHECKING:  # the type only: the store never loads the clients
    from clinjudge.judges.clients import BatchState

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
CREATE TABLE IF NOT EXISTS provider_batch_texts (
    run_id VARCHAR,
    text_id VARCHAR,
    content VARCHAR,
    PRIMARY KEY (run_id, text_id)
);
"""
"""``provider_batches``: one row per batch (``attempt`` numbers a run's batches from 1);
``provider_batch_requests``: one row per request line, ``queued``, ``submitted`` or ``done``;
``provider_batch_texts``: the system messages of a run's request lines, each once (a request's
``messages`` names it by ``text_id``, the SHA-256 of its text, in place of ``content``)."""


def ensure_batch_tables(store: RunStore) -> None:
    """Create the batch tables if the database lacks them."""
    store.con.execute(BATCH_DDL)


def provider_batch_rows(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """A run's provider batches, in order (none for a run judged directly): each one's number,
    the provider's id and status, request counts, times, whether its results are in, and why
    it failed if it did.

    Args:
        store: The run store.
        run_id: The run.
    """
    if not store.has_table("provider_batches"):
        return []
    rows = store.query(
        "SELECT attempt, batch_id, status, request_count, completed, failed, created_at, "
        "updated_at, ingested, errors FROM provider_batches WHERE run_id = ? ORDER BY attempt",
        [run_id],
    )
    for row in rows:
        row["errors"] = _error_texts(row["errors"])
        row["status"] = redact_secrets(row["status"] or "")
    return rows


def _error_texts(errors: Any) -> list[str]:
    """A batch's stored errors as texts, credentials redacted (a store written before they
    were redacted on the way in may still hold one)."""
    listed = (json.loads(errors) if isinstance(errors, str) else errors) or []
    return [redact_secrets(str(e)) for e in listed]


def is_batch_run(store: RunStore, run_id: str) -> bool:
    """Whether a run has been sent through a batch API (so ``--resume`` keeps doing that)."""
    if not store.has_table("provider_batch_requests"):
        return False
    rows = store.query("SELECT 1 FROM provider_batch_requests WHERE run_id = ? LIMIT 1", [run_id])
    return bool(rows)


# ---------------------------------------------------------------------------------------------
# The request queue


def queue_requests(store: RunStore, rows: Sequence[dict[str, Any]]) -> None:
    """Add request lines to the queue (``provider_batch_requests`` rows, state ``queued``);
    a line whose ``custom_id`` is already there is kept as it was.

    Args:
        store: The run store.
        rows: The request rows; ``messages`` a list of ``{"role", "content"}``.
    """
    store.write_batch(_request_rows(store, rows))


def _request_rows(
    store: RunStore, rows: Sequence[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Request rows as stored, their system messages named by key, and the texts those keys
    name that the store lacks (``provider_batch_texts`` rows): the rubric's system prompt was
    ~3/4 of every request's bytes."""
    keys = TextIds()
    texts: dict[tuple[str, str], str] = {}
    stored = []
    for row in rows:
        messages = []
        for message in row["messages"]:
            if message["role"] == SHARED_ROLE:
                key = keys(message["content"])
                texts.setdefault((row["run_id"], key), message["content"])
                message = {"role": SHARED_ROLE, "text_id": key}
            messages.append(message)
        stored.append({**row, "messages": json.dumps(messages)})
    known = _stored_texts(store, texts)
    new = [
        {"run_id": run_id, "text_id": key, "content": text}
        for (run_id, key), text in texts.items()
        if (run_id, key) not in known
    ]
    return {"provider_batch_texts": new, "provider_batch_requests": stored}


def _stored_texts(store: RunStore, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The stored texts among these (run id, text id) keys, by key."""
    wanted = list(keys)
    if not wanted:
        return {}
    found = store.query(
        "SELECT run_id, text_id, content FROM provider_batch_texts "
        "WHERE (run_id, text_id) IN (SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]))",
        [[run_id for run_id, _ in wanted], [key for _, key in wanted]],
    )
    return {(r["run_id"], r["text_id"]): r["content"] for r in found}


def _with_texts(store: RunStore, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Request rows with ``messages`` as a list of ``{"role", "content"}`` (the texts stored
    once put back; rows written before they were stored once hold them inline)."""
    named: set[tuple[str, str]] = set()
    for row in rows:
        messages = row["messages"]
        row["messages"] = json.loads(messages) if isinstance(messages, str) else messages
        named.update((row["run_id"], m["text_id"]) for m in row["messages"] if "text_id" in m)
    texts = _stored_texts(store, named)
    missing = named - texts.keys()
    if missing:
        run_id, key = min(missing)
        raise StoreError(
            f"{store.path}: run {run_id}: a queued batch request names stored text {key[:12]}…, "
            "which the database lacks (provider_batch_texts); the database was changed by hand "
            "or copied in part"
        )
    for row in rows:
        row["messages"] = [
            {"role": m["role"], "content": texts[(row["run_id"], m["text_id"])]}
            if "text_id" in m
            else m
            for m in row["messages"]
        ]
    return rows


def open_request_samples(store: RunStore, run_id: str) -> set[tuple[str, int]]:
    """(item_id, sample) of every request of a run that is queued or submitted (not done).

    Args:
        store: The run store.
        run_id: The run.
    """
    rows = store.query(
        "SELECT item_id, sample FROM provider_batch_requests WHERE run_id = ? AND state <> 'done'",
        [run_id],
    )
    return {(r["item_id"], r["sample"]) for r in rows}


def last_request_seqs(store: RunStore, run_id: str, agent: str) -> dict[tuple[str, int], int]:
    """(item_id, sample) -> the highest call number used so far, by a stored call of ``agent``
    or a request line (a follow-up request takes the next one).

    Args:
        store: The run store.
        run_id: The run.
        agent: The agent whose calls count (the judge's).
    """
    rows = store.query(
        """
        SELECT item_id, sample, max(seq) AS seq FROM (
            SELECT item_id, sample, seq FROM calls WHERE run_id = ? AND agent = ?
            UNION ALL
            SELECT item_id, sample, seq FROM provider_batch_requests WHERE run_id = ?)
        GROUP BY ALL""",
        [run_id, agent, run_id],
    )
    return {(r["item_id"], r["sample"]): r["seq"] for r in rows}


REQUEST_PAGE = 1000
"""Request rows :func:`iter_batch_requests` reads at a time."""


def queued_request_count(store: RunStore, run_id: str) -> int:
    """How many request lines of a run wait to go out in a batch.

    Args:
        store: The run store.
        run_id: The run.
    """
    rows = store.query(
        "SELECT count(*) AS n FROM provider_batch_requests WHERE run_id = ? AND state = 'queued'",
        [run_id],
    )
    return int(rows[0]["n"])


def iter_batch_requests(
    store: RunStore, run_id: str, state: str, attempt: int | None = None
) -> Iterator[list[dict[str, Any]]]:
    """A run's request rows in one state (of one batch, when ``attempt`` is given), by sample,
    item and call number, :data:`REQUEST_PAGE` rows at a time: a caller that stops early
    never reads the rest. ``messages`` comes as a list of ``{"role", "content"}``.

    Args:
        store: The run store.
        run_id: The run.
        state: ``queued``, ``submitted`` or ``done``.
        attempt: The batch the requests went out in.
    """
    where = "state = ?" if attempt is None else "state = ? AND attempt = ?"
    params = [run_id, state] if attempt is None else [run_id, state, attempt]
    after: list[Any] = []
    while True:
        # Keyset paging on the order's own columns: each page is one complete query, so no
        # cursor stays open if the caller stops.
        since = "AND (sample, item_id, seq) > (?, ?, ?) " if after else ""
        page = store.query(
            f"SELECT * FROM provider_batch_requests WHERE run_id = ? AND {where} {since}"
            f"ORDER BY sample, item_id, seq LIMIT {REQUEST_PAGE}",
            [*params, *after],
        )
        if page:
            yield _with_texts(store, page)
        if len(page) < REQUEST_PAGE:
            return
        last = page[-1]
        after = [last["sample"], last["item_id"], last["seq"]]


# ---------------------------------------------------------------------------------------------
# Batches


def open_batch(store: RunStore, run_id: str) -> dict[str, Any] | None:
    """The run's first batch whose results are not stored yet (``provider_batches`` row).

    Args:
        store: The run store.
        run_id: The run.
    """
    rows = store.query(
        "SELECT * FROM provider_batches WHERE run_id = ? AND NOT ingested ORDER BY attempt LIMIT 1",
        [run_id],
    )
    return rows[0] if rows else None


def last_batch_attempt(store: RunStore, run_id: str) -> int:
    """The number of the run's latest batch (0 before the first).

    Args:
        store: The run store.
        run_id: The run.
    """
    rows = store.query(
        "SELECT coalesce(max(attempt), 0) AS n FROM provider_batches WHERE run_id = ?", [run_id]
    )
    return int(rows[0]["n"])


def update_batch(store: RunStore, run_id: str, attempt: int, state: BatchState) -> None:
    """Record what the provider says about a batch (its id, status, counts, files, errors).

    Args:
        store: The run store.
        run_id: The run.
        attempt: The batch.
        state: The provider's answer.
    """
    with _owner_only_files():
        store.con.execute(
            """
            UPDATE provider_batches SET batch_id = ?, status = ?, updated_at = ?, completed = ?,
                failed = ?, output_file_id = ?, error_file_id = ?, errors = ?
            WHERE run_id = ? AND attempt = ?""",
            [
                state.id,
                redact_secrets(state.status),
                datetime.now(UTC),
                state.completed,
                state.failed,
                state.output_file_id,
                state.error_file_id,
                # The provider's words, which may quote the request and its key.
                json.dumps([redact_secrets(e) for e in state.errors]),
                run_id,
                attempt,
            ],
        )


def _transaction(
    store: RunStore,
    chunks: Iterable[Mapping[str, Sequence[dict[str, Any]]]],
    statements: Sequence[tuple[str, list[Any]]],
) -> None:
    """Insert rows (table name to rows, a part at a time: each part may be produced while the
    transaction is open) and run statements in one transaction: a crash keeps all or none."""
    with _owner_only_files():
        store.con.execute("BEGIN TRANSACTION")
        try:
            for rows in chunks:
                for table, table_rows in rows.items():
                    store.insert_rows(table, table_rows)
            for sql, params in statements:
                store.con.execute(sql, params)
            store.con.execute("COMMIT")
        except BaseException:
            rollback(store.con)
            raise


def record_submitted_batch(
    store: RunStore, batch: dict[str, Any], custom_ids: Sequence[str]
) -> None:
    """Record an uploaded batch and mark its queued requests ``submitted``, in one transaction
    (before the batch is created, so a crash never creates it twice).

    Args:
        store: The run store.
        batch: The ``provider_batches`` row (``run_id``, ``attempt``, ``input_file_id``, ...).
        custom_ids: The requests it holds.
    """
    _transaction(
        store,
        [{"provider_batches": [batch]}],
        [
            (
                "UPDATE provider_batch_requests SET state = 'submitted', attempt = ? "
                "WHERE run_id = ? AND state = 'queued' AND custom_id = ANY(?::VARCHAR[])",
                [batch["attempt"], batch["run_id"], list(custom_ids)],
            )
        ],
    )


def failed_batch_errors(store: RunStore, run_id: str) -> list[list[str]]:
    """What the provider said of each of a run's batches that failed as a whole, the latest
    first.

    Args:
        store: The run store.
        run_id: The run.
    """
    rows = store.query(
        "SELECT errors FROM provider_batches WHERE run_id = ? AND status = 'failed' "
        "ORDER BY attempt DESC",
        [run_id],
    )
    return [_error_texts(row["errors"]) for row in rows]


def return_refused_batch(store: RunStore, run_id: str, attempt: int) -> None:
    """Put the requests of a batch the provider refused whole (none of it ran) back in the
    queue, untouched, and close the batch, in one transaction.

    Args:
        store: The run store.
        run_id: The run.
        attempt: The refused batch.
    """
    _transaction(
        store,
        [],
        [
            (
                "UPDATE provider_batch_requests SET state = 'queued', attempt = NULL "
                "WHERE run_id = ? AND attempt = ? AND state = 'submitted'",
                [run_id, attempt],
            ),
            (
                "UPDATE provider_batches SET ingested = true, updated_at = ? "
                "WHERE run_id = ? AND attempt = ?",
                [datetime.now(UTC), run_id, attempt],
            ),
        ],
    )


def record_ingested_batch(
    store: RunStore,
    run_id: str,
    attempt: int,
    chunks: Iterable[Mapping[str, Sequence[dict[str, Any]]]],
) -> None:
    """Store a finished batch's results and close it, in one transaction: the rows (calls,
    decided samples, follow-up requests), its requests marked ``done``, the batch ingested.

    Args:
        store: The run store.
        run_id: The run.
        attempt: The batch.
        chunks: Table name to rows to insert, a part of the batch at a time (each produced
            while the transaction is open, so only one part is held at once).
    """
    _transaction(
        store,
        (_with_request_rows(store, rows) for rows in chunks),
        [
            (
                "UPDATE provider_batch_requests SET state = 'done' "
                "WHERE run_id = ? AND attempt = ?",
                [run_id, attempt],
            ),
            (
                "UPDATE provider_batches SET ingested = true, updated_at = ? "
                "WHERE run_id = ? AND attempt = ?",
                [datetime.now(UTC), run_id, attempt],
            ),
        ],
    )


def _with_request_rows(
    store: RunStore, rows: Mapping[str, Sequence[dict[str, Any]]]
) -> Mapping[str, Sequence[dict[str, Any]]]:
    """Rows to write, their request rows (if any) as stored (:func:`_request_rows`)."""
    requests = rows.get("provider_batch_requests")
    return {**rows, **_request_rows(store, requests)} if requests else rows
