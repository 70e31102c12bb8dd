"""`judge prm ... --ray`: the driver of a Ray scoring pass, and the only writer of the store.

The cluster's address is checked and the batches are planned before anything is written (a
head that does not answer is one line, exit 2). The run row is written next (status
``running``), then each Ray batch's candidates in one transaction as they stream back, then the
final status and config (with the replicas' throughput). A pass that fails is marked
``failed`` with its reason, Ctrl-C ``interrupted``. Killed at any point, ``--resume RUN_ID``
scores only the candidates without a stored call; the keys (run, item, candidate, step) make a
repeated write a no-op.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from clinjudge._util.ray_cluster import (
    RayConnectError,
    check_reachable,
    connect_timeout,
    error_line,
    refuse_ray_client,
)
from clinjudge.cli._common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    console,
    fail,
    open_store,
)
from clinjudge.cli._options import PROGRESS_SECONDS_ENV
from clinjudge.runs import now


@dataclass
class RayRun:
    """What the Ray driver leaves for the command that stores the run at the end.

    Args:
        run_id: The stored run (None with ``--no-store``).
        config: The run's config so far (the command adds its own fields).
        summary: Throughput of this pass (chains, tokens, per replica).
        scored: Candidates scored in this pass.
        reused: Candidates taken from the store (``--resume``).
    """

    run_id: str | None
    config: dict[str, Any]
    summary: dict[str, Any] = field(default_factory=dict)
    scored: int = 0
    reused: int = 0


def _every() -> float:
    """Seconds between progress lines: ``$CLINJUDGE_PROGRESS_SECONDS``, else 30."""
    try:
        return max(float(os.environ.get(PROGRESS_SECONDS_ENV) or 30), 0.0)
    except ValueError:
        return 30.0


def _samples(chains: Sequence[Any]) -> list[int]:
    """Each candidate's position within its id, from 1 (its ``sample`` in the calls table)."""
    seen: dict[str, int] = {}
    out = []
    for chain in chains:
        seen[chain.id] = seen.get(chain.id, 0) + 1
        out.append(seen[chain.id])
    return out


def _same_path(stored: str | None, given: str) -> bool:
    # The run keeps the path as it was typed; a resume may name it from elsewhere.
    return stored == given or (
        stored is not None and Path(stored).resolve() == Path(given).resolve()
    )


def _check_resume(run: dict[str, Any], opts: Any, command: str) -> None:
    config = run.get("config") or {}
    problems = []
    if run.get("mode") != "prm" or "ray" not in config:
        problems.append("it is not a `judge prm ... --ray` run")
    elif config.get("command") != command:
        problems.append(f"it was `judge prm {config.get('command')}`")
    elif not _same_path(run.get("data_source"), str(opts.input)):
        problems.append(f"it scored {run.get('data_source')}")
    elif not _same_path((run.get("models") or {}).get("prm"), opts.model):
        problems.append(f"it used model {(run.get('models') or {}).get('prm')}")
    if problems:
        fail(f"--resume {run['run_id']}: {problems[0]}", EXIT_USAGE)


def _stopped(store: Any, run_id: str | None, status: str, reason: str) -> None:
    """Mark a run that stopped before its end, so it is never left ``running``.

    Args:
        store: The run store (None with ``--no-store``).
        run_id: The run (None before it was written).
        status: ``failed`` or ``interrupted``.
        reason: Why, kept in ``runs.status_reason``.
    """
    if store is None or run_id is None:
        return
    try:
        store.set_run_status(run_id, status, reason=reason[:2000])
    except Exception as exc:  # noqa: BLE001 - the original error is the one to report
        console.print(f"[yellow]warning:[/] could not mark run {escape(run_id)} {status}: "
                      f"{escape(str(exc))}")  # fmt: skip


def score_with_ray(
    opts: Any, fmt: Any, chains: Sequence[Any], config: dict[str, Any], command: str
) -> tuple[list[Any], RayRun, datetime]:
    """Score ``chains`` on Ray, storing each batch as it arrives.

    Args:
        opts: The command's options (``_Options`` of `judge prm`).
        fmt: The PRM format.
        chains: The candidates, in input order.
        config: The run's config so far (format, device, ...).
        command: ``score``, ``best-of-n`` or ``eval``.

    Returns:
        The results in input order, the run, and when scoring began.
    """
    from clinjudge.prm_bridge import RayDependencyError, RayOptions, ScorerSpec, require_ray

    if opts.prm_url:
        fail("--ray loads the model on the Ray workers; it does not combine with --prm-url",
             EXIT_USAGE)  # fmt: skip
    if opts.resume and not opts.store:
        fail("--resume needs the run's store (drop --no-store)", EXIT_USAGE)
    try:
        require_ray()
    except RayDependencyError as exc:
        fail(str(exc), EXIT_USAGE)
    spec = ScorerSpec(
        model=opts.model,
        fmt=fmt,
        # Ray gives each replica its own GPU, which it sees as cuda:0.
        device="cuda" if opts.device.startswith("cuda") else opts.device,
        dtype=opts.dtype,
        attn=opts.attn,
        batch_tokens=opts.batch_tokens,
        max_length=opts.max_length,
    )
    options = RayOptions(
        address=None if opts.ray == "local" else opts.ray,
        replicas=opts.ray_replicas,
        batch_size=opts.ray_batch,
        # Checked here even where no cluster is joined (local): a bad value is always refused.
        connect_timeout_s=connect_timeout(opts.ray_connect_timeout),
    )
    refuse_ray_client(options.address)
    # A head that does not answer fails here, in bounded time, before the store is opened:
    # Ray's own join would retry for ten minutes with the run row already written.
    check_reachable(options.address, options.connect_timeout_s)
    config = {**config, "command": command, "ray": {"address": opts.ray,
                                                    "replicas": opts.ray_replicas,
                                                    "batch": opts.ray_batch}}  # fmt: skip
    samples = _samples(chains)
    model = opts.served_model or opts.model
    store = open_store(opts.db) if opts.store else None
    try:
        return _drive(opts, store, chains, samples, spec, options, config, command, model)
    finally:
        if store is not None:
            store.close()


def _drive(
    opts: Any,
    store: Any,
    chains: Sequence[Any],
    samples: list[int],
    spec: Any,
    options: Any,
    config: dict[str, Any],
    command: str,
    model: str,
) -> tuple[list[Any], RayRun, datetime]:
    from clinjudge.orchestration import new_run_id
    from clinjudge.prm_bridge import (
        PRMDependencyError,
        PRMModelError,
        plan_batches,
        score_on_ray,
        stored_result,
    )
    from clinjudge.runs import add_prm_results, begin_prm_run, stored_prm_calls, stored_prm_scores

    results: dict[int, Any] = {}
    started = now()
    run_id: str | None = None
    if store is not None and opts.resume:
        run = store.get_run(opts.resume)
        _check_resume(run, opts, command)
        run_id, started = run["run_id"], run["created_at"]
        calls, scores = stored_prm_calls(store, run_id), stored_prm_scores(store, run_id)
        for index, chain in enumerate(chains):
            call = calls.get((chain.id, samples[index]))
            if call is None:
                continue
            results[index] = stored_result(
                chain,
                scores.get((chain.id, chain.candidate), []),
                opts.threshold,
                n_tokens=call["prompt_tokens"] or 0,
                truncated=call["finish_reason"] == "truncated",
                error=call["error"] if call["status"] == "error" else None,
                latency_s=call["latency_s"] or 0.0,
            )
    try:
        plan = plan_batches(chains, spec, opts.ray_batch)
    except (PRMDependencyError, PRMModelError) as exc:
        fail(str(exc), EXIT_USAGE)
    if store is not None and run_id is None:  # after the plan: a bad model writes nothing
        run_id = new_run_id()
        begin_prm_run(store, run_id, model=model, config=config, data_source=str(opts.input),
                      name=opts.name, started=started,
                      counts=(len(set(c.id for c in chains)), max(samples, default=0)))  # fmt: skip
    reused = len(results)
    todo = [[i for i in batch if i not in results] for batch in plan]
    if store is not None:
        console.print(f"ray: run {run_id}: {sum(map(len, todo))} candidates to score"
                      + (f", {reused} already stored" if reused else ""))  # fmt: skip

    summary: dict[str, Any] = {}

    def report(progress: Any) -> None:
        summary.update(progress.summary())
        console.print(f"ray: {progress.line()}")

    # Ray prints its cluster messages (a worker that died, a task retried) to stdout, which
    # belongs to --json: they go to stderr, with the progress lines.
    try:
        with contextlib.redirect_stdout(sys.stderr):
            for part in score_on_ray(chains, spec, options, opts.threshold, batches=todo,
                                     on_progress=report, progress_every_s=_every()):  # fmt: skip
                for index, result in part:
                    results[index] = result
                if store is not None and run_id is not None:
                    add_prm_results(store, run_id, [(r, samples[i]) for i, r in part],
                                    model=model, started=started)  # fmt: skip
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C; SIGTERM where Ray set its handler
        _stopped(store, run_id, "interrupted", "stopped by Ctrl-C or SIGTERM")
        resume = f"; continue with --resume {run_id}" if run_id else ""
        console.print(f"[yellow]Interrupted.[/] The batches stored so far stay{resume}")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as exc:  # Ray's own errors (a batch that failed for good) included
        # A cluster that stopped answering says so itself; Ray's errors wrap a traceback.
        why = str(exc) if isinstance(exc, RayConnectError) else error_line(exc)
        reason = f"ray: scoring failed: {why}"
        _stopped(store, run_id, "failed", reason)
        resume = f"; the batches stored so far stay: --resume {run_id}" if run_id else ""
        fail(f"{reason}{resume}", EXIT_FAILURE)
    for name, figures in summary.get("replicas", {}).items():
        console.print(
            f"ray: replica {escape(name)}: {figures['chains']} chains, "
            f"{figures['tokens']:,} tokens, {figures['tokens_per_s']:,.0f} tokens/s"
        )
    ordered = [results[i] for i in range(len(chains))]
    run = RayRun(run_id, config, summary, scored=len(ordered) - reused, reused=reused)
    return ordered, run, started
