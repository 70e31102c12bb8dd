"""Failure is visible: exit codes, --allow-failures, first reasons, quiet third parties."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli._helpers import invoke, scalar
from tests.fake_openai import FakeOpenAIServer, pdsqi9_scores

RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")
BROKEN = ("Synthetic summary 1 ", "Synthetic summary 4 ")


def _last_user(body: dict) -> str:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    content = users[-1]["content"] if users else ""
    return content if isinstance(content, str) else "\n".join(p["text"] for p in content)


def _two_items_refused(body: dict) -> str | dict:
    """Valid scores, except prose without JSON for two of the six items."""
    text = _last_user(body)
    if any(marker in text for marker in BROKEN):
        return "I would rather not grade this summary."
    return pdsqi9_scores(text)


@pytest.fixture
def half_broken() -> FakeOpenAIServer:
    with FakeOpenAIServer(_two_items_refused) as server:
        yield server


def _run(server: FakeOpenAIServer, items: Path, db: Path, *extra: str):
    return invoke(
        "run",
        "--data",
        str(items),
        "--model",
        "openai/local-judge",
        "--base-url",
        server.base_url,
        "--db",
        str(db),
        "--max-repairs",
        "0",
        "--no-progress",
        *extra,
    )


def test_unknown_provider_exits_1_with_only_the_run_id_on_stdout(
    items_file: Path, db_path: Path
) -> None:
    result = invoke("run", "--data", str(items_file), "--model", "foo/bar", "--db", str(db_path))
    assert result.exit_code == 1
    # stdout holds the run id and nothing else: litellm's provider list is not printed.
    assert RUN_ID.match(result.stdout.strip()), result.stdout
    assert result.stdout.count("\n") == 1
    assert "Provider List" not in result.stderr
    # The summary names the real reason, not only its class.
    assert "6 x provider" in result.stderr
    assert "LLM Provider NOT provided" in result.stderr
    assert "6 of 6 item(s) ended without a valid final judgment" in result.stderr


def test_failed_items_exit_1_and_show_first_reason(
    half_broken: FakeOpenAIServer, items_file: Path, db_path: Path
) -> None:
    result = _run(half_broken, items_file, db_path)
    assert result.exit_code == 1, result.stderr
    assert "4 samples ok, 2 failed of 6" in result.stderr
    assert "failed: 2 x invalid reply after 0 repair(s) (first: no JSON object" in result.stderr
    assert scalar(db_path, "SELECT count(*) FROM judgments WHERE final AND status = 'ok'") == 44


@pytest.mark.parametrize(
    ("allowance", "code"), [("2", 0), ("1", 1), ("34%", 0), ("33%", 1), ("100%", 0)]
)
def test_allow_failures_count_and_percent(
    half_broken: FakeOpenAIServer, items_file: Path, db_path: Path, allowance: str, code: int
) -> None:
    # 2 of 6 items fail: 33% of 6 allows 1 (rounded down), 34% allows 2.
    result = _run(half_broken, items_file, db_path, "--allow-failures", allowance)
    assert result.exit_code == code, result.stderr


def test_allow_failures_rejects_nonsense(items_file: Path, db_path: Path) -> None:
    result = invoke("run", "--data", str(items_file), "--allow-failures", "some")
    assert result.exit_code == 2
    assert "--allow-failures" in result.stderr
    assert not db_path.exists()


def test_resume_applies_the_rule_to_the_whole_run(
    half_broken: FakeOpenAIServer, items_file: Path, db_path: Path
) -> None:
    run_id = _run(half_broken, items_file, db_path).stdout.strip()
    again = invoke("run", "--resume", run_id, "--db", str(db_path), "--no-progress")
    assert again.exit_code == 1
    assert "already complete" in again.stderr
    ok = invoke(
        "run", "--resume", run_id, "--db", str(db_path), "--no-progress", "--allow-failures", "2"
    )
    assert ok.exit_code == 0, ok.stderr
