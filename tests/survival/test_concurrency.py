"""Two `judge` processes on one database: the second gets a clear one-line error naming the
database and writes nothing; the first finishes its run intact.

DuckDB lets one process at a time open a database file for writing (a file lock); `judge` holds
it for the whole run, so readers (`runs list`, `runs show`) are refused too until it finishes.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli._helpers import JUDGE, invoke, query
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

pytestmark = pytest.mark.needs_judge_script
N_ITEMS = 24


def test_second_process_is_refused_and_the_first_run_stays_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(N_ITEMS))
    other = write_jsonl(tmp_path / "other.jsonl", make_items(3, prefix="other"))
    ratings = tmp_path / "ratings.jsonl"
    ratings.write_text(
        json.dumps({"item_id": "x", "rater_id": "r", "attribute": "accurate", "score": 3}) + "\n"
    )
    db = tmp_path / "shared.duckdb"
    env = {k: v for k, v in os.environ.items() if k not in {"CLINJUDGE_MODEL", "COLUMNS"}}
    with FakeOpenAIServer(latency=0.1) as srv:
        first = subprocess.Popen(
            [
                JUDGE, "run", "--data", str(data), "--model", "openai/local-judge",
                "--base-url", srv.base_url, "--db", str(db), "--concurrency", "2",
                "--no-progress",
            ],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert first.stdout is not None
        run_id = first.stdout.readline().strip()
        deadline = time.monotonic() + 60
        while srv.request_count < 2:  # the first process is judging, the database is open
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        attempts = [
            ["run", "--data", str(other), "--model", "mock/judge", "--no-progress"],
            ["run", "--resume", run_id, "--no-progress"],
            ["ratings", "import", str(ratings)],
            ["runs", "list"],
            ["runs", "show", run_id],
            ["export", run_id, "--out", str(tmp_path / "x.csv"), "--format", "csv"],
        ]
        for args in attempts:
            result = invoke(*args, "--db", str(db))
            assert result.exit_code == 2, (args, result.stderr)
            assert result.stderr.count("\n") == 1, result.stderr  # one line
            assert result.stderr.startswith(f"error: {db}: database is in use by another process")
            assert f"(PID {first.pid})" in result.stderr
        assert first.poll() is None  # still judging while the others were refused
        out, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
    assert not (tmp_path / "x.csv").exists()
    assert query(db, "SELECT run_id, status FROM runs") == [(run_id, "completed")]
    assert query(db, "SELECT count(*) FROM samples WHERE status = 'ok'") == [(N_ITEMS,)]
    assert query(db, "SELECT count(DISTINCT item_id) FROM judgments WHERE final") == [(N_ITEMS,)]
    assert query(db, "SELECT count(*) FROM human_ratings") == [(0,)]
    assert query(db, "SELECT count(*) FROM items WHERE item_id LIKE 'other%'") == [(0,)]
    # Once the first process is done, the database is usable again.
    assert invoke("runs", "list", "--db", str(db)).exit_code == 0
