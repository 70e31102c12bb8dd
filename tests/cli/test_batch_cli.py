"""`judge run --batch` and `judge audit --batch`: provider batch API through the CLI, bad
combinations, dry run, and a real process killed while it waits for its batch, then resumed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.cli._helpers import JUDGE, batch_run, invoke, query, scalar
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer


def _batch_run(data: Path, db: Path, server: FakeOpenAIServer, *extra: str) -> Any:
    return batch_run(data, db, server.base_url, *extra)


def test_batch_run_through_the_cli(
    items_file: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local endpoint needs no key
    with FakeOpenAIServer() as server:
        result = _batch_run(items_file, db_path, server, "--samples", "2")
        assert result.exit_code == 0, result.stderr
        run_id = result.stdout.strip()
        assert "12 samples ok, 0 failed" in result.stderr
        assert "submitted (12 requests)" in result.stderr
        assert len(server.batch_api.uploads) == 1 and server.request_count == 12
    assert scalar(db_path, "SELECT status FROM runs WHERE run_id = ?", [run_id]) == "completed"
    assert query(db_path, "SELECT status, ingested FROM provider_batches") == [("completed", True)]
    assert scalar(db_path, "SELECT count(*) FROM judgments WHERE final") == 6 * 11


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--mode", "magentic"), "batch runs work with mode single only"),
        (("--mode", "panel"), "batch runs work with mode single only"),
        (("--model", "anthropic/claude-sonnet-4-5"), "needs an openai/ or azure/ model"),
        (("--model", "mock/judge"), "needs an openai/ or azure/ model"),
    ],
)
def test_bad_batch_combinations_exit_nonzero_and_write_nothing(
    items_file: Path, tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    db = tmp_path / "none" / "x.duckdb"
    args = ["run", "--data", str(items_file), "--db", str(db), "--batch", *flags]
    if "--model" not in flags:
        args += ["--model", "openai/gpt-4o-mini", "--base-url", "http://127.0.0.1:9/v1"]
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert not db.exists()


def test_batch_needs_a_key_for_the_real_endpoint(
    items_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db = tmp_path / "k.duckdb"
    result = invoke(
        "run",
        "--data",
        str(items_file),
        "--db",
        str(db),
        "--model",
        "openai/gpt-4o-mini",
        "--batch",
    )
    assert result.exit_code == 2 and "OPENAI_API_KEY" in result.stderr
    assert not db.exists()


def _estimated_cost(output: str) -> float:
    match = re.search(r"estimated cost \(upper bound\)\s*│?\s*\$([0-9.,]+)", output)
    assert match, output
    return float(match.group(1).replace(",", ""))


def test_dry_run_with_batch_estimates_at_batch_prices(
    items_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a dry run needs no key
    db = tmp_path / "dry.duckdb"
    common = ["run", "--data", str(items_file), "--db", str(db), "--model", "openai/gpt-4o"]
    direct = invoke(*common, "--dry-run")
    batch = invoke(*common, "--dry-run", "--batch")
    assert direct.exit_code == 0 and batch.exit_code == 0, batch.stderr
    assert _estimated_cost(batch.stderr) == pytest.approx(
        _estimated_cost(direct.stderr) / 2, abs=1e-4
    )
    assert "batch prices" in batch.stderr
    assert not db.exists()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"CLINJUDGE_MODEL", "OPENAI_API_KEY"}}
    env["NO_COLOR"] = "1"
    return env


@pytest.mark.needs_judge_script
def test_sigkill_while_polling_then_resume_polls_the_same_batch(tmp_path: Path) -> None:
    n_items = 8
    data = write_jsonl(tmp_path / "items.jsonl", make_items(n_items))
    db = tmp_path / "kill.duckdb"
    with FakeOpenAIServer() as server:
        server.batch_api.polls_to_complete = 10**9  # stays in progress until we say so
        proc = subprocess.Popen(
            [
                JUDGE,
                "run",
                "--data",
                str(data),
                "--model",
                "openai/gpt-4o-mini",
                "--base-url",
                server.base_url,
                "--db",
                str(db),
                "--batch",
                "--poll-interval",
                "0.02",
                "--no-progress",
            ],
            stdout=subprocess.PIPE,
            stderr=(tmp_path / "first.err").open("w"),
            text=True,
            env=_env(),
            cwd=tmp_path,
        )
        try:
            deadline = time.monotonic() + 60
            # A poll follows the stored batch id: once the server has seen two, it is stored.
            while sum(server.batch_api.polls.values()) < 2:
                assert proc.poll() is None, (tmp_path / "first.err").read_text()
                assert time.monotonic() < deadline, "the judge never polled its batch"
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.stdout is not None
        run_id = proc.stdout.read().strip()
        assert server.request_count == 0  # nothing answered before the kill

        server.batch_api.polls_to_complete = 0  # the next poll finds it done
        resumed = subprocess.run(
            [JUDGE, "run", "--resume", run_id, "--db", str(db), "--no-progress"],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=tmp_path,
            timeout=120,
        )
        assert resumed.returncode == 0, resumed.stderr
        assert "resuming the wait" in resumed.stderr
        assert len(server.batch_api.uploads) == 1 and len(server.batch_api.batches) == 1
        assert server.request_count == n_items
    assert scalar(db, "SELECT status FROM runs WHERE run_id = ?", [run_id]) == "completed"
    assert query(db, "SELECT count(*), count(DISTINCT item_id) FROM samples") == [
        (n_items, n_items)
    ]
    assert scalar(db, "SELECT count(*) FROM calls") == n_items


def test_claim_rubrics_are_refused_with_batch(tmp_path: Path) -> None:
    items = [i.model_copy(update={"reference": "Reference summary."}) for i in make_items(2)]
    data = write_jsonl(tmp_path / "ref.jsonl", items)
    db = tmp_path / "claims.duckdb"
    result = invoke(
        "run",
        "--data",
        str(data),
        "--rubric",
        "doclens",
        "--model",
        "openai/gpt-4o-mini",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--db",
        str(db),
        "--batch",
    )
    assert result.exit_code == 2
    assert "batch run cannot judge rubric 'doclens'" in result.stderr
    assert not db.exists()


def test_a_refused_upload_stops_with_one_line_and_resume_finishes_the_run(
    items_file: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAIServer() as server:
        server.batch_api.max_file_bytes = 100  # the provider refuses the file
        refused = _batch_run(items_file, db_path, server)
        assert refused.exit_code == 2
        assert "Traceback" not in refused.stderr
        message = " ".join(refused.stderr.split())
        assert "sending batch 1 failed: HTTP 400" in message
        assert "File is too large" in message
        run_id = scalar(db_path, "SELECT run_id FROM runs")
        assert f"judge run --resume {run_id}" in message
        assert server.batch_api.uploads == [] and server.request_count == 0
        assert scalar(db_path, "SELECT count(*) FROM provider_batches") == 0

        server.batch_api.max_file_bytes = 200 * 1000 * 1000
        resumed = invoke("run", "--resume", run_id, "--db", str(db_path), "--no-progress")
        assert resumed.exit_code == 0, resumed.stderr
        assert len(server.batch_api.uploads) == 1 and server.request_count == 6
    assert scalar(db_path, "SELECT status FROM runs") == "completed"
    assert scalar(db_path, "SELECT count(DISTINCT item_id) FROM samples WHERE status = 'ok'") == 6


AUDIT_VENDORS = Path(__file__).resolve().parents[2] / "examples" / "audit"


def test_audit_through_the_batch_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db = tmp_path / "audit.duckdb"
    vendors = [a for v in "abc" for a in ("--data", str(AUDIT_VENDORS / f"vendor_{v}.jsonl"))]
    common = ["--model", "openai/gpt-4o-mini", "--db", str(db), "--no-progress"]
    with FakeOpenAIServer() as server:
        flags = [*vendors, *common, "--base-url", server.base_url, "--batch", "--json"]
        dry = invoke("audit", *flags, "--dry-run")
        assert dry.exit_code == 0, dry.stderr
        assert "batch prices" in " ".join(dry.stderr.split()) and not db.exists()
        refused = invoke("audit", *flags, "--mode", "panel")
        assert refused.exit_code == 2 and not db.exists()
        assert "batch runs work with mode single only" in refused.stderr

        result = invoke("audit", *flags, "--poll-interval", "0", "--boot", "200")
        assert result.exit_code == 0, result.stderr
        assert len(server.batch_api.uploads) == 1 and server.request_count == 23
    audit = json.loads(result.stdout)
    assert audit["vendors"] == ["vendor_a", "vendor_b", "vendor_c"] and audit["n_items"] == 23
    assert query(db, "SELECT status, ingested, request_count FROM provider_batches") == [
        ("completed", True, 23)
    ]
    assert scalar(db, "SELECT status FROM runs") == "completed"


def test_runs_show_lists_a_batch_runs_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(6))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer() as server:
        server.batch_api.enqueued_token_limit = 10  # the first batch is refused whole
        result = _batch_run(data, db, server)
    assert result.exit_code == 2  # even one request is over the limit
    run_id = scalar(db, "SELECT run_id FROM runs")
    shown = invoke("runs", "show", run_id, "--db", str(db), "--json")
    assert shown.exit_code == 0, shown.stderr
    batches = json.loads(shown.stdout)["provider_batches"]
    assert [(b["attempt"], b["status"], b["request_count"], b["ingested"]) for b in batches] == [
        (1, "failed", 6, True)
    ]
    assert batches[0]["errors"][0].startswith("token_limit_exceeded: Enqueued token limit")
    table = invoke("runs", "show", run_id, "--db", str(db))
    assert "provider batches" in table.stdout and "token_limit_exceeded" in table.stdout


def test_runs_show_prints_the_providers_words_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer() as server:
        assert _batch_run(data, db, server).exit_code == 0
    con = duckdb.connect(str(db))
    try:  # what a hostile provider (or a hand-edited store) could put there
        con.execute(
            "UPDATE provider_batches SET batch_id = '[link=http://x]b[/link]', "
            "errors = '[\"[bold]forged[/bold] <script>\"]'"
        )
    finally:
        con.close()
    run_id = scalar(db, "SELECT run_id FROM runs")
    shown = invoke("runs", "show", run_id, "--db", str(db))
    assert shown.exit_code == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "[link=" in text  # shown, not read as markup (the table may fold the id)
    assert "[bold]forged[/bold]" in text and "<script>" in text
