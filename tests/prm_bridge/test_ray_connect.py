"""`--ray ADDRESS` that answers nothing: one line within the connect timeout, naming the address,
and never a run left `running` (issue 36 part 5).

Ray itself retries an address that does not answer for ten minutes and more, printing only its
C++ log lines, and Ctrl-C waited for its current attempt (about 30 s). Every command here runs
in its own process with a wall-clock limit, so a hang fails the test instead of stalling the
suite, and Ray is never started in this process (a Ray joined here would be used whatever the
address). ``CLINJUDGE_RAY_CONNECT_TIMEOUT`` is 2 s: a command that honours it finishes within
seconds of its start-up (importing torch), far below the limits.

Ray Client (``ray://``) runs the ``hf/`` judge's actors but not PRM scoring, whose Ray Dataset
needs its driver on a node of the cluster: that is refused up front.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.cli._helpers import query
from tests.factories import make_items, write_jsonl
from tests.requirements import require_module

WAIT_S = 2
LIMIT_S = 90  # far below Ray's own retries; start-up (torch) takes seconds on a loaded machine
MAIN = "from clinjudge.cli import main; main()\n"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "COLUMNS": "250", "NO_COLOR": "1",
            "CLINJUDGE_RAY_CONNECT_TIMEOUT": str(WAIT_S), **extra}  # fmt: skip


def _judge(args: list[str], cwd: Path, code: str = MAIN, **extra: str) -> tuple[int, str, float]:
    """Run `judge ARGS` in a new process; (exit code, stderr, seconds it took)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=_env(**extra), cwd=cwd, timeout=LIMIT_S)  # fmt: skip
    return done.returncode, done.stderr, time.monotonic() - started


def _closed_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_head() -> Iterator[int]:
    """A port that accepts connections and never says a word: a head that does not answer
    (Ray joins a loopback address through the machine's own address, so every interface)."""
    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:  # closed: the test is over
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    require_module("ray")
    require_module("torch")
    from tests.prm_bridge._tiny import save_tiny

    path = tmp_path_factory.mktemp("tiny-connect")
    save_tiny(path, "medprm", seed=5)
    return str(path)


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = [{"id": f"n{n}", "question": "q", "steps": [{"text": "abc def"}, {"text": "ghi"}]}
            for n in range(4)]  # fmt: skip
    path = tmp_path_factory.mktemp("connect-data") / "chains.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _score(model: str, chains: Path, db: Path, address: str) -> list[str]:
    return ["prm", "score", "--model", model, "--input", str(chains), "--device", "cpu",
            "--db", str(db), "--ray", address]  # fmt: skip


def _one_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


def test_a_closed_port_is_one_line_before_anything_is_written(model, chains, tmp_path):
    address = f"127.0.0.1:{_closed_port()}"
    code, stderr, took = _judge(_score(model, chains, tmp_path / "x.duckdb", address), tmp_path)
    assert code == 2, stderr
    line = _one_error(stderr)
    assert f"cannot reach the Ray cluster at {address}: connection refused" in line
    assert took < LIMIT_S / 2
    assert not (tmp_path / "x.duckdb").exists()  # no run row, running or not


def test_an_unknown_host_is_one_line_before_anything_is_written(model, chains, tmp_path):
    address = "bogus-host.invalid:6379"  # .invalid never resolves (RFC 2606)
    code, stderr, _ = _judge(_score(model, chains, tmp_path / "x.duckdb", address), tmp_path)
    assert code == 2, stderr
    line = _one_error(stderr)
    assert f"cannot reach the Ray cluster at {address}: the host name does not resolve" in line
    assert not (tmp_path / "x.duckdb").exists()


def test_a_head_that_never_answers_fails_the_run_within_the_wait(model, chains, tmp_path,
                                                                 silent_head):  # fmt: skip
    # The port accepts, so the check before the run passes; Ray's join is what is bounded.
    db, address = tmp_path / "x.duckdb", f"127.0.0.1:{silent_head}"
    code, stderr, took = _judge(_score(model, chains, db, address), tmp_path)
    assert code == 1, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    assert f"cannot reach the Ray cluster at {address}: no answer within {WAIT_S} s" in errors[0]
    assert "CLINJUDGE_RAY_CONNECT_TIMEOUT" in errors[0]
    assert took < LIMIT_S / 2
    [(status, reason)] = query(db, "SELECT status, status_reason FROM runs")
    assert status == "failed"
    assert address in reason


def test_ctrl_c_while_joining_stops_at_once_and_marks_the_run_interrupted(model, chains, tmp_path,
                                                                          silent_head):  # fmt: skip
    db = tmp_path / "x.duckdb"
    args = _score(model, chains, db, f"127.0.0.1:{silent_head}")
    proc = subprocess.Popen([sys.executable, "-c", MAIN, *args], stderr=subprocess.PIPE,
                            text=True, env=_env(CLINJUDGE_RAY_CONNECT_TIMEOUT="60"),
                            cwd=tmp_path)  # fmt: skip
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        for line in proc.stderr:  # the run row is written, then Ray is joined
            seen.append(line)
            if "candidates to score" in line:
                break
        assert seen and "candidates to score" in seen[-1], "".join(seen)
        time.sleep(3)  # inside the join
        proc.send_signal(signal.SIGINT)
        stopped = time.monotonic()
        code = proc.wait(timeout=15)
        took = time.monotonic() - stopped
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, rest
    assert took < 10
    assert "Interrupted" in rest
    [(status,)] = query(db, "SELECT status FROM runs")
    assert status == "interrupted"


def test_prm_scoring_through_ray_client_is_refused_in_one_line(model, chains, tmp_path):
    # Ray Data streams on the driver, which Ray Client's is not: it would fail mid-run with
    # "'Worker' object has no attribute 'core_worker'".
    address = f"ray://127.0.0.1:{_closed_port()}"
    code, stderr, _ = _judge(_score(model, chains, tmp_path / "x.duckdb", address), tmp_path)
    assert code == 2, stderr
    line = _one_error(stderr)
    assert f"--ray {address}: PRM scoring does not run through Ray Client" in line
    assert "HOST:PORT" in line
    assert not (tmp_path / "x.duckdb").exists()


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_module("ray")
    from tests.judges.clients._hf_models import save_tiny_chat_model

    return save_tiny_chat_model(tmp_path_factory.mktemp("hf-connect") / "tiny")


def _hf_run(chat_model: Path, tmp_path: Path, address: str) -> list[str]:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    return ["run", "--data", str(data), "--model", f"hf/{chat_model}", "--ray", address,
            "--db", str(tmp_path / "x.duckdb"), "--no-progress"]  # fmt: skip


def test_an_hf_judge_through_ray_client_checks_the_address_first(chat_model, tmp_path):
    address = f"ray://127.0.0.1:{_closed_port()}"
    code, stderr, _ = _judge(_hf_run(chat_model, tmp_path, address), tmp_path)
    assert code == 2, stderr
    assert f"cannot reach the Ray cluster at {address}: connection refused" in _one_error(stderr)
    assert not (tmp_path / "x.duckdb").exists()


def test_ray_client_without_its_package_is_one_line_naming_the_extra(chat_model, tmp_path):
    # As where only ray[data] is installed: Ray Client's grpcio cannot be imported.
    blocker = "import sys; sys.modules['grpc'] = None\n" + MAIN
    address = f"ray://127.0.0.1:{_closed_port()}"
    code, stderr, _ = _judge(_hf_run(chat_model, tmp_path, address), tmp_path, code=blocker)
    assert code == 2, stderr
    assert "pip install 'clinjudge[ray]'" in _one_error(stderr)
    assert not (tmp_path / "x.duckdb").exists()


def test_judge_run_checks_the_prm_cluster_before_anything_is_written(model, tmp_path):
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    address = f"127.0.0.1:{_closed_port()}"
    code, stderr, _ = _judge(["run", "--data", str(data), "--model", "mock/judge", "--prm", model,
                              "--prm-device", "cpu", "--ray", address, "--db",
                              str(tmp_path / "x.duckdb"), "--no-progress"], tmp_path)  # fmt: skip
    assert code == 2, stderr
    assert f"cannot reach the Ray cluster at {address}" in _one_error(stderr)
    assert not (tmp_path / "x.duckdb").exists()


def test_a_resume_checks_the_cluster_before_the_run_is_touched(model, tmp_path):
    data, db = write_jsonl(tmp_path / "items.jsonl", make_items(3)), tmp_path / "x.duckdb"
    code, stderr, _ = _judge(["run", "--data", str(data), "--model", "mock/judge", "--prm", model,
                              "--prm-device", "cpu", "--db", str(db), "--no-progress"],
                             tmp_path)  # fmt: skip
    assert code == 0, stderr
    [(run_id, config)] = query(db, "SELECT run_id, config FROM runs")
    # As if the run had been started with --ray on a cluster that is gone, and stopped with
    # one item left to judge.
    config = json.loads(config)
    address = f"127.0.0.1:{_closed_port()}"
    config["prm"]["ray"] = address
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE runs SET config = ?, status = 'interrupted'", [json.dumps(config)])
        first = con.execute("SELECT min(item_id) FROM samples").fetchone()
        con.execute("DELETE FROM samples WHERE item_id = ?", [first[0] if first else None])
    samples = query(db, "SELECT count(*) FROM samples")
    code, stderr, _ = _judge(["run", "--resume", run_id, "--db", str(db), "--no-progress"],
                             tmp_path)  # fmt: skip
    assert code == 2, stderr
    assert f"cannot reach the Ray cluster at {address}" in _one_error(stderr)
    assert query(db, "SELECT status FROM runs") == [("interrupted",)]
    assert query(db, "SELECT count(*) FROM samples") == samples
