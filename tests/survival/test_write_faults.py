"""A store that stops taking writes stops the run: nothing finished is lost or reported as done.

Before this suite, a failed background write was dropped with its batch: a 300-item run said
"300 samples ok", exited 0 and was ``completed`` with 225 samples stored. Now a failed write stops
the run (``failed``, with the reason), the failed batch is written again with everything finished
after it, and ``--resume`` finishes exactly the rest. Also here: absurd token counts in a reply
are a malformed reply (never an overflow inside the write), and a 200 reply without choices still
has its billed tokens and cost recorded.
"""

from __future__ import annotations

import asyncio
import errno
import shutil
from pathlib import Path

import pytest

from clinjudge.orchestration import (
    RunWriteError,
    SampleRunner,
    create_run,
    execute_run,
    load_stored_run,
    prepare_run,
)
from clinjudge.orchestration._context import ModelPool
from clinjudge.orchestration._session import missing_work
from clinjudge.runs import RunStore
from tests.factories import make_items, small_tmpfs, write_jsonl
from tests.fake_openai import FakeOpenAIServer, Fault
from tests.survival.factories import make_config, run_in_process


def _stored_samples(db: Path, run_id: str) -> list[tuple[str, int]]:
    with RunStore(db, read_only=True) as store:
        rows = store.query(
            "SELECT item_id, sample FROM samples WHERE run_id = ? AND agent = 'judge'", [run_id]
        )
    return [(r["item_id"], r["sample"]) for r in rows]


def _run_row(db: Path, run_id: str) -> dict:
    with RunStore(db, read_only=True) as store:
        return store.query("SELECT status, status_reason FROM runs WHERE run_id = ?", [run_id])[0]


def _failing_writes(monkeypatch: pytest.MonkeyPatch, fail_on: set[int]) -> list[int]:
    """Make the n-th ``write_batch`` call (1-based, create_run's is 1) raise ENOSPC."""
    real = RunStore.write_batch
    calls: list[int] = []

    def write_batch(self: RunStore, batch: dict) -> None:
        calls.append(len(calls) + 1)
        if len(calls) in fail_on:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, batch)

    monkeypatch.setattr(RunStore, "write_batch", write_batch)
    return calls


def _resume(db: Path, run_id: str) -> None:
    with RunStore(db) as store:
        rid, prepared = load_stored_run(store, run_id)
        execute_run(store, rid, prepared, show_progress=False)


def _runner_run(config, flush_every: int = 10) -> tuple[str, SampleRunner, Exception | None]:  # noqa: ANN001
    """Create a run and judge it with a runner that flushes often (failures hit mid-run)."""
    prepared = prepare_run(config)
    store = RunStore(config.db)
    run_id = create_run(store, prepared)
    runner = SampleRunner(
        store,
        run_id,
        prepared.rubric,
        config,
        ModelPool(config, prepared.rubric),
        show_progress=False,
        flush_every=flush_every,
        flush_seconds=0.0,
    )
    units = missing_work(store, run_id, prepared)

    async def judge() -> None:
        try:
            await runner.run(units)
        finally:
            await runner.models.close()

    error: Exception | None = None
    try:
        asyncio.run(judge())
    except RunWriteError as exc:
        error = exc
    finally:
        store.close()
    return run_id, runner, error


@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_failed_background_write_stops_the_run_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, persistent: bool
) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(300))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer(latency=0.002) as srv:
        config = make_config(data, srv, db, concurrency=8)
        # Write 1 is create_run's; write 3 is a background batch in the middle of the run.
        writes = _failing_writes(monkeypatch, set(range(3, 10_000)) if persistent else {3})
        run_id, runner, error = _runner_run(config)
        monkeypatch.undo()
        assert isinstance(error, RunWriteError)
        message = str(error)
        assert "No space left on device" in message and f"resume run {run_id}" in message
        finished = runner.tally.ok + runner.tally.failed
        assert finished < 300, "the run must stop at the failed write, not judge everything"
        stored = _stored_samples(db, run_id)
        assert len(stored) == len(set(stored))
        if persistent:
            assert len(stored) < finished  # these will be judged again on resume
        else:
            # The failed batch was kept and written with the rest: every finished sample stored.
            assert len(stored) == finished
        assert len(writes) >= 3
        _resume(db, run_id)
    stored = _stored_samples(db, run_id)
    assert len(stored) == 300 == len(set(stored))
    assert _run_row(db, run_id)["status"] == "completed"


def _only_run(db: Path) -> str:
    with RunStore(db, read_only=True) as store:
        return store.query("SELECT run_id FROM runs")[0]["run_id"]


def test_cli_exits_nonzero_and_marks_the_run_failed_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from clinjudge.cli import app

    data = write_jsonl(tmp_path / "items.jsonl", make_items(40))
    db = tmp_path / "runs.duckdb"
    monkeypatch.setattr("clinjudge.orchestration._sample_runner.SampleRunner.flush", _fail_flush)
    result = CliRunner().invoke(
        app,
        ["run", "--rubric", "pdsqi9", "--data", str(data), "--db", str(db), "--no-progress"],
    )
    assert result.exit_code != 0, result.output
    assert "No space left on device" in result.output
    with RunStore(db, read_only=True) as store:
        run = store.query("SELECT run_id, status, status_reason FROM runs")[0]
    assert run["status"] == "failed"
    assert "No space left on device" in run["status_reason"]


def _fail_flush(self) -> None:  # noqa: ANN001 - replaces SampleRunner.flush
    self.write_failure = OSError(errno.ENOSPC, "No space left on device")
    raise RunWriteError(self._write_message(1, unwritten=True))


@pytest.fixture
def tiny_filesystem(tmp_path: Path):
    """A 3 MiB tmpfs (needs root, as in CI); skipped where mounting is not allowed."""
    with small_tmpfs(tmp_path, "3m") as mount:
        yield mount


def test_full_filesystem_stops_the_run_and_resume_finishes_exactly(
    tmp_path: Path, tiny_filesystem: Path
) -> None:
    filler = "Synthetic follow-up text about blood pressure checks and medication review. " * 40
    items = make_items(400)
    for item in items:
        item.summary = filler + item.summary
    data = write_jsonl(tmp_path / "items.jsonl", items)
    db = tiny_filesystem / "runs.duckdb"
    with FakeOpenAIServer() as srv:
        config = make_config(data, srv, db, concurrency=8)
        _, _, error = _runner_run(config, flush_every=20)
        assert isinstance(error, RunWriteError)
        assert "space" in str(error).lower()
        # The user frees space: here, the database moves to a roomier disk.
        roomy = tmp_path / "roomy.duckdb"
        for suffix in ("", ".wal"):
            if Path(f"{db}{suffix}").exists():
                shutil.copy(f"{db}{suffix}", f"{roomy}{suffix}")
        run_id = _only_run(roomy)
        assert _run_row(roomy, run_id)["status"] in {"running", "failed"}
        _resume(roomy, run_id)
    stored = _stored_samples(roomy, run_id)
    assert len(stored) == 400 == len(set(stored))


def test_absurd_token_counts_are_a_malformed_reply_not_a_lost_batch(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(30))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer() as srv:
        srv.script([Fault("absurd_usage")] * 3)
        store, run_id, tally = run_in_process(make_config(data, srv, db, concurrency=1))
        calls = store.query(
            "SELECT status, error, prompt_tokens FROM calls WHERE run_id = ? ORDER BY started_at",
            [run_id],
        )
        store.close()
    assert tally.ok == 30
    bad = [c for c in calls if c["status"] == "error"]
    assert len(bad) == 3
    assert all("usage prompt_tokens=1000000000000" in c["error"] for c in bad)
    assert all(c["prompt_tokens"] is None for c in bad)
    assert len(_stored_samples(db, run_id)) == 30


def test_reply_without_choices_still_records_its_billed_tokens_and_cost(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer() as srv:
        srv.script([Fault("empty_choices")])
        price = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
        config = make_config(data, srv, db, judge={"price": price})
        store, run_id, _ = run_in_process(config)
        calls = store.query(
            "SELECT status, error, prompt_tokens, completion_tokens, cost_usd FROM calls "
            "WHERE run_id = ? ORDER BY started_at",
            [run_id],
        )
        store.close()
        billed = srv.requests[0]
    failed = calls[0]
    assert failed["status"] == "error" and "no choices" in failed["error"]
    words = sum(len(m["content"].split()) for m in billed["messages"])
    assert failed["prompt_tokens"] == words
    assert failed["completion_tokens"] >= 1
    expected = words * 1e-6 + failed["completion_tokens"] * 2e-6
    assert failed["cost_usd"] == pytest.approx(expected)
