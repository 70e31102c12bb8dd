"""The circuit breaker: a fault that hits every call stops the run instead of failing it all.

Before, connection refused, DNS failure, a hanging endpoint or an HTML page on every call
were retried sample by sample and the run ended ``completed`` with every sample failed (a hang
cost the whole retry schedule per sample). Now after ``max_consecutive_failures`` samples in a
row fail with the same call fault the run stops as ``interrupted`` with the reason, samples in
flight are stopped, none of the streak is stored as failed, and ``--resume`` judges them all
once the endpoint works. Failures that alternate with successes never trip it.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clinjudge.cli import app
from clinjudge.orchestration import (
    CircuitBreakerOpen,
    RetryPolicy,
    create_run,
    execute_run,
    prepare_run,
)
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer, Fault
from tests.survival._hostile_server import HostileServer
from tests.survival.factories import NetworkGuard, make_config

ITEMS = 30


class _Endpoint:
    """Just a base_url, for make_config."""

    def __init__(self, base_url: str):
        self.base_url = base_url


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stopped_run(data: Path, endpoint: object, db: Path, **kw: object) -> tuple[str, str]:
    config = make_config(data, endpoint, db, concurrency=4, **kw)  # type: ignore[arg-type]
    prepared = prepare_run(config)
    with RunStore(db) as store:
        run_id = create_run(store, prepared)
        with pytest.raises(CircuitBreakerOpen) as caught:
            execute_run(store, run_id, prepared, show_progress=False)
    return run_id, str(caught.value)


def _status(db: Path, run_id: str) -> tuple[str, str | None, int]:
    with RunStore(db, read_only=True) as store:
        run = store.get_run(run_id)
        stored = store.query("SELECT count(*) AS n FROM samples WHERE run_id = ?", [run_id])
    return run["status"], run.get("status_reason"), stored[0]["n"]


def _resume_completes(db: Path, run_id: str, port: int) -> None:
    with FakeOpenAIServer(port=port):  # the endpoint is back where the run expects it
        result = CliRunner().invoke(app, ["run", "--resume", run_id, "--db", str(db)])
        assert result.exit_code == 0, result.output
    with RunStore(db, read_only=True) as store:
        counts = store.query(
            "SELECT status, count(*) AS n FROM samples WHERE run_id = ? AND sample > 0 "
            "GROUP BY status",
            [run_id],
        )
    assert counts == [{"status": "ok", "n": ITEMS}]


def _check_stopped(db: Path, run_id: str, message: str, kind: str) -> None:
    status, reason, stored_failed = _status(db, run_id)
    assert status == "interrupted"
    assert reason is not None and kind in reason and "10 samples in a row" in reason
    assert f"resume run {run_id} (database {db})" in message
    assert stored_failed == 0  # the streak is not stored as failed


def test_connection_refused_stops_the_run_and_resume_finishes(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(ITEMS))
    db = tmp_path / "runs.duckdb"
    port = _closed_port()
    run_id, message = _stopped_run(data, _Endpoint(f"http://127.0.0.1:{port}/v1"), db)
    _check_stopped(db, run_id, message, "connection failed")
    _resume_completes(db, run_id, port)


def test_dns_failure_stops_the_run(tmp_path: Path, network_guard: NetworkGuard) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(ITEMS))
    db = tmp_path / "runs.duckdb"
    run_id, message = _stopped_run(data, _Endpoint("http://judge.example.invalid/v1"), db)
    _check_stopped(db, run_id, message, "connection failed")
    assert any(b.startswith("lookup judge.example.invalid") for b in network_guard.blocked)


def test_html_on_every_call_stops_the_run(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(ITEMS))
    db = tmp_path / "runs.duckdb"
    with HostileServer("html") as portal:
        run_id, message = _stopped_run(data, portal, db)
        requests = portal.requests
    _check_stopped(db, run_id, message, "malformed response")
    # 10 samples of at most 4 attempts, plus the 3 other workers' samples in flight.
    assert requests <= (10 + 3) * 4


def test_hang_on_every_call_stops_the_run_and_in_flight_samples(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(ITEMS))
    db = tmp_path / "runs.duckdb"
    slow = RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.02, jitter=0.0)
    hang = Fault("hang", hang_seconds=30.0)
    with FakeOpenAIServer(faults=lambda index, body: hang) as srv:
        run_id, message = _stopped_run(
            data, srv, db, judge={"timeout": 0.3}, retry=slow, max_consecutive_failures=3
        )
        requests = srv.request_count
    status, reason, stored = _status(db, run_id)
    assert status == "interrupted" and reason is not None and "timed out" in reason
    assert stored == 0
    assert requests <= (3 + 3) * 2


def test_failures_between_successes_never_trip(tmp_path: Path) -> None:
    items = make_items(24)
    bad = {i.summary for n, i in enumerate(items) if n % 2}

    def plan(index: int, body: dict) -> Fault | None:
        text = " ".join(str(m.get("content")) for m in body.get("messages", []))
        return Fault("server_error") if any(s in text for s in bad) else None

    data = write_jsonl(tmp_path / "items.jsonl", items)
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer(faults=plan) as srv:
        config = make_config(data, srv, db, concurrency=1, max_consecutive_failures=2)
        prepared = prepare_run(config)
        with RunStore(db) as store:
            run_id = create_run(store, prepared)
            tally = execute_run(store, run_id, prepared, show_progress=False)
    assert (tally.ok, tally.failed) == (12, 12)
    status, _, stored = _status(db, run_id)
    assert status == "completed" and stored == 24


def test_cli_stops_with_exit_1_and_the_resume_command(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(ITEMS))
    db = tmp_path / "runs.duckdb"
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    result = CliRunner().invoke(
        app,
        [
            "run", "--data", str(data), "--model", "openai/local", "--base-url", url,
            "--db", str(db), "--max-consecutive-failures", "5", "--timeout", "2",
        ],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "judge run --resume" in " ".join(result.output.split())
    with RunStore(db, read_only=True) as store:
        run = store.query("SELECT status, status_reason FROM runs")[0]
    assert run["status"] == "interrupted" and "5 samples in a row" in run["status_reason"]


def test_a_small_run_stops_once_every_item_failed_the_same_way(tmp_path: Path) -> None:
    # Issue #28: 3 items on an endpoint slower than the timeout never reached 10 failures in a
    # row. Now once every item has failed with the same fault (nothing succeeded) and samples
    # are left, the run stops, says why and which setting to change.
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    db = tmp_path / "runs.duckdb"
    config = tmp_path / "fast.yaml"
    config.write_text("retry: {initial_wait: 0.01, max_wait: 0.02, jitter: 0.0}\n")
    with FakeOpenAIServer(latency=1.5) as srv:
        result = CliRunner().invoke(
            app,
            [
                "run", "--data", str(data), "--model", "openai/local", "--base-url",
                srv.base_url, "--db", str(db), "--config", str(config), "--samples", "2",
                "--concurrency", "1", "--timeout", "0.3", "--no-progress",
            ],
        )  # fmt: skip
        requests = srv.request_count
    output = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "all 3 items failed with the same fault (timed out)" in output
    assert "calls take longer than --timeout 0.3 s; raise --timeout" in output
    assert "judge run --resume" in output
    # Each item's first sample: one try and one retry after the timeout; the second samples
    # never started.
    assert requests == 3 * 2
    with RunStore(db, read_only=True) as store:
        run = store.query("SELECT status, status_reason FROM runs")[0]
        stored = store.query("SELECT count(*) AS n FROM samples")[0]["n"]
    assert run["status"] == "interrupted" and "all 3 items failed" in run["status_reason"]
    assert stored == 0
