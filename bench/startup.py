"""Startup time of the `judge` CLI, as ratios to a bare `python -c pass` measured in the same run.

`judge --version` and `judge --help` must stay under 0.5 s on a quiet machine: they import no
command module (commands load lazily), so AutoGen, litellm, scipy and DuckDB are not paid for.
`judge run --help` must too: its options come from a registry (`cli/_options.py`) that imports
typer only, and the API loads when the command runs. `judge agree --help` likewise: the command
module imports the statistics, the store and the report writer inside the commands, and
`clinjudge.analysis` loads its modules on first use (3-5 s before, with scipy, the store and the
model clients imported for the help text). `judge runs list` (on an empty store, #24: under
0.5 s) loads the store without the model clients, the statistics or pyarrow (loaded with the
first Arrow table). `judge runs show` of a 5-item run (#24: under 0.5 s) reads the run's rubric
without scipy, its deciding agent from a table that imports nothing (`_util/modes.py`, not the
workflow registry, which loads the model clients), and loads the DocLens analysis only for a
DocLens run. `judge export` of a 1,000-item run (#24: under 1 s of CPU) is
timed too, with its CPU seconds (user + system of the child). Both runs are judged through the
fake OpenAI server of the tests (a simulated run's notice loads the model clients, ~1 s).
Each command runs with bytecode caching on (in a temporary cache folder, as an installed
package has its `.pyc` files), even where PYTHONDONTWRITEBYTECODE is set: otherwise every
clinjudge module is compiled again on each start.

Issue 39 (everyday use) adds the read-only commands on a small store made as a user makes one
(`judge run --model mock/judge --data examples/pdsqi9_demo.jsonl`, the demo's 330 ratings, and
a simulated three-vendor audit of examples/audit/): `runs show` and `export` of the simulated
run, `ratings import` of the 330 ratings, `agree`, `compare`, `report` and `audit plan`; each
should cost at most 0.5 s above `python -c pass` (wall and CPU: import cost, not work). They
got there without pandas (pyarrow looked for it on its first conversion: `without_pandas` in
`_util/pandas_import.py`), without the web viewer (`clinjudge.reports` loads its names on first
use) and, for `ratings import`, without pyarrow (a few hundred rows are bound as parameters). And
`judge run` of an OpenAI-compatible endpoint (`--base-url`, the fake server) should spend at
most 1.0 s of CPU from exec to its first request: the server holds each request, and the CPU
the child has spent (user + system, /proc/PID/stat, so Linux only) is read the moment the first
one arrives. Printed: a table of every case's median wall and CPU seconds, both above
`python -c pass`, and its ratio to it, then each target's verdict.

    python bench/startup.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clinjudge.runs import RunStore

JUDGE = str(Path(sys.executable).parent / "judge")  # the installed console script
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "judge --version": [JUDGE, "--version"],
    "judge --help": [JUDGE, "--help"],
    "judge run --help": [JUDGE, "run", "--help"],
    "judge agree --help": [JUDGE, "agree", "--help"],
}
TARGETS = {
    "judge --version": 0.5,
    "judge --help": 0.5,
    "judge run --help": 0.5,
    "judge agree --help": 0.5,
    "judge runs list": 0.5,
    "judge runs show": 0.5,
}
CPU_TARGETS = {"judge export (1,000 items)": 1.0}
ABOVE_PASS_TARGETS = {
    "judge runs show (simulated)": 0.5,
    "judge export (simulated)": 0.5,
    "judge ratings import (330)": 0.5,
    "judge agree": 0.5,
    "judge compare": 0.5,
    "judge report": 0.5,
    "judge audit plan": 0.5,
}
"""Issue 39: seconds above `python -c pass`, wall and CPU alike, on a small store."""
FIRST_REQUEST_CPU_TARGET = 1.0
"""Issue 39: CPU seconds of `judge run --base-url` from exec to its first request."""
ROOT = Path(__file__).resolve().parent.parent


_CPU: dict[str, list[float]] = {}
"""CPU seconds (user + system) of each case's child processes, per run."""
_ENV = {**os.environ, "COLUMNS": "100"}
"""The commands' environment (main() adds the bytecode cache folder)."""


def _seconds(command: list[str]) -> float:
    before = os.times()
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=_ENV)
    elapsed = time.perf_counter() - started
    after = os.times()
    user = after.children_user - before.children_user
    system = after.children_system - before.children_system
    _CPU.setdefault(" ".join(command), []).append(user + system)
    return elapsed


def _stored_run(db: Path, items: int, base_url: str) -> str:
    """A single-judge run of ``items`` items in ``db``, judged through the fake OpenAI server
    at ``base_url`` (a real provider's run: not simulated); its id."""
    import clinjudge
    from tests.factories import make_items, write_jsonl

    data = write_jsonl(db.with_suffix(".jsonl"), make_items(items))
    result = clinjudge.evaluate(data, model="openai/gpt-4o-mini", base_url=base_url, db=db)
    return result.run_id


def _judge_out(*args: str) -> str:
    """Run ``judge ARGS`` (the console script, with the cases' environment); its stdout."""
    done = subprocess.run([JUDGE, *args], check=True, capture_output=True, text=True, env=_ENV)
    return done.stdout.strip()


def _small_store(db: Path) -> tuple[str, str]:
    """The issue's small store in ``db``: a simulated 10-item run of the demo data with the
    demo's 330 ratings, and a simulated three-vendor audit with its ratings. The two run ids."""
    demo, audit = ROOT / "examples", ROOT / "examples" / "audit"
    quiet = ["--db", str(db), "--no-progress"]
    run = _judge_out(
        "run", "--model", "mock/judge", "--data", str(demo / "pdsqi9_demo.jsonl"), *quiet
    )
    _judge_out("ratings", "import", str(demo / "pdsqi9_demo_ratings.jsonl"), "--db", str(db))
    vendors = [a for v in "abc" for a in ("--data", str(audit / f"vendor_{v}.jsonl"))]
    audited = _judge_out(
        "audit", *vendors, "--ratings", str(audit / "ratings.jsonl"), "--mode", "single", *quiet
    )
    return run.splitlines()[-1], audited.splitlines()[-1]


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a running process has spent so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _first_request_cpu(folder: Path, repeat: int) -> list[float]:
    """CPU seconds of `judge run --base-url` from exec to its first request, per try.

    The fake server holds each request for 30 s, so the child is idle (waiting for the reply)
    when its CPU is read; it is then killed.
    """
    from tests.fake_openai import FakeOpenAIServer

    data = ROOT / "examples" / "pdsqi9_demo.jsonl"
    seconds = []
    for n in range(repeat + 1):  # the first warms the file and bytecode caches
        db = folder / f"first-request-{n}.duckdb"
        with FakeOpenAIServer(latency=30.0) as server:
            command = [
                JUDGE, "run", "--data", str(data), "--model", "openai/gpt-4o-mini",
                "--base-url", server.base_url, "--db", str(db), "--no-progress",
                "--limit", "1", "--concurrency", "1",
            ]  # fmt: skip
            child = subprocess.Popen(
                command, env=_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            try:
                while server.request_count == 0:
                    if child.poll() is not None:
                        raise RuntimeError(child.stderr.read().decode() if child.stderr else "")
                    time.sleep(0.002)
                cpu = _proc_cpu(child.pid)
            finally:
                child.kill()
                child.communicate()
        if n:
            seconds.append(cpu)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs per case (median is kept)")
    repeat = parser.parse_args().repeat
    with tempfile.TemporaryDirectory() as folder:
        # Compiled once (the warm-up run), then read as an installed package reads its .pyc.
        _ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        _ENV["PYTHONPYCACHEPREFIX"] = str(Path(folder) / "pycache")
        db = Path(folder) / "empty.duckdb"
        RunStore(db).close()
        small, big = Path(folder) / "small.duckdb", Path(folder) / "big.duckdb"
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's tests
        from tests.fake_openai import FakeOpenAIServer

        os.environ.pop("OPENAI_API_KEY", None)  # the loopback server needs none
        with FakeOpenAIServer() as server:
            small_run = _stored_run(small, 5, server.base_url)
            big_run = _stored_run(big, 1000, server.base_url)
        out = str(Path(folder) / "export.jsonl")
        demo = Path(folder) / "demo.duckdb"
        mock_run, audit_run = _small_store(demo)
        on_demo = ["--db", str(demo)]
        write = ["--out", out, "--force"]
        report = ["--out", str(Path(folder) / "report")]
        ratings = str(ROOT / "examples" / "pdsqi9_demo_ratings.jsonl")
        cases = {
            **CASES,
            "judge runs list": [JUDGE, "runs", "list", "--db", str(db)],
            "judge runs show": [JUDGE, "runs", "show", small_run, "--db", str(small)],
            "judge export (1,000 items)": [
                JUDGE, "export", big_run, "--out", out, "--db", str(big), "--force",
            ],
            "judge runs show (simulated)": [JUDGE, "runs", "show", mock_run, *on_demo],
            "judge export (simulated)": [JUDGE, "export", mock_run, *write, *on_demo],
            "judge ratings import (330)": [JUDGE, "ratings", "import", ratings, *on_demo],
            "judge agree": [JUDGE, "agree", mock_run, *on_demo],
            "judge compare": [JUDGE, "compare", mock_run, *on_demo],
            "judge report": [JUDGE, "report", mock_run, *report, *on_demo],
            "judge audit plan": [JUDGE, "audit", "plan", "--run", audit_run, *on_demo],
        }  # fmt: skip
        medians = _medians(cases, repeat)
        first_request = _first_request_cpu(Path(folder), repeat)
        _report(medians, cases)
        _report_first_request(first_request)


def _medians(cases: dict[str, list[str]], repeat: int) -> dict[str, float]:
    for command in cases.values():  # warm the file cache
        _seconds(command)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):  # interleaved, so load on the machine hits every case alike
        for name, command in cases.items():
            samples[name].append(_seconds(command))
    return {name: statistics.median(values) for name, values in samples.items()}


def _report(medians: dict[str, float], cases: dict[str, list[str]]) -> None:
    base = medians["python -c pass"]
    # The first run of each case warmed the file cache: its CPU time is left out too.
    cpu = {name: statistics.median(_CPU[" ".join(cases[name])][1:]) for name in cases}
    base_cpu = cpu["python -c pass"]
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(
        f"{'case':<29} {'median s':>9} {'x python -c pass':>17} {'CPU s':>7}"
        f" {'s above pass':>13} {'CPU above pass':>15}"
    )
    for name, seconds in medians.items():
        print(
            f"{name:<29} {seconds:>9.3f} {seconds / base:>17.1f} {cpu[name]:>7.3f}"
            f" {seconds - base:>13.3f} {cpu[name] - base_cpu:>15.3f}"
        )
    for name, target in TARGETS.items():
        verdict = "ok" if medians[name] < target else "over"
        print(f"{name}: {medians[name]:.3f} s ({verdict}: target < {target} s)")
    for name, target in CPU_TARGETS.items():
        verdict = "ok" if cpu[name] < target else "over"
        print(f"{name}: {cpu[name]:.3f} s of CPU ({verdict}: target < {target} s)")
    for name, target in ABOVE_PASS_TARGETS.items():
        wall, spent = medians[name] - base, cpu[name] - base_cpu
        verdict = "ok" if max(wall, spent) <= target else "over"
        print(
            f"{name}: {wall:.3f} s wall, {spent:.3f} s CPU above python -c pass"
            f" ({verdict}: target <= {target} s)"
        )


def _report_first_request(seconds: list[float]) -> None:
    median = statistics.median(seconds)
    verdict = "ok" if median <= FIRST_REQUEST_CPU_TARGET else "over"
    tries = ", ".join(f"{s:.2f}" for s in seconds)
    print(
        f"judge run --base-url, exec to first request: {median:.3f} s of CPU (median of"
        f" {tries}; {verdict}: target <= {FIRST_REQUEST_CPU_TARGET} s)"
    )


if __name__ == "__main__":
    main()
