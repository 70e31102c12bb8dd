"""Real `judge run` processes: SIGKILL then --resume, and Ctrl-C (SIGINT) / SIGTERM.

The fake server runs in the test process, so its request count shows how far the child got and
how much work the resume redid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli._helpers import JUDGE, query, scalar
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

N_ITEMS, N_SAMPLES = 40, 2
TOTAL = N_ITEMS * N_SAMPLES

pytestmark = pytest.mark.needs_judge_script


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"CLINJUDGE_MODEL", "OPENAI_API_KEY", "COLUMNS"}
    }
    env["NO_COLOR"] = "1"
    return env


def _start(data: Path, db: Path, server: FakeOpenAIServer, stderr: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            JUDGE,
            "run",
            "--data",
            str(data),
            "--model",
            "openai/local-judge",
            "--base-url",
            server.base_url,
            "--db",
            str(db),
            "--samples",
            str(N_SAMPLES),
            "--concurrency",
            "4",
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=stderr.open("w"),
        text=True,
        env=_env(),
        cwd=data.parent,
        # A suite started in the background (`cmd &` in a script) ignores SIGINT, and children
        # inherit that: the judge must meet Ctrl-C as it does in a terminal.
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"judge exited early with {proc.returncode}"
        assert time.monotonic() < deadline, "timed out waiting for the judge process"
        time.sleep(0.005)


def _resume(run_id: str, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [JUDGE, "run", "--resume", run_id, "--db", str(db), "--no-progress"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=db.parent,
        timeout=120,
    )


def _assert_complete(db: Path, run_id: str) -> None:
    assert scalar(db, "SELECT status FROM runs WHERE run_id = ?", [run_id]) == "completed"
    assert query(
        db,
        "SELECT count(*), count(DISTINCT (item_id, sample)) FROM samples "
        "WHERE run_id = ? AND status = 'ok'",
        [run_id],
    ) == [(TOTAL, TOTAL)]
    per_sample = query(
        db,
        """
        SELECT item_id, sample, count(*) FROM judgments
        WHERE run_id = ? AND NOT final AND status = 'ok' AND (value IS NOT NULL
              OR attribute = 'synthesized')
        GROUP BY ALL""",
        [run_id],
    )
    assert len(per_sample) == TOTAL
    assert {n for _, _, n in per_sample} == {11}
    assert (
        scalar(db, "SELECT count(*) FROM judgments WHERE run_id = ? AND NOT final", [run_id])
        == TOTAL * 11
    )
    assert query(
        db,
        "SELECT count(DISTINCT item_id), count(*) FROM judgments "
        "WHERE run_id = ? AND final AND status = 'ok'",
        [run_id],
    ) == [(N_ITEMS, N_ITEMS * 11)]
    # Valid replies need one call each: a redone sample replaced, never duplicated, its calls.
    assert scalar(db, "SELECT count(*) FROM calls WHERE run_id = ?", [run_id]) == TOTAL


def _stored_samples(db: Path, run_id: str) -> int:
    return scalar(db, "SELECT count(*) FROM samples WHERE run_id = ?", [run_id])


def test_sigkill_then_resume_does_exactly_the_missing_work(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(N_ITEMS))
    db = tmp_path / "runs" / "kill.duckdb"
    # 0.1 s per reply at concurrency 4: request 50 follows at least 46 finished samples, i.e.
    # >= 1.2 s of work, so the runner's timed flush (every 1 s) has committed some samples while
    # the buffered and in-flight ones die with the process.
    with FakeOpenAIServer(latency=0.1) as server:
        proc = _start(data, db, server, tmp_path / "stderr.txt")
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        assert run_id, (tmp_path / "stderr.txt").read_text()
        _wait_for(lambda: server.request_count >= 50, proc)
        proc.kill()
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL

        assert scalar(db, "SELECT status FROM runs WHERE run_id = ?", [run_id]) == "running"
        stored = _stored_samples(db, run_id)
        assert 0 < stored < TOTAL
        sent_before = server.request_count

        resumed = _resume(run_id[:18], db)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == run_id
        assert server.request_count - sent_before == TOTAL - stored
    _assert_complete(db, run_id)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_interrupt_exits_130_and_run_is_resumable(tmp_path: Path, sig: signal.Signals) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(N_ITEMS))
    db = tmp_path / "runs" / "int.duckdb"
    stderr = tmp_path / "stderr.txt"
    with FakeOpenAIServer(latency=0.1) as server:
        proc = _start(data, db, server, stderr)
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        _wait_for(lambda: server.request_count >= 30, proc)
        proc.send_signal(sig)
        proc.wait(timeout=30)
        assert proc.returncode == 130
        message = " ".join(stderr.read_text().split())
        assert "Interrupted" in message
        assert f"judge run --resume {run_id} --db {db}" in message

        assert scalar(db, "SELECT status FROM runs WHERE run_id = ?", [run_id]) == "interrupted"
        stored = _stored_samples(db, run_id)
        # Finished samples are flushed on the way out; the run did not get far.
        assert 0 < stored < TOTAL
        sent_before = server.request_count

        resumed = _resume(run_id, db)
        assert resumed.returncode == 0, resumed.stderr
        assert server.request_count - sent_before == TOTAL - stored
    _assert_complete(db, run_id)
