"""What the runner (``orchestration``) reads back of a stored run: its items a chunk at a time,
its stored samples and calls (resume, fixes), its provider batches and its response cache. Only
``orchestration`` imports this front door (tests/test_architecture.py).
"""

from clinjudge.runs._item_reads import StoredItemReader, run_item_keys
from clinjudge.runs._provider_batches import (
    failed_batch_errors,
    iter_batch_requests,
    last_batch_attempt,
    last_request_seqs,
    open_batch,
    open_request_samples,
    queued_request_count,
)
from clinjudge.runs._reads import calls_of_agent
from clinjudge.runs._response_cache import load_response_cache
from clinjudge.runs._run_reads import calls_with_error, stored_samples

__all__ = [
    "StoredItemReader",
    "calls_of_agent",
    "calls_with_error",
    "failed_batch_errors",
    "iter_batch_requests",
    "last_batch_attempt",
    "last_request_seqs",
    "load_response_cache",
    "open_batch",
    "open_request_samples",
    "queued_request_count",
    "run_item_keys",
    "stored_samples",
]
