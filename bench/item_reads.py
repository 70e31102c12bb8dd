"""CPU per item of the passes a run makes over its items (#27, items streamed): the check
(`prepare_run`: every record read, validated and, unless a shuffled sample is drawn, its row
built, scanned and staged on disk), run creation (`create_run`: the staged rows written to the
store; with `--shuffle`, the items read from the file again, validated, scanned and written a
chunk at a time) and the runner's intake (`PendingWork`: every missing sample's item read back
from the store).

Per item: `time.process_time`, the check and creation of the repetition (of `--repeat`) with
the least total, and the intake's best, on `--items` items of the throughput
benchmark (three 0.8 KB notes, summary, specialty) and of a varied set (numbered and plain
notes, reference, vendor, meta). The injection scan's memo is emptied before each check and
each creation.

    python bench/item_reads.py [--items 4000] [--repeat 3] [--shuffle]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.throughput import bench_items  # noqa: E402
from clinjudge.judges import ModelSettings  # noqa: E402
from clinjudge.orchestration import PreparedRun, RunConfig, create_run, prepare_run  # noqa: E402
from clinjudge.orchestration._session import pending_work  # noqa: E402
from clinjudge.rubrics import Item, _injection  # noqa: E402
from clinjudge.runs import RunStore  # noqa: E402


def varied_items(count: int) -> list[Item]:
    """Items whose notes differ per item (1-4, numbered or named), some with a reference,
    vendor or meta (what the default rubric needs: notes and a specialty)."""
    rng = random.Random(7)
    words = ["pain", "edema", "troponin", "dyspnea", "«naïve»", "café", "心", "\t", "tab"]
    words += ["\\", 'quote"', "😀", "é"]
    out = []
    for n in range(count):
        notes = [
            {"id": f"n{k}" if n % 3 else str(k + 1), "text": " ".join(rng.choices(words, k=120))}
            for k in range(rng.randint(1, 4))
        ]
        out.append(
            Item(
                id=f"v-{n}",
                notes=notes,  # type: ignore[arg-type]
                summary=" ".join(rng.choices(words, k=40)),
                specialty="Cardiology" if n % 4 else "Pédiatrie «A»",
                reference=None if n % 5 else "ref " + str(n),
                vendor=None if n % 2 else f"vendor{n % 3}",
                meta={} if n % 6 else {"site": n, "tags": ["a", "b"], "x": {"y": None}},
            )
        )
    return out


def best(repeat: int, run: Callable[[], None]) -> float:
    """The least CPU seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def _forget_scans() -> None:
    _injection._MEMO.clear()
    _injection._memo_used = 0


def measure(label: str, items: list[Item], repeat: int, shuffle: bool = False) -> None:
    """Print CPU per item of the check, the creation and the runner's intake."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "items.jsonl"
        data.write_text("".join(i.model_dump_json() + "\n" for i in items))
        config = RunConfig(
            data=str(data), db=str(Path(tmp) / "b.duckdb"), judge=ModelSettings(model="mock/j")
        )
        # limit = every item: the same items, drawn after the check (read again to create).
        limit = len(items) if shuffle else None
        store = RunStore(config.db)
        run_ids: list[str] = []
        prepared: list[PreparedRun] = []
        times: list[tuple[float, float]] = []
        for _ in range(repeat):
            # A prepared run is created once (its staged rows go with the creation).
            _forget_scans()
            start = time.process_time()
            prepared.append(prepare_run(config, limit=limit, shuffle=shuffle))
            checked = time.process_time()
            _forget_scans()
            created = time.process_time()
            run_ids.append(create_run(store, prepared[-1]))
            times.append((checked - start, time.process_time() - created))
        check_s, create_s = min(times, key=sum)

        def intake() -> None:
            work = pending_work(store, run_ids[-1], prepared[-1])
            for _ in work:
                pass

        intake_s = best(repeat, intake)
        store.close()
    n = len(items)
    print(
        f"{label}: {n} items, per item: check {check_s / n * 1e6:.1f} us, "
        f"create {create_s / n * 1e6:.1f} us (both {(check_s + create_s) / n * 1e6:.1f} us), "
        f"runner intake {intake_s / n * 1e6:.1f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--shuffle", action="store_true", help="a shuffled sample of every item (read twice)"
    )
    args = parser.parse_args()
    measure("benchmark items", bench_items(args.items), args.repeat, args.shuffle)
    measure("varied items", varied_items(args.items), args.repeat, args.shuffle)


if __name__ == "__main__":
    main()
