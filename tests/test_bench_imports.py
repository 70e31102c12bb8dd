"""Benchmarks are code: every ``bench/*.py`` imports and answers ``--help`` (issue 39: a renamed
helper in ``bench/throughput.py`` left ``bench/peers.py`` failing on import unnoticed)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py"))


@cache
def _helps() -> dict[str, subprocess.CompletedProcess[str]]:
    """Each script's ``--help``, run as its users run it; two at a time, as the machine has two
    cores and most of each is the interpreter importing clinjudge."""

    def one(name: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(ROOT / "bench" / name), "--help"]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(SCRIPTS, pool.map(one, SCRIPTS), strict=True))


def test_there_are_benchmarks() -> None:
    assert "startup.py" in SCRIPTS and "peers.py" in SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_imports_and_answers_help(name: str) -> None:
    done = _helps()[name]
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout.lower(), done.stdout[-2000:]
