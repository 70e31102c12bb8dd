"""Secrets and PHI: a canary API key never reaches the database, logs, exports or reports; the
database is owner-only; a run talks to no host but its configured endpoint."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli._helpers import JUDGE, invoke, query
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer
from tests.survival.factories import NetworkGuard, make_config, run_in_process

CANARY = "sk-canary-" + "q7Zx3" * 8
FORMATS = ("jsonl", "csv", "parquet")


class KeyEchoServer(FakeOpenAIServer):
    """Records the Authorization header; answers the first request 400 quoting it back, as a
    careless provider might (the key then sits in an exception message)."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.auth: list[str | None] = []

    def _handle_chat(self, handler: Any, body: dict[str, Any]) -> None:
        header = handler.headers.get("Authorization")
        with self._lock:
            self.auth.append(header)
            first = len(self.auth) == 1
        if first:
            message = f"Incorrect API key provided: {header}. Check your key."
            handler._send(400, f'{{"error": {{"message": "{message}", "type": "auth"}}}}'.encode())
            return
        super()._handle_chat(handler, body)


def _judge(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"CLINJUDGE_MODEL", "COLUMNS"}}
    env.update(OPENAI_API_KEY=CANARY, CLINJUDGE_TEST_KEY=CANARY, NO_COLOR="1")
    return subprocess.run(
        [JUDGE, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


@pytest.mark.needs_judge_script
def test_canary_key_never_stored_logged_or_exported(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(5))
    db = tmp_path / "private" / "runs.duckdb"
    logs: list[str] = []
    with KeyEchoServer() as srv:
        run = _judge(
            "run", "--data", str(data), "--model", "openai/local-judge", "--base-url",
            srv.base_url, "--db", str(db), "--samples", "2", "--concurrency", "1",
            "--no-progress", cwd=tmp_path,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        auth = list(srv.auth)
    # The key was really used: every request carried it, the first got it quoted back.
    assert auth and all(a == f"Bearer {CANARY}" for a in auth)
    run_id = run.stdout.strip()
    logs += [run.stdout, run.stderr]
    assert "1 failed" in run.stderr  # the failed sample is reported ...

    out = tmp_path / "out"
    # The other commands run in this process (faster), with the key in their environment too.
    for args in (
        *(["export", run_id, "--out", str(out / f"j.{f}"), "--format", f] for f in FORMATS),
        ["runs", "show", run_id, "--json"],
        ["runs", "show", run_id],
        ["runs", "list"],
        ["report", run_id, "--out", str(out / "report")],
    ):
        done = invoke(*args, "--db", str(db), env={"OPENAI_API_KEY": CANARY})
        assert done.exit_code == 0, done.stderr
        logs += [done.stdout, done.stderr]
    assert (out / "report").is_dir() and any((out / "report").iterdir())

    for text in logs:
        assert CANARY not in text
        assert CANARY[10:30] not in text  # not even a fragment
    files = [p for p in [*db.parent.iterdir(), *out.rglob("*")] if p.is_file()]
    assert db in files and len(files) >= 5
    for path in files:
        content = path.read_bytes()
        assert CANARY.encode() not in content, f"key found in {path}"
        assert CANARY[10:30].encode() not in content, f"key fragment found in {path}"

    # ... but with the key scrubbed from the stored reason.
    errors = query(db, "SELECT error FROM calls WHERE status <> 'ok'")
    assert errors and all("HTTP 400" in e and "[redacted]" in e for (e,) in errors)

    # PHI lives in this file: owner-only, and so is the folder created for it.
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    for path in db.parent.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path


@pytest.mark.parametrize(
    ("model", "client"),
    [
        ("openai/local-judge", "direct"),
        ("openai/local-judge", "autogen"),
        ("litellm/openai/local-judge", "auto"),
    ],
    ids=["direct", "openai_sdk", "litellm"],
)
def test_a_run_connects_only_to_the_configured_endpoint(
    network_guard: NetworkGuard, tmp_path: Path, model: str, client: str
) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(4))
    with FakeOpenAIServer() as srv:
        network_guard.allow("127.0.0.1", srv.port)
        config = make_config(
            data, srv, tmp_path / "g.duckdb", judge={"model": model, "client": client}
        )
        store, run_id, tally = run_in_process(config)
        requests = srv.request_count
    store.close()
    assert network_guard.blocked == []
    assert tally.ok == 4 and requests == 4
    assert network_guard.connected  # the guard saw the run's connections
    assert set(network_guard.connected) == {("127.0.0.1", srv.port)}


def test_the_guard_itself_refuses_other_hosts(network_guard: NetworkGuard) -> None:
    import socket

    with pytest.raises(OSError), socket.socket() as sock:
        sock.connect(("127.0.0.1", 9))
    with pytest.raises(OSError):
        socket.getaddrinfo("api.openai.com", 443)
    assert network_guard.blocked == ["127.0.0.1:9", "lookup api.openai.com"]


def test_fault_reasons_never_carry_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    from clinjudge.judges import ProviderFault
    from clinjudge.judges.clients._faults import redact_secrets, remember_secret

    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok_abcdefgh12345")
    remember_secret("plainkeyvalue-0001")
    text = (
        "denied for tok_abcdefgh12345 / plainkeyvalue-0001 / Authorization: Bearer abc.def-123456"
        " / sk-proj-ABCDEFGH12345678"
    )
    cleaned = redact_secrets(text)
    for secret in ("tok_abcdefgh12345", "plainkeyvalue-0001", "abc.def-123456", "sk-proj-ABCD"):
        assert secret not in cleaned
    assert cleaned.count("[redacted]") == 4
    assert ProviderFault(text, retryable=False).reason == cleaned
    assert redact_secrets("HTTP 500: server error at 12:00") == "HTTP 500: server error at 12:00"
