"""Startup time of the `judge` CLI, as ratios to a bare `python -c pass` measured in the same run.

`judge --version` and `judge --help` must stay under 0.5 s on a quiet machine: they import no
command module (commands load lazily), so AutoGen, litellm, scipy and DuckDB are not paid for.
`judge run --help` imports the run command and shows what a full import costs.

    python bench/startup.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

JUDGE = str(Path(sys.executable).parent / "judge")  # the installed console script
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "judge --version": [JUDGE, "--version"],
    "judge --help": [JUDGE, "--help"],
    "judge run --help": [JUDGE, "run", "--help"],
}
TARGET_SECONDS = 0.5


def _seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env={**os.environ, "COLUMNS": "100"})
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs per case (median is kept)")
    repeat = parser.parse_args().repeat
    for command in CASES.values():  # warm the file cache
        _seconds(command)
    samples: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(repeat):  # interleaved, so load on the machine hits every case alike
        for name, command in CASES.items():
            samples[name].append(_seconds(command))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base = medians["python -c pass"]
    print(f"{'case':<20} {'median s':>9} {'x python -c pass':>17}")
    for name, seconds in medians.items():
        print(f"{name:<20} {seconds:>9.3f} {seconds / base:>17.1f}")
    for name in ("judge --version", "judge --help"):
        verdict = "ok" if medians[name] < TARGET_SECONDS else "over"
        print(f"{name}: {medians[name]:.3f} s ({verdict}: target < {TARGET_SECONDS} s)")


if __name__ == "__main__":
    main()
