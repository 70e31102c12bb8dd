"""Throughput of the single-judge runner against a fake OpenAI server with fixed latency.

The fake server runs in its own process so that this process's CPU time is the framework's
alone: rendering, the real AutoGen/OpenAI client over HTTP, parsing, validation, batched
DuckDB writes. Prints achieved items/s, the ideal (concurrency / latency), their ratio, and CPU
milliseconds per judgment. Targets: ratio >= 0.85, CPU <= 2 ms per judgment.

That in-process CPU leaves out what a user pays for too: interpreter start, imports, reading
and validating the data and creating the run. So the benchmark also runs the whole
``judge run`` command as a child process at two sizes (``--process-sizes``) against the same
server and reports its CPU (user + system, from ``resource.getrusage(RUSAGE_CHILDREN)``, as
``/usr/bin/time`` does) per judgment at each size and marginally between them (the extra CPU
of the extra items, so fixed start-up costs cancel out), next to the in-process figure.

Usage: python bench/throughput.py [--items 2000] [--concurrency 32] [--latency 0.1]
       [--process-sizes 500 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clinjudge.judges import JudgeModel, ModelSettings  # noqa: E402
from clinjudge.orchestration import (  # noqa: E402
    PreparedRun,
    RunConfig,
    create_run,
    execute_run,
    prepare_run,
)
from clinjudge.rubrics import Item, render_messages  # noqa: E402
from clinjudge.runs import RunStore  # noqa: E402


def _start_server(latency: float, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """Start the fake server in its own process; ``extra`` are more command-line flags."""
    command = [sys.executable, "-m", "tests.fake_openai", "--port", "0", "--latency", str(latency)]
    process = subprocess.Popen([*command, *extra], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("READY "):
        process.kill()
        raise RuntimeError(f"fake server did not start: {line!r}")
    return process, line.split(" ", 1)[1]


def prepare_bench_run(
    tmp: Path, items: list[Item], concurrency: int, judge: ModelSettings
) -> tuple[PreparedRun, RunStore, str]:
    """Write ``items`` to a JSONL file under ``tmp`` and create a run over them in a fresh store.

    Args:
        tmp: Scratch folder for the data file and the database.
        items: The items to judge.
        concurrency: Model calls in flight.
        judge: The judge model's settings.
    """
    data = tmp / "items.jsonl"
    data.write_text("".join(i.model_dump_json() + "\n" for i in items))
    config = RunConfig(
        data=str(data), concurrency=concurrency, db=str(tmp / "bench.duckdb"), judge=judge
    )
    prepared = prepare_run(config)
    store = RunStore(config.db)
    return prepared, store, create_run(store, prepared)


def _items(count: int) -> list[Item]:
    note = (
        "Seen in clinic for follow-up of hypertension and type 2 diabetes. "
        "Blood pressure 138/84. HbA1c 7.4%. Continue metformin and lisinopril. "
    ) * 6
    return [
        Item(
            id=f"bench-{n:05d}",
            notes=[note, note, note],
            summary=f"Patient {n}: hypertension and diabetes, stable [Note 1] [Note 3].",
            specialty="Primary Care",
        )
        for n in range(count)
    ]


def _warm_up(settings: ModelSettings, prepared: PreparedRun) -> None:
    """One call so one-time imports and connection setup are not billed per item; the
    warm-up client is closed before its event loop ends."""

    async def once() -> None:
        model = JudgeModel(settings, prepared.rubric)
        try:
            await model.complete(render_messages(prepared.items[0], prepared.rubric))
        finally:
            await model.close()

    asyncio.run(once())


def _judge_command() -> list[str]:
    script = Path(sys.executable).with_name("judge")
    if script.exists():
        return [str(script)]
    found = shutil.which("judge")
    if found is None:
        raise RuntimeError("the judge command is not installed next to this Python")
    return [found]


def judge_run_command(
    data: Path, db: Path, model: str, base_url: str, concurrency: int
) -> list[str]:
    """The ``judge run`` command line every whole-process benchmark measures."""
    return [
        *_judge_command(),
        "run",
        "--data",
        str(data),
        "--db",
        str(db),
        "--model",
        model,
        "--base-url",
        base_url,
        "--timeout",
        "30",
        "--concurrency",
        str(concurrency),
        "--no-progress",
    ]


def timed_process(
    command: list[str], env: dict[str, str], cwd: Path | None = None
) -> tuple[float, float, str]:
    """Run a command to completion; returns (CPU s, wall s, output), measured from outside."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(
            f"{command[0]} exited {done.returncode}: {done.stdout[-2000:]} {done.stderr[-2000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.stdout + done.stderr


def whole_process(
    tmp: Path, base_url: str, sizes: list[int], concurrency: int
) -> list[tuple[int, float, float]]:
    """Run ``judge run`` as a child process per size; returns (items, CPU s, wall s) each."""
    out = []
    env = {
        **os.environ,
        "OPENAI_API_KEY": "bench-not-a-key",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    for n in sizes:
        data = tmp / f"process-{n}.jsonl"
        data.write_text("".join(i.model_dump_json() + "\n" for i in _items(n)))
        command = judge_run_command(
            data, tmp / f"process-{n}.duckdb", "openai/local-judge", base_url, concurrency
        )
        cpu, wall, _ = timed_process(command, env)
        out.append((n, cpu, wall))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument(
        "--client",
        choices=["auto", "autogen", "direct"],
        default="auto",
        help="judge.client: auto uses the direct client for a base_url",
    )
    parser.add_argument(
        "--process-sizes",
        type=int,
        nargs=2,
        default=[500, 2000],
        help="items for the two whole-process `judge run` measurements (0 0 skips them)",
    )
    args = parser.parse_args()

    server, base_url = _start_server(args.latency)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            judge = ModelSettings(
                model="openai/local-judge", base_url=base_url, timeout=30, client=args.client
            )
            prepared, store, run_id = prepare_bench_run(
                Path(tmp), _items(args.items), args.concurrency, judge
            )
            config = prepared.config
            model = JudgeModel(config.judge, prepared.rubric)
            _warm_up(config.judge, prepared)
            wall0, cpu0 = time.perf_counter(), time.process_time()
            tally = execute_run(store, run_id, prepared, show_progress=False, model=model)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            stored = store.con.execute(
                "SELECT count(*) FROM samples WHERE run_id = ? AND status = 'ok'", [run_id]
            ).fetchone()[0]
            store.close()
            sizes = sorted(args.process_sizes)
            process = (
                whole_process(Path(tmp), base_url, sizes, args.concurrency) if sizes[0] else []
            )
    finally:
        server.terminate()
        server.wait(timeout=10)

    judged = tally.ok + tally.failed
    achieved = judged / wall
    ideal = args.concurrency / args.latency
    print(
        f"items={args.items} concurrency={args.concurrency} "
        f"latency={args.latency * 1000:.0f} ms client={args.client}"
    )
    print(f"judged={judged} ok={tally.ok} failed={tally.failed} stored_ok={stored}")
    print(f"wall={wall:.2f} s  achieved={achieved:.1f} items/s  ideal={ideal:.1f} items/s")
    print(f"ratio={achieved / ideal:.3f}  (target >= 0.85)")
    in_process = cpu / judged * 1000
    print(f"cpu_per_judgment={in_process:.3f} ms  (in-process, execute_run only; target <= 2 ms)")
    if process:
        print("whole `judge run` process (start-up, imports, loading, validation, create_run):")
        for n, cpu_s, wall_s in process:
            print(
                f"  {n} items: {cpu_s:.2f} s CPU ({cpu_s / n * 1000:.3f} ms per judgment), "
                f"{wall_s:.2f} s wall ({n / wall_s:.1f} items/s)"
            )
        (n1, c1, w1), (n2, c2, w2) = process
        marginal = (c2 - c1) / (n2 - n1) * 1000
        print(
            f"  marginal CPU per judgment ({n1} -> {n2} items): {marginal:.3f} ms; "
            f"whole-process / in-process = {marginal / in_process:.2f}x; "
            f"fixed start-up about {c1 - marginal / 1000 * n1:.2f} s CPU"
        )
        rate = (n2 - n1) / (w2 - w1)
        print(
            f"  marginal rate ({n1} -> {n2} items): {rate:.1f} items/s; whole-process / "
            f"in-process = {rate / achieved:.2f}x"
        )


if __name__ == "__main__":
    main()
