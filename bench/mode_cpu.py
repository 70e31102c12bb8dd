"""CPU per model call of each judge mode (``single``, ``panel``, ``magentic``) in one run.

Issue 27's goal: panels and MagenticOne discussions within 1.5x of the single judge's CPU per
model call. Every mode runs ``execute_run`` in this process (PDSQI-9, the same items, the same
concurrency) against one fake OpenAI-compatible server in a separate process over HTTP on
loopback, so this process's CPU time is the framework's alone. The server answers so that every
mode succeeds: the single judge and panel members get valid rubric JSON
(``tests.fake_openai.pdsqi9_scores``), and a magentic discussion is played by
``tests.magentic_fake.PanelFake`` (facts, agenda, progress ledgers that pick each member in turn
and declare the panel heard, member arguments ending in JSON, the chair's decision). Model calls
are counted from the store's ``calls`` table; each mode first runs a few items in a scratch store
so one-time imports and connection set-up are not billed.

Every mode runs ``--repeats`` times, in rounds (single, panel, magentic, single, ...); each mode's
lowest CPU per model call counts, since load from other processes only adds CPU time. Prints, per
mode: samples stored ok / failed (the deciding agent's and every member's), model calls, CPU
seconds, CPU ms per model call and its ratio to single's (target <= 1.5); exits 1 when a sample
of any run is not decided ok.

Usage: python bench/mode_cpu.py [--items 400] [--magentic-items 120] [--concurrency 32]
       [--latency 0.1] [--personas scoring] [--modes single panel magentic] [--repeats 4]
       [--profile magentic]   (cProfile of that mode's measured run: top entries by own time)
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.throughput import bench_items, start_server_process  # noqa: E402
from clinjudge.judges import ModelSettings  # noqa: E402
from clinjudge.orchestration import RunConfig, create_run, execute_run, prepare_run  # noqa: E402
from clinjudge.runs import RunStore  # noqa: E402

MODES = ("single", "panel", "magentic")
TARGET = 1.5
WARM_UP_ITEMS = {"single": 8, "panel": 4, "magentic": 3}


# -- the server process ---------------------------------------------------------------------------


def serve(latency: float, personas: str) -> int:
    """Serve until SIGTERM after printing ``READY <base_url>``: magentic requests (the chair's,
    and members' whose system message carries the panel note) are played by ``PanelFake``,
    everything else gets valid PDSQI-9 JSON."""
    from clinjudge.judges.workflows._magentic_chair import (
        ORCHESTRATOR_MARKER,
        PERSONA_PANEL_NOTE,
    )
    from tests.fake_openai import (
        FakeOpenAIServer,
        _message_text,
        pdsqi9_scores,
        serve_until_signal,
    )
    from tests.magentic_fake import PanelFake

    panel = PanelFake(personas=personas)

    def responder(body: dict[str, Any]) -> str | dict[str, Any]:
        messages = body.get("messages") or []
        system = _message_text(messages[0]) if messages and messages[0]["role"] == "system" else ""
        if ORCHESTRATOR_MARKER in system or PERSONA_PANEL_NOTE in system:
            return panel(body)
        last = _message_text(messages[-1]) if messages else ""
        return pdsqi9_scores(last)

    serve_until_signal(FakeOpenAIServer(responder=responder, latency=latency))
    return 0


def _start_server(latency: float, personas: str) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--serve",
        "--latency",
        str(latency),
        "--personas",
        personas,
    ]
    return start_server_process(command)


# -- the measured runs ----------------------------------------------------------------------------


@dataclass
class ModeRun:
    """One mode's measured run."""

    mode: str
    items: int
    calls: int
    calls_ok: int
    cpu_s: float
    wall_s: float
    samples: dict[str, tuple[int, int]]  # agent -> (ok, failed)
    deciding_ok: int

    @property
    def cpu_ms_per_call(self) -> float:
        return self.cpu_s / max(self.calls, 1) * 1000


_DECIDING = {"single": "judge", "panel": "panel", "magentic": "orchestrator"}


def run_mode(
    folder: Path,
    mode: str,
    count: int,
    base_url: str,
    concurrency: int,
    personas: str,
    profile: cProfile.Profile | None = None,
) -> ModeRun:
    """``execute_run`` of ``count`` items in ``mode`` on a fresh store; CPU of this process."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "items.jsonl"
    data.write_text("".join(i.model_dump_json() + "\n" for i in bench_items(count)))
    judge = ModelSettings(model="openai/local-judge", base_url=base_url, timeout=30)
    config = RunConfig(
        mode=mode,
        data=str(data),
        db=str(folder / "bench.duckdb"),
        judge=judge,
        concurrency=concurrency,
        personas=personas,
    )
    prepared = prepare_run(config)
    store = RunStore(config.db)
    run_id = create_run(store, prepared)
    if profile is not None:
        profile.enable()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    execute_run(store, run_id, prepared, show_progress=False)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    if profile is not None:
        profile.disable()
    counted = store.con.execute(
        "SELECT count(*), count(*) FILTER (WHERE status = 'ok') FROM calls WHERE run_id = ?",
        [run_id],
    ).fetchone()
    assert counted is not None
    calls, calls_ok = counted
    samples: dict[str, tuple[int, int]] = {}
    for agent, ok, failed in store.con.execute(
        "SELECT agent, count(*) FILTER (WHERE status = 'ok'), "
        "count(*) FILTER (WHERE status <> 'ok') FROM samples WHERE run_id = ? GROUP BY agent "
        "ORDER BY agent",
        [run_id],
    ).fetchall():
        samples[agent] = (ok, failed)
    store.close()
    deciding_ok = samples.get(_DECIDING[mode], (0, 0))[0]
    return ModeRun(mode, count, calls, calls_ok, cpu, wall, samples, deciding_ok)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=400, help="items for single and panel")
    parser.add_argument("--magentic-items", type=int, default=120)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--personas", default="scoring")
    parser.add_argument("--repeats", type=int, default=4, help="measured rounds of every mode")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--profile", choices=MODES, help="cProfile this mode's measured run")
    parser.add_argument("--profile-out", help="also write the profile's stats to this file")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.latency, args.personas)

    server, base_url = _start_server(args.latency, args.personas)
    runs: list[ModeRun] = []
    profile = cProfile.Profile(time.process_time) if args.profile else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for mode in args.modes:
                run_mode(
                    Path(tmp) / mode / "warm-up",
                    mode,
                    WARM_UP_ITEMS[mode],
                    base_url,
                    args.concurrency,
                    args.personas,
                )
            # Rounds of every mode in turn, so a burst of load elsewhere on the machine falls
            # on one round, not on one mode.
            for round_ in range(1, args.repeats + 1):
                for mode in args.modes:
                    count = args.magentic_items if mode == "magentic" else args.items
                    runs.append(
                        run_mode(
                            Path(tmp) / mode / f"round-{round_}",
                            mode,
                            count,
                            base_url,
                            args.concurrency,
                            args.personas,
                            profile if args.profile == mode and round_ == 1 else None,
                        )
                    )
    finally:
        server.terminate()
        server.wait(timeout=10)

    print(
        f"concurrency={args.concurrency} latency={args.latency * 1000:.0f} ms "
        f"personas={args.personas} repeats={args.repeats} (each mode's lowest CPU per call "
        "counts: contention only adds CPU time)"
    )
    for mode in args.modes:
        figures = ", ".join(f"{r.cpu_ms_per_call:.3f}" for r in runs if r.mode == mode)
        print(f"  {mode}: ms CPU per model call in each round: {figures}")
    best = {
        mode: min((r for r in runs if r.mode == mode), key=lambda r: r.cpu_ms_per_call)
        for mode in args.modes
    }
    single = best.get("single")
    failures = 0
    for run in best.values():
        stored = ", ".join(f"{a} {ok} ok / {bad} failed" for a, (ok, bad) in run.samples.items())
        print(f"{run.mode}: {run.items} items; samples stored: {stored}")
        ratio = ""
        if single is not None:
            value = run.cpu_ms_per_call / single.cpu_ms_per_call
            ratio = f"; ratio to single {value:.2f}x (target <= {TARGET})"
        print(
            f"  {run.calls} model calls ({run.calls_ok} ok, {run.calls / run.items:.1f} per item), "
            f"{run.cpu_s:.2f} s CPU, {run.wall_s:.2f} s wall: "
            f"{run.cpu_ms_per_call:.3f} ms CPU per model call{ratio}"
        )
    for run in runs:
        if run.deciding_ok != run.items:
            failures += 1
            print(f"NOT ALL OK: {run.mode}: {run.deciding_ok} of {run.items} decided ok")
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(40)
        print(out.getvalue())
        if args.profile_out:
            profile.dump_stats(args.profile_out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
