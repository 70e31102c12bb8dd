"""`judge view` refuses an address it cannot listen on with a reason, exit 2."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from clinjudge.runs import RunStore
from tests.cli._helpers import JUDGE, WIDE


def _view(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`judge view` in a process of its own: a server that did start would never return."""
    return subprocess.run(
        [JUDGE, "view", "--db", str(db), *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, **WIDE},
    )  # fmt: skip


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.duckdb"
    RunStore(path).close()
    return path


@pytest.mark.parametrize("port", ["99999", "65536", "-1"])
def test_a_port_out_of_range_is_a_usage_error(db: Path, port: str) -> None:
    result = _view(db, "--port", port)
    assert result.returncode == 2, result.stderr
    assert "a port must be 1-65535" in result.stderr
    assert "in use" not in result.stderr


def test_a_port_in_use_says_so(db: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _view(db, "--port", str(port))
    assert result.returncode == 2
    assert f"port {port} is in use" in result.stderr


def test_an_unknown_host_says_so(db: Path) -> None:
    result = _view(db, "--host", "no-such-host.invalid", "--port", "0")
    assert result.returncode == 2
    assert "unknown host 'no-such-host.invalid'" in result.stderr
    assert "port" not in result.stderr.split("unknown host")[1]
