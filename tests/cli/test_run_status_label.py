"""A run that ends with no (or not every) valid judgment is not listed as a plain `completed`."""

from __future__ import annotations

import json
from pathlib import Path

import clinjudge
from tests.cli._helpers import WIDE, invoke
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer


def test_a_run_without_valid_judgments_says_so_everywhere(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer(lambda body: "I cannot write JSON.") as srv:
        result = clinjudge.evaluate(
            data=str(data), db=str(db), model="openai/judge", base_url=srv.base_url
        )
    assert (result.status, result.items_ok, result.items) == ("completed", 0, 3)
    assert result.status_text == "completed, 0 of 3 valid"
    assert result.model_dump()["status_text"] == "completed, 0 of 3 valid"

    listed = invoke("runs", "list", "--db", str(db), env=WIDE)
    assert listed.exit_code == 0 and "completed, 0 of 3 valid" in listed.stdout
    shown = invoke("runs", "show", result.run_id, "--db", str(db), env=WIDE)
    assert "completed, 0 of 3 valid" in shown.stdout
    raw = json.loads(invoke("runs", "show", result.run_id, "--db", str(db), "--json").stdout)
    assert raw["status"] == "completed"  # the stored status is unchanged for scripts


def test_a_fully_valid_run_stays_plain_completed(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "runs.duckdb"
    result = clinjudge.evaluate(data=str(data), db=str(db), model="mock/judge")
    assert result.status_text == "completed"
    listed = invoke("runs", "list", "--db", str(db), env=WIDE)
    assert "completed" in listed.stdout and "valid" not in listed.stdout


def test_the_viewer_says_so_too(tmp_path: Path) -> None:
    import warnings

    from starlette.testclient import TestClient

    from clinjudge.reports import create_app

    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer(lambda body: "no JSON here") as srv:
        result = clinjudge.evaluate(
            data=str(data), db=str(db), model="openai/judge", base_url=srv.base_url
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(create_app(db, n_boot=20))
        runs, run = client.get("/"), client.get(f"/runs/{result.run_id}")
    assert "completed, 0 of 3 valid" in runs.text
    assert "completed, 0 of 3 valid" in run.text
