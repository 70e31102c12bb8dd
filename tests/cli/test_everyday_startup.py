"""Everyday commands load only what they use (#39, bench/startup.py): the read-only commands on
a small store load neither the API nor the model clients, AutoGen or litellm; `judge run` of an
OpenAI-compatible endpoint loads no litellm, openai SDK, AutoGen agents or scipy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli._helpers import invoke, modules_after
from tests.fake_openai import FakeOpenAIServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


NEVER = [
    "clinjudge._api",  # the whole API: orchestration, workflows, reports
    "clinjudge.judges",  # the workflows and the model clients
    "openai",
    "litellm",
    "autogen_agentchat",
    "autogen_ext",
    "torch",
]


def _probe(watched: list[str], *commands: list[str]) -> list[list[str]]:
    return modules_after(watched, *commands)[0]


def _last_line(result: object) -> str:
    stdout = str(getattr(result, "stdout", ""))
    return stdout.strip().splitlines()[-1]


def test_read_only_commands_on_a_small_store_load_no_api_or_model_client(
    db_path: Path, tmp_path: Path
) -> None:
    db = ["--db", str(db_path)]
    ran = invoke(
        "run", "--model", "mock/judge", "--data", str(EXAMPLES / "pdsqi9_demo.jsonl"),
        *db, "--no-progress",
    )  # fmt: skip
    assert ran.exit_code == 0, ran.stderr
    run_id = _last_line(ran)
    vendors = [a for v in "abc" for a in ("--data", str(EXAMPLES / "audit" / f"vendor_{v}.jsonl"))]
    audited = invoke("audit", *vendors, "--mode", "single", "--json", *db, "--no-progress")
    assert audited.exit_code == 0, audited.stderr
    audit_id = json.loads(audited.stdout)["run_id"]
    ratings = str(EXAMPLES / "pdsqi9_demo_ratings.jsonl")
    out = tmp_path / "out"

    loaded = _probe(
        [*NEVER, "scipy", "pandas", "starlette", "pyarrow"],
        ["runs", "show", run_id, *db],  # a simulated run: its notice needs no mock client
        ["export", run_id, "--out", str(tmp_path / "j.jsonl"), *db],
        ["ratings", "import", ratings, *db],
        ["audit", "plan", "--run", audit_id, *db],
        ["agree", run_id, *db],
        ["compare", run_id, *db],
        ["report", run_id, "--out", str(out), *db],
    )
    # Nothing above needs scipy until the agreement statistics are computed (Wilcoxon's test),
    # or pyarrow until the statistics read their tables (330 ratings are written without it);
    # pyarrow converts without pandas, and the numbers are formatted without the web viewer.
    assert loaded[:3] == [[], [], []]
    analysed = [[m for m in after if m not in ("scipy", "pyarrow")] for after in loaded[3:]]
    assert analysed == [[], [], [], []]
    assert (out / "report.md").exists()
    # In a fresh process (ratings import parsed the built-in rubric's YAML above), the
    # statistics read the rubric stored with the run, as JSON: no YAML parser either.
    fresh = _probe(
        ["yaml", "pandas", "starlette"], ["agree", run_id, *db], ["compare", run_id, *db]
    )
    assert fresh == [[], []]


def test_run_of_an_openai_compatible_endpoint_loads_what_it_uses(
    items_file: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local endpoint needs no key
    watched = ["openai", "litellm", "autogen_agentchat", "autogen_ext", "scipy", "torch"]
    with FakeOpenAIServer() as server:
        loaded = _probe(
            watched,
            [
                "run", "--data", str(items_file), "--model", "openai/gpt-4o-mini",
                "--base-url", server.base_url, "--db", str(db_path), "--no-progress",
            ],
        )  # fmt: skip
        assert server.request_count > 0
    # The direct client speaks HTTP itself (aiohttp): no SDK, no litellm, no agent framework
    # (the magentic mode loads it with its first sample), no statistics.
    assert loaded == [[]]
