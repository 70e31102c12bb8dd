"""Shared set-up for tests that watch the sample runner while a run is judged on the fake
server: a hook after every accepted sample, a smaller write batch, and the run itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clinjudge.judges import ModelSettings
from clinjudge.orchestration import RetryPolicy, RunConfig, create_run, execute_run, prepare_run
from clinjudge.orchestration._sample_runner import SampleRunner
from clinjudge.runs import RunStore
from tests.fake_openai import FakeOpenAIServer

FAST = RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.05, jitter=0.01)


def after_each_sample(
    monkeypatch: pytest.MonkeyPatch,
    hook: Callable[[SampleRunner], None],
    *,
    flush_every: int | None = None,
) -> None:
    """Call ``hook(runner)`` after every sample the runner accepts; with ``flush_every``,
    every runner writes batches of that many samples.

    Args:
        monkeypatch: The test's monkeypatch.
        hook: Called with the runner once the sample is in its buffer and tally.
        flush_every: Samples per write batch (the runner's default when None).
    """
    accept = SampleRunner._accept

    def watched_accept(self: SampleRunner, rows, verdict, calls) -> None:  # type: ignore[no-untyped-def]
        accept(self, rows, verdict, calls)
        hook(self)

    monkeypatch.setattr(SampleRunner, "_accept", watched_accept)
    if flush_every is None:
        return
    init = SampleRunner.__init__

    def small_buffer(self: SampleRunner, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        kwargs["flush_every"] = flush_every
        init(self, *args, **kwargs)

    monkeypatch.setattr(SampleRunner, "__init__", small_buffer)


def run_on_fake_server(
    tmp_path: Path,
    data: Path,
    concurrency: int,
    query: str,
    *,
    on_prepared: Callable[[], None] | None = None,
) -> tuple[Any, tuple[Any, ...]]:
    """Judge ``data`` on an instant fake server; returns the tally (or the exception the run
    raised) and ``query``'s row, run with the run id as its parameter.

    Args:
        tmp_path: Folder for the database.
        data: The items file.
        concurrency: Model calls in flight.
        query: SQL read from the store after the run (one ``?``: the run id).
        on_prepared: Called once the data is checked, before the run is created.
    """
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
        if on_prepared is not None:
            on_prepared()
        with RunStore(config.db) as store:
            run_id = create_run(store, prepared)
            try:
                outcome: Any = execute_run(store, run_id, prepared, show_progress=False)
            except Exception as exc:  # noqa: BLE001 - a test may expect the run to stop
                outcome = exc
            row = store.con.execute(query, [run_id]).fetchone()
    assert row is not None
    return outcome, row
