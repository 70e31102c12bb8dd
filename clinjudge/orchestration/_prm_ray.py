"""A PRM pass on Ray (``ray`` of ``clinjudge.score_prm``): the driver, and the only writer of the
store.

The cluster's address is checked and the batches are planned before anything is written (a
head that does not answer is one ``UserError``). The run row is written next (status
``running``), then each Ray batch's candidates in one transaction as they stream back; the
caller closes the run (``store_prm_run``). A pass that fails is marked ``failed`` with its
reason, Ctrl-C ``interrupted``. Killed at any point, ``resume=RUN_ID`` scores only the
candidates without a stored call; the keys (run, item, candidate, step) make a repeated write a
no-op.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from clinjudge._util.ray_cluster import (
    RayConnectError,
    check_reachable,
    connect_timeout,
    error_line,
    refuse_ray_client,
)
from clinjudge.errors import UserError
from clinjudge.orchestration._prm_settings import (
    Notify,
    PRMCommand,
    PRMNotice,
    PRMRunStopped,
    PRMSettings,
    RayRun,
)
from clinjudge.orchestration._progress import progress_interval
from clinjudge.orchestration._session import new_run_id
from clinjudge.prm_bridge import (
    Chain,
    ChainScore,
    PRMModelError,
    RayOptions,
    ScorerSpec,
    plan_batches,
    require_ray,
    score_on_ray,
    stored_result,
)
from clinjudge.runs import (
    RunStore,
    add_prm_results,
    begin_prm_run,
    now,
    stored_prm_calls,
    stored_prm_scores,
)


def _samples(chains: Sequence[Chain]) -> list[int]:
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


def _check_resume(run: dict[str, Any], settings: PRMSettings, command: str) -> None:
    config = run.get("config") or {}
    problems = []
    if run.get("mode") != "prm" or "ray" not in config:
        problems.append("it is not a `judge prm ... --ray` run")
    elif config.get("command") != command:
        problems.append(f"it was `judge prm {config.get('command')}`")
    elif not _same_path(run.get("data_source"), str(settings.input)):
        problems.append(f"it scored {run.get('data_source')}")
    elif not _same_path((run.get("models") or {}).get("prm"), settings.model):
        problems.append(f"it used model {(run.get('models') or {}).get('prm')}")
    if problems:
        raise UserError(f"resume {run['run_id']}: {problems[0]}", setting="resume")


def _stopped(
    store: RunStore | None, run_id: str | None, status: str, reason: str, notify: Notify
) -> None:
    """Mark a run that stopped before its end, so it is never left ``running``.

    Args:
        store: The run store (None when nothing is stored).
        run_id: The run (None before it was written).
        status: ``failed`` or ``interrupted``.
        reason: Why, kept in ``runs.status_reason``.
        notify: Told when the mark cannot be written.
    """
    if store is None or run_id is None:
        return
    try:
        store.set_run_status(run_id, status, reason=reason[:2000])
    except Exception as exc:  # noqa: BLE001 - the original error is the one to report
        notify(PRMNotice(f"could not mark run {run_id} {status}: {exc}", "warning"))


def _check(settings: PRMSettings) -> RayOptions:
    """The Ray options, once the settings and the cluster allow a pass (nothing written)."""
    if settings.prm_url:
        raise UserError("ray loads the model on the Ray workers; it does not combine with "
                        "prm_url", setting="ray,prm_url")  # fmt: skip
    if settings.resume and not settings.store:
        raise UserError("resume needs the run's store (store=True)", setting="resume,store")
    require_ray()
    options = RayOptions(
        address=None if settings.ray == "local" else settings.ray,
        replicas=settings.ray_replicas,
        batch_size=settings.ray_batch,
        # Checked here even where no cluster is joined (local): a bad value is always refused.
        connect_timeout_s=connect_timeout(settings.ray_connect_timeout),
    )
    refuse_ray_client(options.address)
    # A head that does not answer fails here, in bounded time, before the store is opened:
    # Ray's own join would retry for ten minutes with the run row already written.
    check_reachable(options.address, options.connect_timeout_s)
    return options


def score_with_ray(
    settings: PRMSettings,
    fmt: Any,
    chains: Sequence[Chain],
    config: dict[str, Any],
    command: PRMCommand,
    notify: Notify,
) -> tuple[list[ChainScore], RayRun, datetime]:
    """Score ``chains`` on Ray, storing each batch as it arrives.

    Args:
        settings: The run's settings (``ray`` set).
        fmt: The PRM format.
        chains: The candidates, in input order.
        config: The run's config so far (format, device, ...).
        command: ``score``, ``best-of-n`` or ``eval``.
        notify: Receives the progress lines.

    Returns:
        The results in input order, the run, and when scoring began.
    """
    options = _check(settings)
    spec = ScorerSpec(
        model=settings.model,
        fmt=fmt,
        # Ray gives each replica its own GPU, which it sees as cuda:0.
        device="cuda" if settings.device.startswith("cuda") else settings.device,
        dtype=settings.dtype,
        attn=settings.attn,
        batch_tokens=settings.batch_tokens,
        max_length=settings.max_length,
    )
    config = {**config, "command": command, "ray": {"address": settings.ray,
                                                    "replicas": settings.ray_replicas,
                                                    "batch": settings.ray_batch}}  # fmt: skip
    store = RunStore(settings.db) if settings.store else None
    try:
        return _Driver(settings, store, chains, notify).run(spec, options, config, command)
    finally:
        if store is not None:
            store.close()


@dataclass
class _Driver:
    """One Ray pass over ``chains``, writing to ``store`` (None: nothing stored)."""

    settings: PRMSettings
    store: RunStore | None
    chains: Sequence[Chain]
    notify: Notify

    def _resumed(self, command: str, samples: list[int]) -> tuple[dict[int, ChainScore], Any]:
        """The stored results of the run to resume, by input position, and its first start."""
        assert self.store is not None and self.settings.resume
        run = self.store.get_run(self.settings.resume)
        _check_resume(run, self.settings, command)
        run_id = run["run_id"]
        calls = stored_prm_calls(self.store, run_id)
        scores = stored_prm_scores(self.store, run_id)
        results: dict[int, ChainScore] = {}
        for index, chain in enumerate(self.chains):
            call = calls.get((chain.id, samples[index]))
            if call is None:
                continue
            results[index] = stored_result(
                chain,
                scores.get((chain.id, chain.candidate), []),
                self.settings.threshold,
                n_tokens=call["prompt_tokens"] or 0,
                truncated=call["finish_reason"] == "truncated",
                error=call["error"] if call["status"] == "error" else None,
                latency_s=call["latency_s"] or 0.0,
            )
        return results, (run_id, run["created_at"])

    def run(
        self, spec: ScorerSpec, options: RayOptions, config: dict[str, Any], command: str
    ) -> tuple[list[ChainScore], RayRun, datetime]:
        settings, chains, store = self.settings, self.chains, self.store
        samples = _samples(chains)
        results: dict[int, ChainScore] = {}
        started = now()
        run_id: str | None = None
        if store is not None and settings.resume:
            results, (run_id, started) = self._resumed(command, samples)
        try:
            plan = plan_batches(chains, spec, settings.ray_batch)
        except PRMModelError as exc:
            raise UserError(str(exc)) from exc
        if store is not None and run_id is None:  # after the plan: a bad model writes nothing
            run_id = new_run_id()
            counts = (len({c.id for c in chains}), max(samples, default=0))
            begin_prm_run(store, run_id, model=settings.stored_model, config=config,
                          data_source=str(settings.input), name=settings.name, started=started,
                          counts=counts)  # fmt: skip
        reused = len(results)
        todo = [[i for i in batch if i not in results] for batch in plan]
        if store is not None:
            self.notify(PRMNotice(f"ray: run {run_id}: {sum(map(len, todo))} candidates to score"
                                  + (f", {reused} already stored" if reused else "")))  # fmt: skip
        summary = self._stream(spec, options, todo, samples, results, run_id, started)
        for name, figures in summary.get("replicas", {}).items():
            self.notify(PRMNotice(
                f"ray: replica {name}: {figures['chains']} chains, "
                f"{figures['tokens']:,} tokens, {figures['tokens_per_s']:,.0f} tokens/s"
            ))  # fmt: skip
        ordered = [results[i] for i in range(len(chains))]
        run = RayRun(run_id, config, summary, scored=len(ordered) - reused, reused=reused)
        return ordered, run, started

    def _stream(
        self,
        spec: ScorerSpec,
        options: RayOptions,
        todo: list[list[int]],
        samples: list[int],
        results: dict[int, ChainScore],
        run_id: str | None,
        started: datetime,
    ) -> dict[str, Any]:
        """Score the ``todo`` batches into ``results``, storing each; the pass's summary."""
        store, settings = self.store, self.settings
        summary: dict[str, Any] = {}

        def report(progress: Any) -> None:
            summary.update(progress.summary())
            self.notify(PRMNotice(f"ray: {progress.line()}"))

        # Ray prints its cluster messages (a worker that died, a task retried) to stdout, which
        # belongs to the caller's output (`--json`): they go to stderr, with the progress lines.
        try:
            with contextlib.redirect_stdout(sys.stderr):
                for part in score_on_ray(self.chains, spec, options, settings.threshold,
                                         batches=todo, on_progress=report,
                                         progress_every_s=progress_interval()):  # fmt: skip
                    for index, result in part:
                        results[index] = result
                    if store is not None and run_id is not None:
                        add_prm_results(store, run_id, [(r, samples[i]) for i, r in part],
                                        model=settings.stored_model, started=started)  # fmt: skip
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C; SIGTERM where Ray set its handler
            reason = "stopped by Ctrl-C or SIGTERM"
            _stopped(store, run_id, "interrupted", reason, self.notify)
            raise PRMRunStopped(reason, run_id=run_id, interrupted=True) from None
        except Exception as exc:  # Ray's own errors (a batch that failed for good) included
            # A cluster that stopped answering says so itself; Ray's errors wrap a traceback.
            why = str(exc) if isinstance(exc, RayConnectError) else error_line(exc)
            reason = f"ray: scoring failed: {why}"
            _stopped(store, run_id, "failed", reason, self.notify)
            raise PRMRunStopped(reason, run_id=run_id, interrupted=False) from exc
        return summary
