"""Memory of a provider-batch run (``judge run --batch``) at two sizes.

Each size runs in a fresh Python process (``--child``): it writes N bench items (PDSQI-9, the
items of ``bench/throughput.py``), creates the run and sends it through the batch API of the fake
OpenAI server (its own process, so its memory is not counted), one batch holding every request.
The child reports its peak resident memory (``resource.getrusage(...).ru_maxrss``), its CPU and
wall time, and the bytes of the run's request queue in the store.

What grows with the requests: the queue as stored (the system prompt once per run, the user
message per request), the input file (bounded by the providers' 190 MB / 50,000-request limit),
and DuckDB's transaction while a batch's results go in; the queue is written and read back a
page at a time and the results are settled a page at a time. Prints the peak at each size and
the growth per 1,000 requests.

Usage: python bench/batch_memory.py [--sizes 2000 8000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def child(n: int) -> dict[str, float]:
    """Run one batch run of ``n`` items in this process; its figures."""
    import throughput as bench

    from clinjudge.orchestration._batch_run import execute_batch_run

    server, base_url = bench._start_server(0.0)
    try:
        tmp = Path(tempfile.mkdtemp())
        data = tmp / "items.jsonl"
        data.write_text("".join(i.model_dump_json() + "\n" for i in bench.bench_items(n)))
        os.environ.setdefault("OPENAI_API_KEY", "bench-not-a-key")
        settings = bench.ModelSettings(model="openai/gpt-4o-mini", base_url=base_url, timeout=30)
        config = bench.RunConfig(data=str(data), db=str(tmp / "b.duckdb"), judge=settings)
        prepared = bench.prepare_run(config)
        store = bench.RunStore(config.db)
        run_id = bench.create_run(store, prepared)
        cpu, wall = time.process_time(), time.perf_counter()
        tally = execute_batch_run(store, run_id, prepared, show_progress=False, poll_interval=0)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        row = store.con.execute(
            "SELECT sum(strlen(messages::VARCHAR)) FROM provider_batch_requests"
        ).fetchone()
        store.close()
    finally:
        server.terminate()
    assert tally.ok == n, f"{tally.ok} of {n} samples ok"
    return {
        "items": n,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cpu_s": cpu,
        "wall_s": wall,
        "queue_mb": float(row[0] or 0) / 1e6 if row else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[2000, 8000])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    figures = []
    for n in args.sizes:
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(n)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        figures.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for f in figures:
        print(
            f"{f['items']:>6} requests: peak RSS {f['peak_rss_mb']:.0f} MB, "
            f"queue {f['queue_mb']:.1f} MB in the store, CPU {f['cpu_s']:.1f} s, "
            f"wall {f['wall_s']:.1f} s"
        )
    small, large = figures
    growth = (large["peak_rss_mb"] - small["peak_rss_mb"]) / (large["items"] - small["items"])
    print(
        f"peak RSS grows {growth * 1000:.1f} MB per 1,000 requests "
        f"({large['peak_rss_mb'] / small['peak_rss_mb']:.2f}x for "
        f"{large['items'] / small['items']:.0f}x the requests)"
    )


if __name__ == "__main__":
    main()
