"""Rate limiting: a single-judge run paced by ``rpm`` against a fake server that enforces it.

The fake server runs in its own process (as in bench/throughput.py) with a fixed latency and its
own sliding 60 s requests-per-minute limit, answering 429 with Retry-After beyond it. The judge is
configured with the same ``rpm``. Prints the achieved requests per minute over the run divided by
the limit (target 0.9-1.0, never above), the most requests the server accepted in any 60 s window
(must not exceed the limit), and the 429s provoked (target 0). The default 4,500/min makes 5,000
items take a little over a minute, so the server's 60 s window is really exercised.

Usage: python bench/rate_limit.py [--items 5000] [--rpm 4500] [--latency 0.05] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.throughput import _start_server as start_fake_server  # noqa: E402
from bench.throughput import prepare_bench_run  # noqa: E402
from clinjudge.judges import ModelSettings  # noqa: E402
from clinjudge.orchestration import execute_run  # noqa: E402
from clinjudge.rubrics import Item  # noqa: E402


def _start_server(latency: float, rpm_limit: int) -> tuple[subprocess.Popen[str], str]:
    return start_fake_server(latency, "--rpm-limit", str(rpm_limit))


def _stop_server(process: subprocess.Popen[str]) -> dict[str, int]:
    process.terminate()
    out, _ = process.communicate(timeout=30)
    for line in out.splitlines():
        if line.startswith("STATS "):
            return {k: int(v) for k, v in (f.split("=") for f in line.split()[1:])}
    raise RuntimeError(f"fake server printed no stats: {out!r}")


def _items(count: int) -> list[Item]:
    note = "Seen for follow-up of hypertension. Blood pressure 138/84. Continue lisinopril. " * 4
    return [
        Item(
            id=f"rl-{n:05d}",
            notes=[note],
            summary=f"Patient {n}: hypertension, stable [Note 1].",
            specialty="Primary Care",
        )
        for n in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--rpm", type=int, default=4500, help="limit of judge and server")
    parser.add_argument("--server-rpm", type=int, default=None, help="default: --rpm")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    server_rpm = args.server_rpm or args.rpm

    server, base_url = _start_server(args.latency, server_rpm)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            judge = ModelSettings(
                model="openai/local-judge", base_url=base_url, timeout=30, rpm=args.rpm
            )
            prepared, store, run_id = prepare_bench_run(
                Path(tmp), _items(args.items), args.concurrency, judge
            )
            wall0 = time.perf_counter()
            tally = execute_run(store, run_id, prepared, show_progress=False)
            wall = time.perf_counter() - wall0
            store.close()
    finally:
        stats = _stop_server(server)

    achieved = stats["requests"] / wall * 60
    print(
        f"items={args.items} rpm={args.rpm} server_rpm={server_rpm} "
        f"latency={args.latency * 1000:.0f} ms concurrency={args.concurrency}"
    )
    print(f"ok={tally.ok} failed={tally.failed} requests={stats['requests']} wall={wall:.1f} s")
    print(f"achieved={achieved:.0f} req/min  runner_reported={tally.achieved_rpm or 0:.0f} req/min")
    print(f"achieved/limit={achieved / args.rpm:.3f}  (target 0.9-1.0, never above)")
    print(f"max_in_any_60s_window={stats['max_in_60s']}  (limit {server_rpm})")
    print(f"429s_provoked={stats['rate_limited']}  (target 0)")


if __name__ == "__main__":
    main()
