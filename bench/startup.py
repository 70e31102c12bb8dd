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
        cases = {
            **CASES,
            "judge runs list": [JUDGE, "runs", "list", "--db", str(db)],
            "judge runs show": [JUDGE, "runs", "show", small_run, "--db", str(small)],
            "judge export (1,000 items)": [
                JUDGE, "export", big_run, "--out", out, "--db", str(big), "--force",
            ],
        }  # fmt: skip
        _report(_medians(cases, repeat), cases)


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
    print(f"{'case':<27} {'median s':>9} {'x python -c pass':>17} {'CPU s':>7}")
    for name, seconds in medians.items():
        print(f"{name:<27} {seconds:>9.3f} {seconds / base:>17.1f} {cpu[name]:>7.3f}")
    for name, target in TARGETS.items():
        verdict = "ok" if medians[name] < target else "over"
        print(f"{name}: {medians[name]:.3f} s ({verdict}: target < {target} s)")
    for name, target in CPU_TARGETS.items():
        verdict = "ok" if cpu[name] < target else "over"
        print(f"{name}: {cpu[name]:.3f} s of CPU ({verdict}: target < {target} s)")


if __name__ == "__main__":
    main()
