"""Store cost of transcripts with system messages stored once per run, against texts inline.

Judges ``--items`` items on the fake server (``bench/throughput.py``'s items, one sample each),
reads back every sample's rows (messages, samples, judgments, calls), then replays those
writes alone into fresh stores in 256-sample batches, alternating the two layouts: with the
system messages shared (as clinjudge writes) and with every text in its row (as before schema
version 6: the sharing switched off in this process). Prints, per layout, the store's CPU per
sample (lowest and median of ``--rounds`` replays), the bytes written per 1,000 samples (WAL
and checkpoint, from ``/proc/self/io``) and the file's size after a checkpoint.

Usage: python bench/message_texts.py [--items 2000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import throughput  # noqa: E402

from clinjudge.judges import ModelSettings  # noqa: E402
from clinjudge.runs import RunStore  # noqa: E402
from clinjudge.runs import _message_texts as message_texts  # noqa: E402

BATCH = 256
TABLES = ("messages", "samples", "judgments", "calls")


def _written() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


def captured(db: Path) -> list[dict[str, list[dict[str, Any]]]]:
    """The run's sample rows, batched as the runner writes them (system texts one object)."""
    by_item: dict[str, dict[str, list[dict[str, Any]]]] = {}
    same: dict[str, str] = {}
    with RunStore(db, read_only=True) as store:
        for table in TABLES:
            for row in store.query(f"SELECT * FROM {table} WHERE sample > 0"):
                if table == "messages" and row["role"] == "system":
                    row["content"] = same.setdefault(row["content"], row["content"])
                by_item.setdefault(row["item_id"], {}).setdefault(table, []).append(row)
    items = [by_item[k] for k in sorted(by_item)]
    batches = []
    for start in range(0, len(items), BATCH):
        batch: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
        for item in items[start : start + BATCH]:
            for table, rows in item.items():
                batch[table].extend(rows)
        batches.append(batch)
    return batches


def replay(batches: list[dict[str, list[dict[str, Any]]]], out: Path, shared: bool) -> tuple:
    """(CPU ms per sample, bytes written per 1,000 samples, file bytes)."""
    message_texts.SHARED_ROLE = "system" if shared else "no role: every text inline"
    samples = sum(len(b["samples"]) for b in batches)
    store = RunStore(out)
    written, cpu = _written(), time.process_time()
    for batch in batches:
        store.write_batch(batch)
    cpu = time.process_time() - cpu
    store.con.execute("CHECKPOINT")
    written = _written() - written
    store.close()
    message_texts.SHARED_ROLE = "system"
    return cpu / samples * 1000, written / samples * 1000, out.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        server, url = throughput._start_server(0.05)
        try:
            judge = ModelSettings(model="openai/local-judge", base_url=url, timeout=30)
            throughput.timed_run(folder, throughput._items(args.items), 32, judge)
        finally:
            server.terminate()
            server.wait(timeout=10)
        batches = captured(folder / "bench.duckdb")
        got: dict[str, list[tuple]] = {"inline": [], "shared": []}
        for n in range(args.rounds):
            for name in got:
                out = folder / f"{name}-{n}.duckdb"
                got[name].append(replay(batches, out, shared=name == "shared"))
    print(f"{args.items} samples replayed in batches of {BATCH}, {args.rounds} rounds")
    for name, runs in got.items():
        cpu = [r[0] for r in runs]
        print(
            f"{name:7s} store CPU per sample min {min(cpu):.3f} ms, median "
            f"{statistics.median(cpu):.3f} ms; written {runs[0][1] / 1e6:.1f} MB per 1,000 "
            f"samples; file {runs[0][2] / 1e6:.2f} MB"
        )


if __name__ == "__main__":
    main()
