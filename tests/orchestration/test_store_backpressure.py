"""A store slower than the model holds the workers back: finished samples wait in the
runner's buffer only up to twice a batch (plus those in flight) while a write runs, so memory
does not grow with the run when the disk is the bottleneck (issue 27). The store's slowness is
a sleep inside its write; what is asserted is the buffer's size at every accepted sample and
that every sample is stored once, not a time. A run cancelled while workers are held still
stores what it accepted."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from clinjudge.judges import JudgeModel, ModelSettings
from clinjudge.orchestration import (
    RunConfig,
    SampleRunner,
    create_run,
    prepare_run,
)
from clinjudge.orchestration._session import missing_work
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.orchestration._runner_hooks import after_each_sample, run_on_fake_server


def _run_with_slow_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, items: int, fail_first: bool = False
) -> tuple[list[int], int, Any, list[int]]:
    buffered: list[int] = []
    after_each_sample(monkeypatch, lambda runner: buffered.append(runner._buffered), flush_every=8)
    write_batch = RunStore.write_batch
    writes: list[int] = []

    def slow_write(self: RunStore, batch) -> None:  # type: ignore[no-untyped-def]
        # The model answers at once; each write takes far longer than a batch of calls.
        time.sleep(0.15)
        writes.append(len(batch.get("samples", [])))
        if fail_first and len(writes) == 1:
            raise OSError(28, "No space left on device")
        write_batch(self, batch)

    monkeypatch.setattr(RunStore, "write_batch", slow_write)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(items))
    outcome, stored = run_on_fake_server(
        tmp_path,
        data,
        4,
        "SELECT count(*), count(DISTINCT item_id) FROM samples WHERE run_id = ? AND sample > 0",
    )
    assert stored[0] == stored[1]  # never a duplicate
    return buffered, stored[0], outcome, writes


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


def test_a_run_cancelled_while_workers_wait_for_the_store_stores_what_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while workers are held behind a slow write: the run ends cancelled, promptly,
    and every sample it accepted is stored once."""
    data = write_jsonl(tmp_path / "items.jsonl", make_items(200))
    config = RunConfig(
        data=str(data), db=str(tmp_path / "x.duckdb"), judge=ModelSettings(model="mock/judge")
    )
    prepared = prepare_run(config)
    store = RunStore(config.db)
    run_id = create_run(store, prepared)
    assert config.judge is not None
    runner = SampleRunner(
        store,
        run_id,
        prepared.rubric,
        config,
        JudgeModel(config.judge, prepared.rubric),
        show_progress=False,
        flush_every=4,
    )
    write_batch = store.write_batch

    def slow_write(batch) -> None:  # type: ignore[no-untyped-def]
        time.sleep(0.3)
        write_batch(batch)

    monkeypatch.setattr(store, "write_batch", slow_write)
    held = SampleRunner._wait_for_store

    async def main() -> None:
        run = asyncio.create_task(runner.run(missing_work(store, run_id, prepared)))

        async def waiting(self: SampleRunner) -> None:
            run.cancel()  # the first time a worker is held
            await held(self)

        monkeypatch.setattr(SampleRunner, "_wait_for_store", waiting)
        await run

    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert time.monotonic() - started < 10
    assert runner.tally.interrupted
    rows = store.con.execute(
        "SELECT count(*), count(DISTINCT item_id) FROM samples WHERE run_id = ? AND sample > 0",
        [run_id],
    ).fetchone()
    store.close()
    assert rows is not None and rows[0] == rows[1]
    assert 0 < rows[0] == runner.tally.ok < 200
