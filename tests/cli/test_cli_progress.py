"""Progress off a terminal: plain lines with done/total, rate, ETA, tokens and cost."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from clinjudge.orchestration._progress import RunProgress
from tests.cli._helpers import invoke, scalar
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

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


def test_a_timer_line_says_what_is_in_flight_before_any_sample_finishes(
    tmp_path: Path, db_path: Path
) -> None:
    # Issue #28: a slow endpoint printed nothing for 12 minutes, since lines came only when a
    # sample finished. Now a timer prints them, with the calls in flight and the oldest's age.
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    with FakeOpenAIServer(latency=2.5) as srv:
        result = invoke(
            "run", "--data", str(data), "--model", "openai/local", "--base-url", srv.base_url,
            "--db", str(db_path), "--progress-every", "1",
        )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if LINE.search(line)]
    waiting = [line for line in lines if LINE.search(line).group(1) == "0"]  # type: ignore[union-attr]
    flight = [re.search(r"(\d+) calls in flight \(oldest (\d+)s\)", line) for line in waiting]
    seen = [(int(m.group(1)), int(m.group(2))) for m in flight if m]
    assert seen, result.stderr
    assert all(n == 2 for n, _ in seen) and max(age for _, age in seen) >= 1
    # The end is printed once.
    assert len([line for line in lines if "(100%)" in line]) == 1, result.stderr


def test_the_last_line_is_printed_once() -> None:
    out = io.StringIO()
    progress = RunProgress(Console(file=out, force_terminal=False, width=300), 2, interval=0)
    progress.start()
    progress.advance(True, 10, 0.0)
    progress.advance(True, 10, 0.0)  # 2/2, printed: interval 0
    progress.stop()  # nothing new to say
    done = [line for line in out.getvalue().splitlines() if "2/2 samples (100%)" in line]
    assert len(done) == 1
