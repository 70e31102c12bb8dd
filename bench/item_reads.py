"""CPU per item of the three passes a run makes over its items (#27, items streamed): the
check (`prepare_run`: every record read and validated once, ids kept), run creation
(`create_run`: the items read from the file again and written to the store a chunk at a time)
and the runner's intake (`PendingWork`: every missing sample's item read back from the store).

Per item: `time.process_time`, best of `--repeat`, on `--items` items of the throughput
benchmark (three 0.8 KB notes, summary, specialty) and of a varied set (numbered and plain
notes, reference, vendor, meta). The injection scan's memo is emptied before each creation.

    python bench/item_reads.py [--items 4000] [--repeat 3]
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
from clinjudge.orchestration import RunConfig, create_run, prepare_run  # noqa: E402
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


def measure(label: str, items: list[Item], repeat: int) -> None:
    """Print CPU per item of the check, the creation and the runner's intake."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "items.jsonl"
        data.write_text("".join(i.model_dump_json() + "\n" for i in items))
        config = RunConfig(
            data=str(data), db=str(Path(tmp) / "b.duckdb"), judge=ModelSettings(model="mock/j")
        )
        prepared = [prepare_run(config)]

        def check() -> None:
            prepared[0] = prepare_run(config)

        check_s = best(repeat, check)
        store = RunStore(config.db)
        run_ids: list[str] = []

        def create() -> None:
            _injection._MEMO.clear()
            _injection._memo_used = 0
            run_ids.append(create_run(store, prepared[0]))

        create_s = best(repeat, create)

        def intake() -> None:
            work = pending_work(store, run_ids[-1], prepared[0])
            for _ in work:
                pass

        intake_s = best(repeat, intake)
        store.close()
    n = len(items)
    print(
        f"{label}: {n} items, per item: check {check_s / n * 1e6:.1f} us, "
        f"create {create_s / n * 1e6:.1f} us, runner intake {intake_s / n * 1e6:.1f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    measure("benchmark items", bench_items(args.items), args.repeat)
    measure("varied items", varied_items(args.items), args.repeat)


if __name__ == "__main__":
    main()
