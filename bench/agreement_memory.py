"""Memory and time of the agreement analysis at audit scale, at two sizes.

A synthetic study of N rated items x 4 human raters x 11 attributes (one of them binary) plus the
judge's final score per (item, attribute), as ``judge agree`` analyses a run: 12 blocks (11
attributes and the pooled block of the 10 Likert attributes, N x 10 units), each with alpha at
every level and the substitution and added-rater tests, all with 1,000 bootstrap resamples.

Each size runs in a fresh Python process (``--child``) that builds the ratings as an Arrow
table, runs ``analyse_ratings`` and reports its wall and CPU time and its peak resident memory
(``resource.getrusage(...).ru_maxrss``, which includes the interpreter and the input). With
``--store`` the child instead writes the ratings and a run into a DuckDB store and times
``agreement_for_run`` (the path of ``judge agree``), reading the rows from the database.

The bootstrap streams resamples in chunks of fixed size, so memory is O(units + chunk x units):
targets are peak RSS < 2 GB at 50,000 items and time roughly linear in the size (the ratio of
times close to the ratio of sizes).

Usage: python bench/agreement_memory.py [--sizes 25000 50000] [--boot 1000] [--store]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

N_RATERS = 4
N_ATTRIBUTES = 11
BINARY = f"attr{N_ATTRIBUTES}"


def make_table(n_items: int, seed: int = 0) -> pa.Table:
    """Long-format ratings (humans and one judge score per unit), built with numpy."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(3.4, 0.9, size=(N_ATTRIBUTES, n_items))
    bias = rng.normal(0, 0.3, N_RATERS)
    human = np.clip(
        np.rint(truth[:, :, None] + bias + rng.normal(0, 0.7, (N_ATTRIBUTES, n_items, N_RATERS))),
        1,
        5,
    )
    judge = np.clip(np.rint(truth + 0.3 + rng.normal(0, 0.5, truth.shape)), 1, 5)[:, :, None]
    scores = np.concatenate([human, judge], axis=2)  # (attributes, items, raters + judge)
    scores[-1] = (scores[-1] >= 4).astype(float)  # the binary attribute
    raters = [f"h{r}" for r in range(N_RATERS)] + ["judge"]
    shape = scores.shape
    attr = np.broadcast_to(np.arange(shape[0])[:, None, None], shape).ravel()
    item = np.broadcast_to(np.arange(shape[1])[None, :, None], shape).ravel()
    rater = np.broadcast_to(np.arange(shape[2])[None, None, :], shape).ravel()
    names = pa.array([f"attr{a + 1}" for a in range(N_ATTRIBUTES)])
    items = pa.array([f"item{i:06d}" for i in range(n_items)])
    return pa.table(
        {
            "unit_id": items.take(pa.array(item)),
            "rater_id": pa.array(raters).take(pa.array(rater)),
            "attribute": names.take(pa.array(attr)),
            "score": pa.array(scores.ravel()),
        }
    )


def child_analysis(n_items: int, n_boot: int) -> dict:
    from clinjudge.analysis._agreement import analyse_ratings

    table = make_table(n_items)
    categories = {f"attr{a + 1}": [1.0, 2.0, 3.0, 4.0, 5.0] for a in range(N_ATTRIBUTES - 1)}
    start, cpu = time.perf_counter(), time.process_time()
    report = analyse_ratings(
        table,
        judge="judge",
        categories=categories,
        binary_attributes={BINARY},
        n_boot=n_boot,
        seed=0,
    )
    return {
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - cpu,
        "rows": table.num_rows,
        "pooled_units": report.pooled.physicians_among_themselves.n_units,
        "primary_icc3k": report.to_dict()["pooled"]["primary"]["value"],
    }


def child_store(n_items: int, n_boot: int, db: str) -> dict:
    """Write a run and the physicians' ratings into a store, then time agreement_for_run."""
    import json as _json

    from clinjudge.analysis import agreement_for_run
    from clinjudge.rubrics import load_rubric
    from clinjudge.runs import RunStore

    # PDSQI-9's scales, widened to 11 agreement attributes (10 Likert, 1 binary).
    base = load_rubric("pdsqi9")
    likert = next(a for a in base.attributes if a.agreement and a.scale.value == "likert")
    binary = next(a for a in base.attributes if a.agreement and a.scale.value == "binary")
    attributes = [
        (binary if a == N_ATTRIBUTES - 1 else likert).model_copy(
            update={"key": f"attr{a + 1}", "name": f"Attribute {a + 1}", "aliases": []}
        )
        for a in range(N_ATTRIBUTES)
    ]
    rubric = base.model_copy(update={"attributes": attributes})
    table = make_table(n_items)
    run_id = "bench-run"
    with RunStore(db) as store:
        store.insert_rows(
            "runs",
            [
                {
                    "run_id": run_id,
                    "status": "finished",
                    "mode": "single",
                    "rubric": rubric.name,
                    "rubric_version": rubric.version,
                    "rubric_json": _json.dumps(rubric.model_dump(mode="json")),
                    "models": _json.dumps({"judge": "bench"}),
                    "config": _json.dumps({}),
                    "simulated": True,
                    "n_items": n_items,
                    "n_samples": 1,
                }
            ],
        )
        item_ids = [f"item{i:06d}" for i in range(n_items)]
        store.con.register(
            "_items", pa.table({"item_id": item_ids, "position": list(range(n_items))})
        )
        store.con.execute(
            "INSERT INTO items (run_id, item_id, position) SELECT ?, item_id, position FROM _items",
            [run_id],
        )
        store.con.register("_ratings", table)
        store.con.execute(
            "INSERT INTO human_ratings (item_id, rater_id, attribute, score) "
            "SELECT unit_id, rater_id, attribute, score FROM _ratings WHERE rater_id <> 'judge'"
        )
        store.con.execute(
            "INSERT INTO judgments (run_id, item_id, sample, agent, attribute, value, final, "
            "status) SELECT ?, unit_id, 0, 'judge', attribute, score, true, 'ok' FROM _ratings "
            "WHERE rater_id = 'judge'",
            [run_id],
        )
    del table
    with RunStore(db, read_only=True) as store:
        start, cpu = time.perf_counter(), time.process_time()
        result = agreement_for_run(store, run_id, n_boot=n_boot, seed=0)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "rows": n_items * N_ATTRIBUTES * (N_RATERS + 1),
        "pooled_units": result.pooled.physicians_among_themselves.n_units,
        "primary_icc3k": result.to_dict()["pooled"]["primary"]["value"],
    }


def run_child(n_items: int, n_boot: int, store: bool) -> dict:
    command = [sys.executable, __file__, "--child", str(n_items), "--boot", str(n_boot)]
    if store:
        command.append("--store")
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[25_000, 50_000])
    parser.add_argument("--boot", type=int, default=1000)
    parser.add_argument("--store", action="store_true", help="time agreement_for_run on a store")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        if args.store:
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                result = child_store(args.child, args.boot, str(Path(tmp) / "bench.duckdb"))
        else:
            result = child_analysis(args.child, args.boot)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result))
        return

    small, large = sorted(args.sizes)
    path = "agreement_for_run on a DuckDB store" if args.store else "analyse_ratings on Arrow"
    print(
        f"{N_RATERS} raters x {N_ATTRIBUTES} attributes (1 binary) + judge, {args.boot} "
        f"bootstrap resamples; {path}"
    )
    results = {}
    for n in (small, large):
        r = run_child(n, args.boot, args.store)
        results[n] = r
        print(
            f"  {n:>7,} items ({r['rows']:,} rating rows, {r['pooled_units']:,} pooled units): "
            f"{r['seconds']:.1f} s wall, {r['cpu_seconds']:.1f} s CPU, peak RSS "
            f"{r['peak_rss_mb']:,.0f} MB"
        )
    a, b = results[small], results[large]
    size_ratio = large / small
    print(
        f"size ratio {size_ratio:.2f}x: time ratio {b['seconds'] / a['seconds']:.2f}x wall, "
        f"{b['cpu_seconds'] / a['cpu_seconds']:.2f}x CPU (linear = {size_ratio:.2f}x); "
        f"peak RSS ratio {b['peak_rss_mb'] / a['peak_rss_mb']:.2f}x"
    )
    ok = b["peak_rss_mb"] < 2048
    print(
        f"peak RSS at {large:,} items: {b['peak_rss_mb']:,.0f} MB (target < 2048 MB): "
        f"{'PASS' if ok else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
