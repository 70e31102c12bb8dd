"""A store slower than the model holds the workers back: finished samples wait in the
runner's buffer only up to twice a batch (plus those in flight) while a write runs, so memory
does not grow with the run when the disk is the bottleneck (issue 27). The store's slowness is
a sleep inside its write; what is asserted is the buffer's size at every accepted sample and
that every sample is stored once, not a time."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from clinjudge.judges import ModelSettings
from clinjudge.orchestration import RetryPolicy, RunConfig, create_run, execute_run, prepare_run
from clinjudge.orchestration._sample_runner import SampleRunner
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

FAST = RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.05, jitter=0.01)


def _run_with_slow_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, items: int, fail_first: bool = False
) -> tuple[list[int], int, Any, list[int]]:
    flush_every, concurrency = 8, 4
    buffered: list[int] = []
    accept = SampleRunner._accept

    def counting_accept(self: SampleRunner, rows, verdict, calls) -> None:  # type: ignore[no-untyped-def]
        accept(self, rows, verdict, calls)
        buffered.append(self._buffered)

    init = SampleRunner.__init__

    def small_buffer(self: SampleRunner, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        kwargs["flush_every"] = flush_every
        init(self, *args, **kwargs)

    write_batch = RunStore.write_batch
    writes: list[int] = []

    def slow_write(self: RunStore, batch) -> None:  # type: ignore[no-untyped-def]
        # The model answers at once; each write takes far longer than a batch of calls.
        time.sleep(0.15)
        writes.append(len(batch.get("samples", [])))
        if fail_first and len(writes) == 1:
            raise OSError(28, "No space left on device")
        write_batch(self, batch)

    monkeypatch.setattr(SampleRunner, "_accept", counting_accept)
    monkeypatch.setattr(SampleRunner, "__init__", small_buffer)
    monkeypatch.setattr(RunStore, "write_batch", slow_write)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(items))
    with FakeOpenAIServer(latency=0.0) as srv:
        judge = ModelSettings(model="openai/local-judge", base_url=srv.base_url, timeout=5)
        config = RunConfig(
            data=str(data),
            judge=judge,
            db=str(tmp_path / "runs.duckdb"),
            concurrency=concurrency,
            retry=FAST,
        )
        prepared = prepare_run(config)
        with RunStore(config.db) as store:
            run_id = create_run(store, prepared)
            try:
                tally: Any = execute_run(store, run_id, prepared, show_progress=False)
            except Exception as exc:  # noqa: BLE001 - the failing store's run stops
                tally = exc
            stored = store.con.execute(
                "SELECT count(*), count(DISTINCT item_id) FROM samples "
                "WHERE run_id = ? AND sample > 0",
                [run_id],
            ).fetchone()
    assert stored is not None
    assert stored[0] == stored[1]  # never a duplicate
    return buffered, stored[0], tally, writes


def test_a_slow_store_holds_the_buffer_to_two_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = 160
    buffered, stored, tally, writes = _run_with_slow_store(tmp_path, monkeypatch, items=items)
    assert stored == items and tally.ok == items
    # flush_every 8, concurrency 4: twice a batch, plus the samples already in flight when
    # the workers were held. Without the hold the buffer reaches most of the run (the model
    # is instant, every write sleeps).
    assert max(buffered) <= 2 * 8 + 4, max(buffered)
    assert len(buffered) == items
    # Writes were batches, not one sample at a time: the hold lets the buffer refill.
    assert sum(writes) == items and max(writes) >= 8


def test_a_failed_slow_write_still_stops_the_run_with_nothing_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffered, stored, outcome, writes = _run_with_slow_store(
        tmp_path, monkeypatch, items=80, fail_first=True
    )
    # The first write fails: the held workers see the failure and stop taking work; what
    # finished is written by the final flush or reported for --resume, never duplicated.
    assert max(buffered) <= 2 * 8 + 4
    assert isinstance(outcome, Exception) and "resume" in str(outcome)
    assert stored < 80
