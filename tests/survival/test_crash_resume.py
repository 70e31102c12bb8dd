"""SIGKILL real `judge run` processes at 10 points, resume each time, compare with a clean run.

Kill points: seven at random request numbers of a single-mode run (drawn from a seeded RNG; the
fake server, which lives in this process, kills the child the moment that request arrives), one
inside the DuckDB transaction that writes a batch of samples, one inside the transaction that
writes the final scores, and two in the middle of MagenticOne discussions (when a persona is
asked to speak). After every kill the database must hold no partial sample; after the last
resume it must hold exactly what an uninterrupted run holds.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from clinjudge.judges.workflows._magentic import ORCHESTRATOR_AGENT, ORCHESTRATOR_MARKER
from tests.cli._helpers import JUDGE
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer, Fault, _message_text
from tests.magentic_fake import PanelFake
from tests.survival.factories import make_config, run_in_process

REPO = Path(__file__).resolve().parents[2]
N_KEYS = 11

pytestmark = pytest.mark.needs_judge_script


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"CLINJUDGE_MODEL", "COLUMNS"}}
    env.update(NO_COLOR="1", PYTHONPATH=str(REPO))
    return env


class Killer:
    """Fault plan that SIGKILLs the judge process when an armed request arrives."""

    def __init__(self, persona_only: bool = False):
        self.lock = threading.Lock()
        self.persona_only = persona_only
        self.pid: int | None = None
        self.countdown = 0
        self.fired = 0

    def arm(self, pid: int, after: int) -> None:
        with self.lock:
            self.pid, self.countdown = pid, after

    def __call__(self, index: int, body: dict[str, Any]) -> Fault | None:
        if self.persona_only:
            system = _message_text((body.get("messages") or [{}])[0])
            if ORCHESTRATOR_MARKER in system:
                return None
        with self.lock:
            if self.pid is None:
                return None
            self.countdown -= 1
            if self.countdown <= 0:
                os.kill(self.pid, signal.SIGKILL)
                self.fired += 1
                self.pid = None
        return None


def _query(db: Path, sql: str, params: list[Any] | None = None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def assert_no_partial_rows(db: Path, run_id: str, agent: str) -> int:
    """No orphan or partial rows of any sample; returns the decided (item, sample) count."""
    p = [run_id]
    partial = _query(
        db,
        """SELECT s.item_id, s.sample, s.agent, count(j.attribute) AS n FROM samples s
        LEFT JOIN judgments j ON j.run_id = s.run_id AND j.item_id = s.item_id
             AND j.sample = s.sample AND j.agent = s.agent AND NOT j.final
        WHERE s.run_id = ? GROUP BY ALL HAVING n <> ?""",
        [run_id, N_KEYS],
    )
    assert partial == [], partial[:3]
    for table, extra in (("judgments", "AND NOT t.final"), ("messages", ""), ("calls", "")):
        # Every row belongs to a stored decision of the same (item, sample).
        orphans = _query(
            db,
            f"""SELECT count(*) FROM {table} t WHERE t.run_id = ? {extra} AND NOT EXISTS (
                SELECT 1 FROM samples s WHERE s.run_id = t.run_id AND s.item_id = t.item_id
                AND s.sample = t.sample AND s.agent = ?)""",
            [run_id, agent],
        )
        assert orphans == [(0,)], f"orphaned {table} rows"
    uncounted = _query(
        db,
        """SELECT s.item_id, s.sample FROM samples s WHERE s.run_id = ? AND s.agent = ?
        AND s.n_calls <> (SELECT count(*) FROM calls c WHERE c.run_id = s.run_id
                          AND c.item_id = s.item_id AND c.sample = s.sample)""",
        [run_id, agent],
    )
    assert uncounted == []
    # A final exists only for an item whose samples are all stored, and then for every key.
    finals = _query(
        db,
        """SELECT item_id, count(*) FROM judgments WHERE run_id = ? AND final GROUP BY 1""",
        p,
    )
    assert all(n == N_KEYS for _, n in finals)
    return _query(
        db, "SELECT count(*) FROM samples WHERE run_id = ? AND agent = ?", [run_id, agent]
    )[0][0]


def snapshot(db: Path, run_id: str) -> dict[str, Any]:
    """What an uninterrupted run and a killed-and-resumed one must share."""

    def rows(sql: str) -> list[tuple]:
        return sorted(_query(db, sql, [run_id]))

    return {
        "samples": rows(
            "SELECT item_id, sample, agent, status, n_calls FROM samples WHERE run_id = ?"
        ),
        "judgments": rows(
            "SELECT item_id, sample, agent, attribute, value, final, status "
            "FROM judgments WHERE run_id = ?"
        ),
        "messages": rows(
            "SELECT item_id, sample, agent, seq, role, content FROM messages WHERE run_id = ?"
        ),
        "calls": rows(
            "SELECT item_id, sample, agent, seq, status, prompt_tokens, "
            "completion_tokens FROM calls WHERE run_id = ?"
        ),
        "status": rows("SELECT status FROM runs WHERE run_id = ?"),
    }


def _launch(args: list[str], db: Path, marker: tuple[Path, str] | None = None):
    prefix = [JUDGE]
    if marker is not None:
        prefix = [sys.executable, "-m", "tests.survival._paused_writes", str(marker[0]), marker[1]]
    return subprocess.Popen(
        [*prefix, *args, "--db", str(db), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=REPO,
    )


def _wait_killed(proc: subprocess.Popen, timeout: float = 90) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == -signal.SIGKILL, f"exit {proc.returncode}: {err[-2000:]}"
    return out


def _kill_at_marker(proc: subprocess.Popen, marker: Path) -> str:
    deadline = time.monotonic() + 90
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the write never paused"
        time.sleep(0.01)
    proc.kill()
    return _wait_killed(proc)


def test_single_mode_killed_at_nine_points_ends_like_an_uninterrupted_run(tmp_path: Path) -> None:
    n_items, n_samples = 30, 3
    total = n_items * n_samples
    data = write_jsonl(tmp_path / "items.jsonl", make_items(n_items))
    rng = random.Random(8)
    with FakeOpenAIServer() as clean_srv:
        config = make_config(data, clean_srv, tmp_path / "clean.duckdb", samples=n_samples)
        store, clean_id, tally = run_in_process(config)
        store.close()
    assert tally.ok == total
    expected = snapshot(tmp_path / "clean.duckdb", clean_id)

    db = tmp_path / "killed.duckdb"
    # 0.08 s per reply at concurrency 2: the runner's 1 s timed flush commits batches mid-run.
    killer = Killer()
    plan = ["request"] * 3 + ["write"] + ["request"] * 4 + ["final"]
    run_id = ""
    stored_after_kill: list[int] = []
    with FakeOpenAIServer(latency=0.08, faults=killer) as srv:
        first = [
            "run", "--data", str(data), "--model", "openai/local-judge", "--base-url",
            srv.base_url, "--samples", str(n_samples), "--concurrency", "2",
        ]  # fmt: skip
        for number, point in enumerate(plan):
            args = first if not run_id else ["run", "--resume", run_id]
            stored = stored_after_kill[-1] if stored_after_kill else 0
            if point == "request":
                proc = _launch(args, db)
                killer.arm(proc.pid, rng.randint((total - stored) // 2 + 1, total - stored))
                out = _wait_killed(proc)
            else:
                marker = tmp_path / f"paused-{number}"
                which = "samples" if point == "write" else "final"
                out = _kill_at_marker(_launch(args, db, (marker, which)), marker)
            run_id = run_id or out.strip()
            assert run_id
            stored_after_kill.append(assert_no_partial_rows(db, run_id, "judge"))
            if point == "final":
                # Killed while writing the finals: every sample is stored, no final is.
                assert stored_after_kill[-1] == total
                assert _query(db, "SELECT count(*) FROM judgments WHERE final") == [(0,)]
            assert _query(db, "SELECT status FROM runs") == [("running",)]
        assert killer.fired == plan.count("request")
        # Some kills hit a partly stored run; a kill never loses work stored before it.
        assert any(0 < n < total for n in stored_after_kill), stored_after_kill
        assert stored_after_kill == sorted(stored_after_kill)

        sent = srv.request_count
        resumed = subprocess.run(
            [JUDGE, "run", "--resume", run_id, "--db", str(db), "--no-progress"],
            capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120,
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        assert srv.request_count == sent  # the last kill left only the finals to write
    assert assert_no_partial_rows(db, run_id, "judge") == total
    assert snapshot(db, run_id) == {**expected, "status": [("completed",)]}


def test_magentic_killed_mid_discussion_ends_like_an_uninterrupted_run(tmp_path: Path) -> None:
    n_items = 6
    data = write_jsonl(tmp_path / "items.jsonl", make_items(n_items))
    fake = PanelFake(personas="high_scorer,low_scorer")
    with FakeOpenAIServer(responder=fake) as clean_srv:
        config = make_config(
            data, clean_srv, tmp_path / "clean.duckdb", mode="magentic",
            personas=fake.personas, concurrency=3,
        )  # fmt: skip
        store, clean_id, tally = run_in_process(config)
        store.close()
    assert tally.ok == n_items
    expected = snapshot(tmp_path / "clean.duckdb", clean_id)

    db = tmp_path / "killed.duckdb"
    killer = Killer(persona_only=True)
    run_id = ""
    with FakeOpenAIServer(responder=fake, faults=killer, latency=0.05) as srv:
        first = [
            "run", "--data", str(data), "--model", "openai/local-judge", "--base-url",
            srv.base_url, "--mode", "magentic", "--personas", fake.personas,
            "--concurrency", "3",
        ]  # fmt: skip
        # The 2nd persona request is mid-discussion for sure; later ones mid-run as well.
        for after in (2, 5):
            proc = _launch(first if not run_id else ["run", "--resume", run_id], db)
            killer.arm(proc.pid, after)
            out = _wait_killed(proc)
            run_id = run_id or out.strip()
            assert assert_no_partial_rows(db, run_id, ORCHESTRATOR_AGENT) < n_items
        assert killer.fired == 2
        resumed = subprocess.run(
            [JUDGE, "run", "--resume", run_id, "--db", str(db), "--no-progress"],
            capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120,
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
    assert assert_no_partial_rows(db, run_id, ORCHESTRATOR_AGENT) == n_items
    assert snapshot(db, run_id) == {**expected, "status": [("completed",)]}
