"""Startup time of the `judge` CLI, as ratios to a bare `python -c pass` measured in the same run.

`judge --version` and `judge --help` must stay under 0.5 s on a quiet machine: they import no
command module (commands load lazily), so AutoGen, litellm, scipy and DuckDB are not paid for.
`judge run --help` must too: its options come from a registry (`cli/_options.py`) that imports
typer only, and the API loads when the command runs. `judge agree --help` likewise: the command
module imports the statistics, the store and the report writer inside the commands, and
`clinjudge.analysis` loads its modules on first use (3-5 s before, with scipy, the store and the
model clients imported for the help text). `judge runs list` (on an empty store) must
stay under 1 s: the store loads without the model clients or the statistics.

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
    "judge runs list": 1.0,
}


def _seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env={**os.environ, "COLUMNS": "100"})
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs per case (median is kept)")
    repeat = parser.parse_args().repeat
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "empty.duckdb"
        RunStore(db).close()
        cases = {**CASES, "judge runs list": [JUDGE, "runs", "list", "--db", str(db)]}
        _report(_medians(cases, repeat))


def _medians(cases: dict[str, list[str]], repeat: int) -> dict[str, float]:
    for command in cases.values():  # warm the file cache
        _seconds(command)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):  # interleaved, so load on the machine hits every case alike
        for name, command in cases.items():
            samples[name].append(_seconds(command))
    return {name: statistics.median(values) for name, values in samples.items()}


def _report(medians: dict[str, float]) -> None:
    base = medians["python -c pass"]
    print(f"{'case':<20} {'median s':>9} {'x python -c pass':>17}")
    for name, seconds in medians.items():
        print(f"{name:<20} {seconds:>9.3f} {seconds / base:>17.1f}")
    for name, target in TARGETS.items():
        verdict = "ok" if medians[name] < target else "over"
        print(f"{name}: {medians[name]:.3f} s ({verdict}: target < {target} s)")


if __name__ == "__main__":
    main()
