"""`judge runs list` and `judge runs show` of runs judged by a real (non-simulated) model load
no model client, agent framework, statistics or tensor library (#24: start-up,
bench/startup.py), and still count each run's samples from its mode's deciding agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli._helpers import invoke, modules_after, query
from tests.fake_openai import FakeOpenAIServer

HEAVY = [
    "openai",
    "autogen_core",
    "autogen_agentchat",
    "litellm",
    "scipy",
    "torch",
    "clinjudge.judges",  # the workflows and the model clients under them
]


def _judge(db: Path, items: Path, server: FakeOpenAIServer, mode: str) -> str:
    ran = invoke(
        "run", "--data", str(items), "--model", "openai/gpt-4o-mini", "--mode", mode,
        "--base-url", server.base_url, "--db", str(db), "--no-progress",
    )  # fmt: skip
    assert ran.exit_code == 0, ran.stderr
    return str(ran.stdout.strip())


def _probe(*commands: list[str]) -> tuple[list[list[str]], list[str]]:
    return modules_after(HEAVY, *commands, timeout=180)


def test_runs_list_and_show_load_no_heavy_module(
    items_file: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local endpoint needs no key
    with FakeOpenAIServer() as server:
        single = _judge(db_path, items_file, server, "single")
        panel = _judge(db_path, items_file, server, "panel")
    db = ["--db", str(db_path)]
    loaded, outputs = _probe(
        ["runs", "list", "--json", *db],
        ["runs", "show", single, "--json", *db],
        ["runs", "show", panel, "--json", *db],
        ["runs", "show", panel, *db],  # the table view
    )
    assert loaded == [[], [], [], []]

    listed = {row["run_id"]: row for row in json.loads(outputs[0])}
    assert set(listed) == {single, panel}
    for run_id, text, agent in ((single, outputs[1], "judge"), (panel, outputs[2], "panel")):
        summary = json.loads(text)
        assert summary["run_id"] == run_id and summary["mode"] == listed[run_id]["mode"]
        assert not summary["simulated"] and "notice" not in summary
        # Samples are the deciding agent's rows: the single judge's, or the panel's decision
        # (never a member's own verdict), as the samples table holds them.
        ok, failed = query(
            db_path,
            "SELECT count(*) FILTER (WHERE status = 'ok'), count(*) FILTER (WHERE status <> "
            "'ok') FROM samples WHERE run_id = ? AND agent = ? AND sample > 0",
            [run_id, agent],
        )[0]
        assert ok > 0
        assert (summary["samples_ok"], summary["samples_failed"]) == (ok, failed)
    members = query(
        db_path,
        "SELECT count(*) FROM samples WHERE run_id = ? AND agent <> 'panel'",
        [panel],
    )[0][0]
    assert members > 0  # the members' rows exist, and were not counted above
    assert panel in " ".join(outputs[3].split())
