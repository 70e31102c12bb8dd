"""Secrets in a base URL's query string, and keys pasted where a variable name belongs, never
reach the database, stderr, the viewer's pages or exports."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cli._helpers import JUDGE, query
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

SECRET = "Qs3cr3t-" + "w9Kp" * 6


def _judge(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"CLINJUDGE_MODEL", "COLUMNS"}}
    env.update(OPENAI_API_KEY="not-a-real-key-123", NO_COLOR="1")
    return subprocess.run(
        [JUDGE, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def _files_under(*folders: Path) -> list[Path]:
    return [p for folder in folders for p in folder.rglob("*") if p.is_file()]


@pytest.mark.needs_judge_script
@pytest.mark.parametrize("param", ["api-key", "key", "token", "sig", "code"])
def test_a_query_string_secret_never_reaches_reasons_pages_or_exports(
    tmp_path: Path, param: str
) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "db" / "runs.duckdb"
    with FakeOpenAIServer() as srv:
        # A wrong path: the server answers 404 quoting the URL it was sent, query and all, and
        # a 404 stops the run with that reason.
        base_url = f"{srv.base_url}/nope?{param}={SECRET}&api-version=2024-06-01"
        run = _judge(
            "run", "--data", str(data), "--model", "openai/judge", "--base-url", base_url,
            "--db", str(db), "--no-progress", cwd=tmp_path,
        )  # fmt: skip
    assert run.returncode != 0
    assert "404" in run.stderr  # the reason is shown ...
    assert SECRET not in run.stdout + run.stderr  # ... without the secret

    out = tmp_path / "out"
    ((run_id, reason),) = query(db, "SELECT run_id, status_reason FROM runs")
    assert "404" in reason and "[redacted]" in reason and SECRET not in reason
    runs = _judge("runs", "show", run_id, "--db", str(db), cwd=tmp_path)
    assert runs.returncode == 0, runs.stderr
    view = _judge("view", "--db", str(db), "--export", str(out / "site"), cwd=tmp_path)
    assert view.returncode == 0, view.stderr
    for text in (runs.stdout, runs.stderr, view.stdout, view.stderr):
        assert SECRET not in text
    files = [db, *_files_under(out)]
    assert len(files) > 3
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), f"secret found in {path}"


@pytest.mark.needs_judge_script
def test_a_key_given_as_api_key_env_is_refused_and_never_stored(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "runs.duckdb"
    pasted = "sk-live-" + "Zr8q" * 8
    config = tmp_path / "judge.yaml"
    config.write_text(
        f"judge:\n  model: openai/judge\n  base_url: http://127.0.0.1:9/v1\n"
        f"  api_key_env: {pasted}\n"
    )
    with FakeOpenAIServer() as srv:
        run = _judge(
            "run", "--config", str(config), "--data", str(data), "--db", str(db),
            "--base-url", srv.base_url, "--no-progress", cwd=tmp_path,
        )  # fmt: skip
        requests = srv.request_count
    assert run.returncode == 2, run.stderr
    assert "api_key_env" in run.stderr and "NAME of an environment variable" in run.stderr
    assert pasted not in run.stdout + run.stderr
    assert pasted[8:20] not in run.stdout + run.stderr
    assert requests == 0  # refused before any call, not run keyless
    assert not db.exists() or pasted.encode() not in db.read_bytes()


def test_url_secrets_are_found_in_userinfo_and_query() -> None:
    from clinjudge._util.secrets import redact_url, url_secrets

    url = f"https://me:{SECRET}@h.example/v1?api-version=1&sig={SECRET}x&Token=t0k3n-abcdef"
    assert set(url_secrets(url)) == {"me", SECRET, f"{SECRET}x", "t0k3n-abcdef"}
    cleaned = redact_url(url)
    assert SECRET not in cleaned and "t0k3n" not in cleaned
    assert "api-version=1" in cleaned and cleaned.startswith("https://[redacted]@h.example/v1?")
