"""Progress off a terminal: plain lines with done/total, rate, ETA, tokens and cost."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from clinjudge.orchestration import RunProgress
from tests.cli._helpers import invoke, scalar

LINE = re.compile(
    r"progress: (\d+)/(\d+) samples \((\d+)%\), ok (\d+), failed (\d+), ([\d,.]+|-) samples/min"
    r"(?: \([\d,]+ req/min\))?, elapsed (\S+), ETA (\S+), tokens ([\d,]+), cost \$(\d+\.\d{4})"
)


def test_lines_every_n_seconds_without_a_terminal(items_file: Path, db_path: Path) -> None:
    result = invoke(
        "run", "--data", str(items_file), "--model", "mock/judge", "--db", str(db_path),
        "--samples", "2", "--progress-every", "0",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    lines = [LINE.search(line) for line in result.stderr.splitlines()]
    lines = [m for m in lines if m]
    # The first line, one per finished sample (every 0 s), and the last line.
    assert len(lines) >= 12
    assert "━" not in result.stderr  # no bar drawn into a log file
    done = [int(m.group(1)) for m in lines]
    assert done == sorted(done) and done[-1] == 12
    last = lines[-1]
    assert (last.group(2), last.group(3), last.group(4), last.group(5)) == ("12", "100", "12", "0")
    assert last.group(8) == "0s"
    stored = scalar(db_path, "SELECT sum(prompt_tokens + completion_tokens) FROM calls")
    assert int(last.group(9).replace(",", "")) == stored


def test_env_sets_the_interval(items_file: Path, db_path: Path) -> None:
    result = invoke(
        "run", "--data", str(items_file), "--model", "mock/judge", "--db", str(db_path),
        env={"CLINJUDGE_PROGRESS_SECONDS": "3600"},
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    # An hour between lines: only the first and the last line of this short run.
    assert len([line for line in result.stderr.splitlines() if LINE.search(line)]) == 2


def test_eta_and_rate_from_a_fake_clock() -> None:
    now = [100.0]
    out = io.StringIO()
    progress = RunProgress(
        Console(file=out, force_terminal=False, width=300), 40, interval=30, clock=lambda: now[0]
    )
    progress.start()
    for _ in range(10):
        now[0] += 6.0  # 10 samples in 60 s: 10 per minute, 30 left: 3 minutes
        progress.advance(True, 100, 0.01)
    lines = [LINE.search(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 3  # start, after 30 s, after 60 s
    last = lines[-1]
    assert last.group(1) == "10" and last.group(6) == "10.0"
    assert last.group(7) == "1m00s" and last.group(8) == "3m00s"
    assert last.group(9) == "1,000" and last.group(10) == "0.1000"
