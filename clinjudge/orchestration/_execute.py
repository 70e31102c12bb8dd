"""Run a prepared, stored run to its end: its missing samples through the models (or a
provider's batch API), then its final scores. Apart from ``_session`` (creation, resume, finish)
because the batch run builds on ``_session`` and this module picks between the two.
"""

from __future__ import annotations

import asyncio

from clinjudge.judges import JudgeModel
from clinjudge.judges.clients import hash_model_files
from clinjudge.judges.workflows import prescore_evidence, workflow_for
from clinjudge.orchestration._batch_run import BatchRun
from clinjudge.orchestration._context import ModelPool
from clinjudge.orchestration._sample_runner import RunTally, SampleRunner
from clinjudge.orchestration._session import PreparedRun, drive_run, pending_work, run_in_new_loop
from clinjudge.runs import RunStore, save_response_cache
from clinjudge.runs.orchestration_reads import load_response_cache


async def execute_run_async(
    store: RunStore,
    run_id: str,
    prepared: PreparedRun,
    *,
    show_progress: bool = False,
    progress_every: float | None = None,
    batch_poll_interval: float | None = None,
    model: JudgeModel | None = None,
    handle_sigterm: bool = False,
) -> RunTally:
    """Produce every missing sample of a run, then write the final per-item scores (async).

    Works inside an event loop that is already running (a notebook). Cancelling the task stops
    the run cleanly: finished samples are stored, the run is marked ``interrupted`` and
    ``CancelledError`` propagates.

    Args:
        store: The run store.
        run_id: The run.
        prepared: The run's config, rubric, items and shots.
        show_progress: Draw a progress bar.
        progress_every: Seconds between progress lines off a terminal (default
            ``$CLINJUDGE_PROGRESS_SECONDS``, else 30).
        batch_poll_interval: Send the work through the provider's batch API
            (``check_batch_config`` passed), first polling after this many seconds; None
            calls the models directly.
        model: A prepared judge model (tests inject one); built from the config otherwise.
        handle_sigterm: Treat SIGTERM as a cancellation (only for a loop this process owns).
    """
    config = prepared.config
    assert config.judge is not None
    agent = workflow_for(config.mode, prepared.rubric)[0]
    if batch_poll_interval is not None:
        batch = BatchRun(
            store,
            run_id,
            prepared,
            poll_interval=batch_poll_interval,
            show_progress=show_progress,
        )
        return await drive_run(
            store, run_id, prepared, batch.run, agent=agent, handle_sigterm=handle_sigterm
        )
    judge = ModelPool(config, prepared.rubric, model, personas=prepared.personas)
    if config.cache:
        judge.response_cache = load_response_cache(store, run_id)
        # An hf/ model's cache key holds a hash of its weights (seconds for large ones): made
        # here, off the event loop, not in the first call.
        await asyncio.to_thread(hash_model_files, [config.judge, *config.roles.values()])
    runner = SampleRunner(
        store,
        run_id,
        prepared.rubric,
        config,
        judge,
        prepared.shots,
        show_progress=show_progress,
        progress_every=progress_every,
    )
    units = pending_work(store, run_id, prepared)

    async def work() -> RunTally:
        try:
            if config.prm is not None and config.prm.ray is not None:
                # --prm with --ray: the items' PRM evidence is scored on Ray before judging
                # starts (the one path that holds every pending item at once).
                prescore_evidence(judge.shared_state, config.prm, [u.item for u in units])
            return await runner.run(units)
        finally:
            units.close()
            await judge.close()
            # Stored samples wrote their replies with them; what is left belongs to samples
            # the run did not store (Ctrl-C, a 401): kept so that --resume reuses them, unless
            # the store refuses writes (its error is the one to report).
            if runner.write_failure is None:
                save_response_cache(store, judge.response_cache)

    return await drive_run(
        store, run_id, prepared, work, agent=agent, handle_sigterm=handle_sigterm
    )


def execute_run(
    store: RunStore,
    run_id: str,
    prepared: PreparedRun,
    *,
    show_progress: bool = True,
    progress_every: float | None = None,
    model: JudgeModel | None = None,
) -> RunTally:
    """Produce every missing sample of a run, then write the final per-item scores.

    The synchronous form of :func:`execute_run_async` (same arguments), for a thread without a
    running event loop. Ctrl-C or SIGTERM stops the run cleanly: finished samples are stored,
    the run is marked ``interrupted`` and ``KeyboardInterrupt`` propagates.
    """
    coroutine = execute_run_async(
        store,
        run_id,
        prepared,
        show_progress=show_progress,
        progress_every=progress_every,
        model=model,
        handle_sigterm=True,
    )
    return run_in_new_loop(store, run_id, coroutine)
