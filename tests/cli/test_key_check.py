"""A run whose models lack their API key (or Azure endpoint) is refused before it is stored:
exit 2, a message naming the variable, no failed run that suggests --resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cli._helpers import invoke, query
from tests.fake_openai import FakeOpenAIServer

KEY_VARS = ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", "CJ_TEST_KEY")


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEY_VARS:
        monkeypatch.delenv(name, raising=False)


def _runs(db: Path) -> list[tuple]:
    return query(db, "SELECT run_id, status FROM runs")


def test_missing_key_stores_nothing_and_suggests_no_resume(items_file: Path, db_path: Path) -> None:
    # The store already exists (an earlier run): the refused run must not be added to it.
    first = invoke(
        "run", "--data", str(items_file), "--model", "mock/judge", "--db", str(db_path),
        "--no-progress",
    )  # fmt: skip
    assert first.exit_code == 0, first.stderr
    before = _runs(db_path)
    result = invoke(
        "run", "--data", str(items_file), "--model", "openai/gpt-4o-mini", "--db", str(db_path),
        "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 2, result.stderr
    assert "OPENAI_API_KEY" in result.stderr
    assert "--resume" not in result.stderr
    assert result.stdout == ""  # no run id: there is no run
    assert _runs(db_path) == before


def test_missing_key_creates_no_database(items_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "new" / "runs.duckdb"
    result = invoke(
        "run", "--data", str(items_file), "--model", "openai/gpt-4o-mini", "--db", str(db),
        "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 2, result.stderr
    assert not db.exists()


def test_panel_member_without_its_key_is_refused(
    items_file: Path, tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    """The judge has a key (a local server needs none); one role names a variable that is
    unset: the whole run is refused before it is stored."""
    db = tmp_path / "panel.duckdb"
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "data": str(items_file),
                "db": str(db),
                "mode": "panel",
                "judge": {"model": "openai/local-judge", "base_url": fake_openai.base_url},
                "roles": {"panel_member": {"model": "openai/gpt-4o", "api_key_env": "CJ_TEST_KEY"}},
            }
        )
    )
    result = invoke("run", "--config", str(config), "--no-progress")
    assert result.exit_code == 2, result.stderr
    assert "CJ_TEST_KEY" in result.stderr and "--resume" not in result.stderr
    assert fake_openai.request_count == 0
    assert not db.exists()


def test_azure_without_endpoint_is_refused(items_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "az.duckdb"
    result = invoke(
        "run", "--data", str(items_file), "--model", "azure/my-deployment", "--db", str(db),
        "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 2, result.stderr
    assert "AZURE_OPENAI_ENDPOINT" in result.stderr
    assert not db.exists()


def test_local_server_needs_no_key(
    items_file: Path, db_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    result = invoke(
        "run", "--data", str(items_file), "--model", "openai/local-judge",
        "--base-url", fake_openai.base_url, "--db", str(db_path), "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert [status for _, status in _runs(db_path)] == ["completed"]


AUDIT_VENDORS = Path(__file__).resolve().parents[2] / "examples" / "audit"


def test_audit_without_key_is_refused_and_its_dry_run_needs_none(tmp_path: Path) -> None:
    data = [a for v in "ab" for a in ("--data", str(AUDIT_VENDORS / f"vendor_{v}.jsonl"))]
    db = tmp_path / "audit.duckdb"
    args = ["audit", *data, "--model", "openai/gpt-4o-mini", "--db", str(db)]
    result = invoke(*args, "--no-progress")
    assert result.exit_code == 2, result.stderr
    assert "OPENAI_API_KEY" in result.stderr and "--resume" not in result.stderr
    assert not db.exists()
    dry = invoke(*args, "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert not db.exists()


def test_resume_without_the_key_leaves_the_run_as_it_was(
    items_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run with work left (stopped at its budget), resumed after its key was unset: refused
    before any call, the stored run unchanged (not marked failed again)."""
    db = tmp_path / "runs.duckdb"
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "data": str(items_file),
                "db": str(db),
                # The budget is below one sample's expected cost: no call is ever sent (the
                # model needs its key: no base_url).
                "judge": {
                    "model": "openai/gpt-4o-mini",
                    "api_key_env": "CJ_TEST_KEY",
                    "price": {"input_per_mtok": 1000.0, "output_per_mtok": 1000.0},
                },
                "max_cost": 0.5,
                "concurrency": 1,
            }
        )
    )
    monkeypatch.setenv("CJ_TEST_KEY", "test-key")
    first = invoke("run", "--config", str(config), "--no-progress")
    before = _runs(db)
    ((run_id, status),) = before
    assert status == "budget_exhausted", first.stderr
    samples = query(db, "SELECT count(*) FROM samples")
    monkeypatch.delenv("CJ_TEST_KEY")
    result = invoke("run", "--resume", run_id, "--db", str(db), "--no-progress")
    assert result.exit_code == 2, result.stderr
    assert "CJ_TEST_KEY" in result.stderr and "--resume" not in result.stderr
    assert _runs(db) == before
    assert query(db, "SELECT count(*) FROM samples") == samples
