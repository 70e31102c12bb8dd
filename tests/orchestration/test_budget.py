"""``max_cost``: the run stops issuing work at the budget, finishes what is in flight, resumes."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from clinjudge.judges import ModelSettings
from clinjudge.judges.clients._settings import Price
from clinjudge.orchestration import (
    RetryPolicy,
    RunConfig,
    create_run,
    execute_run,
    load_stored_run,
    prepare_run,
)
from clinjudge.orchestration._session import missing_work
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

FAST = RetryPolicy(max_attempts=4, initial_wait=0.01, max_wait=0.05, jitter=0.01)
# $1 per thousand tokens: one sample against the fake server costs about $0.1.
PRICE = Price(input_per_mtok=1000.0, output_per_mtok=1000.0)


def config(data: Path, srv: FakeOpenAIServer, db: Path, **kw: Any) -> RunConfig:
    judge = ModelSettings(model="openai/local-judge", base_url=srv.base_url, timeout=5, price=PRICE)
    return RunConfig(data=str(data), judge=judge, db=str(db), retry=FAST, **kw)


def one_sample_cost(tmp_path: Path, srv: FakeOpenAIServer) -> float:
    data = write_jsonl(tmp_path / "one.jsonl", make_items(1, prefix="calib"))
    cfg = config(data, srv, tmp_path / "calib.duckdb")
    prepared = prepare_run(cfg)
    with RunStore(cfg.db) as store:
        tally = execute_run(store, create_run(store, prepared), prepared, show_progress=False)
    assert tally.ok == 1 and tally.cost_usd > 0
    return tally.cost_usd


def test_budget_stops_early_and_resume_finishes(tmp_path: Path, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="clinjudge")
    with FakeOpenAIServer(latency=0.02) as srv:
        per_sample = one_sample_cost(tmp_path, srv)
        data = write_jsonl(tmp_path / "items.jsonl", make_items(20))
        budget = 6.5 * per_sample
        cfg = config(data, srv, tmp_path / "run.duckdb", concurrency=3, max_cost=budget)
        prepared = prepare_run(cfg)
        store = RunStore(cfg.db)
        run_id = create_run(store, prepared)
        before = srv.request_count
        tally = execute_run(store, run_id, prepared, show_progress=False)

        done = tally.ok + tally.failed
        assert tally.budget_exhausted
        assert 1 <= done < 20
        assert tally.cost_usd <= budget
        assert tally.not_started == 20 - done
        run = store.get_run(run_id)
        assert run["status"] == "budget_exhausted"
        assert run["finished_at"] is None
        # Everything started was finished and stored: one request per stored sample, no
        # orphan calls, and the rest is exactly the missing work.
        stored = store.query("SELECT count(*) AS n FROM samples WHERE run_id = ?", [run_id])
        assert stored[0]["n"] == done
        assert srv.request_count - before == done
        calls = store.query("SELECT count(*) AS n FROM calls WHERE run_id = ?", [run_id])
        assert calls[0]["n"] == done
        assert len(missing_work(store, run_id, prepared)) == 20 - done
        # Not finalized: no final per-item scores yet.
        finals = store.query(
            "SELECT count(*) AS n FROM samples WHERE run_id = ? AND sample = 0", [run_id]
        )
        assert finals[0]["n"] == 0
        # The library logs the stop (the CLI prints it with the --resume command).
        stops = [r.getMessage() for r in caplog.records if "budget" in r.getMessage()]
        assert stops and run_id in stops[0] and "resume" in stops[0]

        # Resume with a larger budget (as `--max-cost` would) finishes exactly the rest.
        full_id, stored_run = load_stored_run(store, run_id)
        assert stored_run.config.max_cost == budget
        stored_run.config = stored_run.config.model_copy(update={"max_cost": 100 * budget})
        tally2 = execute_run(store, full_id, stored_run, show_progress=False)
        assert not tally2.budget_exhausted
        assert tally2.ok + tally2.failed == 20 - done
        assert store.get_run(run_id)["status"] == "completed"
        assert missing_work(store, run_id, stored_run) == []
        per_item = store.query(
            "SELECT item_id, count(*) AS n FROM samples WHERE run_id = ? AND sample >= 1 "
            "GROUP BY item_id",
            [run_id],
        )
        assert len(per_item) == 20 and all(r["n"] == 1 for r in per_item)
        store.close()


def test_budget_below_first_estimate_starts_nothing(tmp_path: Path) -> None:
    with FakeOpenAIServer() as srv:
        data = write_jsonl(tmp_path / "items.jsonl", make_items(4))
        cfg = config(data, srv, tmp_path / "run.duckdb", max_cost=0.001)
        prepared = prepare_run(cfg)
        with RunStore(cfg.db) as store:
            run_id = create_run(store, prepared)
            tally = execute_run(store, run_id, prepared, show_progress=False)
            assert tally.budget_exhausted and tally.ok == 0 and tally.not_started == 4
            assert srv.request_count == 0
            assert store.get_run(run_id)["status"] == "budget_exhausted"


def test_cli_resume_with_max_cost_replaces_the_stored_budget(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from clinjudge.cli import app

    with FakeOpenAIServer(latency=0.01) as srv:
        per_sample = one_sample_cost(tmp_path, srv)
        data = write_jsonl(tmp_path / "items.jsonl", make_items(8))
        config_file = tmp_path / "judge.yaml"
        config_file.write_text(
            "judge:\n  model: openai/local-judge\n"
            f"  base_url: {srv.base_url}\n"
            "  price: {input_per_mtok: 1000, output_per_mtok: 1000}\n"
        )
        db = tmp_path / "cli.duckdb"
        runner = CliRunner()
        first = runner.invoke(
            app,
            [
                "run",
                "--config",
                str(config_file),
                "--data",
                str(data),
                "--db",
                str(db),
                "--concurrency",
                "1",
                "--no-progress",
                "--max-cost",
                str(2.5 * per_sample),
            ],
        )
        # Items left unjudged by the budget stop have no valid final judgment: exit code 1.
        assert first.exit_code == 1, first.output
        assert "ended without a valid final judgment" in first.stderr
        run_id = first.stdout.strip().splitlines()[0]
        with RunStore(db, read_only=True) as store:
            assert store.get_run(run_id)["status"] == "budget_exhausted"
        second = runner.invoke(
            app, ["run", "--resume", run_id, "--db", str(db), "--no-progress", "--max-cost", "1000"]
        )
        assert second.exit_code == 0, second.output
        with RunStore(db, read_only=True) as store:
            assert store.get_run(run_id)["status"] == "completed"
            count = store.con.execute("SELECT count(*) FROM samples WHERE run_id = ?", [run_id])
            assert count.fetchone()[0] == 8
