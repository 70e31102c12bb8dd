"""The sample runner: bounded concurrency, retries, batched durable writes, progress, clean stop.

Work is a list of (item, sample) units. A fixed pool of workers takes units from a queue, so the
number of model calls in flight never exceeds ``concurrency``. Finished samples are buffered and
written in one transaction every ``flush_every`` samples or ``flush_seconds``, with the
``response_cache`` rows of the replies they received (``--cache``); a crash loses at most the
buffer, which ``--resume`` then redoes (keys make the redo idempotent).

A write that fails (full disk, a value the database refuses) stops the run at once: no new
sample starts, the batch that failed is kept and written again with everything finished since,
and the run ends with :class:`RunWriteError`. Paid model calls never go on into a store that
cannot take their results.

With ``max_cost`` set, a worker starts a sample only while the spend so far, plus the expected
cost of the samples in flight and of this one, stays within the budget. The expected cost of a
sample is the average of the finished ones, or before any has finished the price per token times
the rendered prompt (plus ``max_tokens`` of completion) per model call. When the budget stops the
run, samples in flight finish and are stored; the rest stays for ``--resume``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console

from clinjudge.errors import ClinJudgeError
from clinjudge.judges import (
    JudgeModel,
    ModelConfigError,
    SampleVerdict,
    count_message_tokens,
    price_per_token,
)
from clinjudge.judges.workflows import JUDGE_AGENT, one_call_at_a_time, workflow_for
from clinjudge.orchestration._collector import relaxed_collection
from clinjudge.orchestration._config import EXPECTED_REPLY_TOKENS, RunConfig
from clinjudge.orchestration._context import ModelPool, SampleContext
from clinjudge.orchestration._progress import RunProgress
from clinjudge.orchestration._work_unit import WorkUnit
from clinjudge.rubrics import Rubric, Shot, render_messages
from clinjudge.runs import RunStore, workflow_rows

if TYPE_CHECKING:
    from clinjudge.orchestration._pending import PendingWork

__all__ = [
    "JUDGE_AGENT",
    "SampleRunner",
    "CircuitBreakerOpen",
    "RunTally",
    "RunWriteError",
    "WorkUnit",
]


class RunWriteError(ClinJudgeError, RuntimeError):
    """Finished samples could not be written to the run store; the run stopped."""


class CircuitBreakerOpen(ClinJudgeError, RuntimeError):
    """Model calls kept failing the same way (``max_consecutive_failures`` samples in a row);
    the run stopped, resumable, without storing those samples."""


@dataclass
class RunTally:
    """Counts and cost of what a runner finished."""

    ok: int = 0
    failed: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    interrupted: bool = False
    budget_exhausted: bool = False
    not_started: int = 0
    requests: int = 0
    achieved_rpm: float | None = None
    errors: dict[str, int] = field(default_factory=dict)


# Provider answers that hold for every later call too: wrong key, no access, unknown model or
# path. Going on would only record the same failure for every remaining sample.
_FATAL_STATUS = ("HTTP 401", "HTTP 403", "HTTP 404")


def _fault_kind(calls: list[dict[str, Any]]) -> str | None:
    """How a sample's model calls failed ("connection failed", "HTTP 502", "timed out",
    "malformed response"...), or None when its last call succeeded (the model answered)."""
    if not calls or calls[-1].get("status") != "error":
        return None
    error = str(calls[-1].get("error") or "unknown")
    return error.split(":", 1)[0].strip()[:80] or "unknown"


def _fatal_fault(calls: list[dict[str, Any]]) -> str | None:
    for call in calls:
        error = call.get("error") or ""
        if error.startswith(_FATAL_STATUS):
            return f"model {call['model']}: {error}"
    return None


class SampleRunner:
    """Runs the samples of a run through its mode's workflow and stores them.

    Args:
        store: Where results go.
        run_id: The run being executed.
        rubric: The rubric.
        config: The run's configuration.
        model: The run's model pool, or one judge model used for every agent.
        shot_pool: Examples for few-shot prompting.
        show_progress: Draw a progress bar on the console.
        progress_every: Seconds between progress lines off a terminal (default
            :func:`progress_interval`: ``$CLINJUDGE_PROGRESS_SECONDS``, else 30).
        console: Console for the progress bar.
        flush_every: Samples buffered before a write; workers wait for the store when twice
            as many are buffered while a write is still running.
        flush_seconds: Longest time a finished sample waits in the buffer.
    """

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        rubric: Rubric,
        config: RunConfig,
        model: JudgeModel | ModelPool,
        shot_pool: list[Shot] | None = None,
        *,
        show_progress: bool = True,
        progress_every: float | None = None,
        console: Console | None = None,
        flush_every: int = 256,
        flush_seconds: float = 1.0,
    ):
        self.store = store
        self.run_id = run_id
        self.rubric = rubric
        self.config = config
        self.models = model if isinstance(model, ModelPool) else ModelPool(config, rubric, model)
        self.agent, self.workflow = workflow_for(config.mode, rubric)
        self.shot_pool = shot_pool or []
        self.show_progress = show_progress
        self.progress_every = progress_every
        self.console = console or Console(stderr=True)
        self.flush_every = flush_every
        self.flush_seconds = flush_seconds
        self.held_samples = 2 * flush_every
        """Finished samples the buffer holds at most (plus those in flight) while a write
        runs; workers wait for the store beyond it."""
        self.tally = RunTally()
        self._buffer: dict[str, list[dict[str, Any]]] = {}
        self._buffered = 0
        self._last_flush = time.monotonic()
        self._writer: asyncio.Future[None] | None = None
        self._write_thread: ThreadPoolExecutor | None = None
        """One long-lived thread writes every batch (not a pool thread each time: each new
        thread that writes gets its own malloc arena, and the process kept them all)."""
        self._writing: dict[str, list[dict[str, Any]]] = {}
        self._writing_count = 0
        self._unwritten: list[tuple[dict[str, list[dict[str, Any]]], int]] = []
        self.write_failure: BaseException | None = None
        """The first failed write; once set, no new sample starts."""
        self._on_sample: Callable[[SampleVerdict, float | None, int], None] = lambda v, c, t: None
        self._in_flight = 0
        self._started = time.monotonic()
        self._calls_per_sample = 1
        self.fatal: str | None = None
        """Why the run stopped early: a provider answer no retry can change (401, 403, 404)."""
        self.breaker: str | None = None
        """Why the circuit breaker stopped the run (the same call fault, sample after sample)."""
        self._streak: list[tuple[dict[str, list[dict[str, Any]]], SampleVerdict, list[Any]]] = []
        self._streak_kind: str | None = None
        self._judging: set[asyncio.Task[Any]] = set()
        """Workers judging a sample now (the circuit breaker cancels them)."""
        self._stopped: set[asyncio.Task[Any]] = set()
        """Workers the circuit breaker cancelled, until they have stopped."""
        self._work_items: set[str] = set()
        """Items of the work being run (the breaker's every-item rule counts them)."""
        self._work_units = 0
        self._calls_bounded = False
        """The workers alone keep calls within ``concurrency`` (see :meth:`run`)."""

    def _first_estimate(self, unit: WorkUnit) -> float | None:
        """Expected dollars of a sample before any has finished: its rendered prompt, priced."""
        settings = self.config.judge
        per_token = price_per_token(settings) if settings is not None else None
        if settings is None or per_token is None:
            return None
        shots = self.config.shots_for(self.shot_pool, unit.item.id, unit.sample)
        turns = render_messages(
            unit.item, self.rubric, shots, explanations=self.config.explanations
        )
        prompt = count_message_tokens([t.content for t in turns])
        completion = settings.max_tokens or EXPECTED_REPLY_TOKENS
        return self._calls_per_sample * (prompt * per_token[0] + completion * per_token[1])

    def _expected_cost(self, unit: WorkUnit) -> float | None:
        finished = self.tally.ok + self.tally.failed
        if finished:
            return self.tally.cost_usd / finished
        return self._first_estimate(unit)

    def _within_budget(self, unit: WorkUnit) -> bool:
        budget = self.config.max_cost
        if budget is None:
            return True
        expected = self._expected_cost(unit)
        if expected is None:  # unknown price: nothing to compare with
            return True
        committed = self.tally.cost_usd + expected * self._in_flight
        return committed + expected <= budget

    def achieved_rpm(self) -> float | None:
        """Model requests per minute so far (every attempt counts), None before any."""
        rates = [r for r in (lim.achieved_rpm() for lim in self.models.limiters) if r]
        if rates:
            return sum(rates)
        elapsed = time.monotonic() - self._started
        if not self.tally.requests or elapsed <= 0:
            return None
        return self.tally.requests / elapsed * 60.0

    async def _judge(self, unit: WorkUnit) -> None:
        config = self.config
        item, sample = unit.item, unit.sample
        # No shots asked for: none drawn (draw_shots' answer for k = 0, without the call).
        shots = config.shots_for(self.shot_pool, item.id, sample) if config.shots > 0 else None
        ctx = SampleContext(
            self.run_id,
            item,
            sample,
            config,
            self.rubric,
            self.models,
            shots,
            calls_bounded=self._calls_bounded,
        )
        cache = self.models.response_cache
        if cache is None:
            result = await self.workflow(ctx)
        else:
            with cache.scope() as scope:
                result = await self.workflow(ctx)
        verdict, calls = result.verdict, ctx.calls
        if verdict.status != "ok":
            fatal = _fatal_fault(calls)
            if fatal is not None:
                # Not stored: once the key, model or endpoint is fixed, --resume redoes the
                # sample. Its cached replies stay in the cache, written when the run ends.
                self.fatal = self.fatal or fatal
                return
        rows = workflow_rows(
            ctx.key(result.agent),
            self.rubric,
            verdict,
            result.members,
            result.transcript,
            calls,
        )
        if ctx.extra_rows or result.extra_rows:
            for extra in (ctx.extra_rows, result.extra_rows):
                for table, table_rows in extra.items():
                    rows.setdefault(table, []).extend(table_rows)
        if cache is not None:
            # The replies this sample received go into its batch, in the same transaction: a
            # kill never leaves stored samples whose replies the cache lacks.
            rows["response_cache"] = cache.take_new(scope)
        if self._streak_kind is None and (
            verdict.status == "ok" or not config.max_consecutive_failures
        ):
            # No streak held and none starting: what _settle would do, without the call.
            self._accept(rows, verdict, calls)
        else:
            self._settle(rows, verdict, calls)

    def _settle(
        self,
        rows: dict[str, list[dict[str, Any]]],
        verdict: SampleVerdict,
        calls: list[dict[str, Any]],
    ) -> None:
        """Accept a sample, or hold it while its call failures repeat the same fault.

        Held samples are accepted as soon as the streak breaks; if it reaches
        ``max_consecutive_failures`` they are dropped (resume redoes them) and the run stops.
        """
        limit = self.config.max_consecutive_failures
        kind = _fault_kind(calls) if limit and verdict.status != "ok" else None
        if kind is not None and self.breaker is not None:
            return  # failed after the breaker opened: left for --resume
        if kind != self._streak_kind:
            self._release_streak()
        if kind is None:
            self._accept(rows, verdict, calls)
            return
        self._streak_kind = kind
        self._streak.append((rows, verdict, calls))
        if len(self._streak) >= limit or self._every_item_failed():
            self._trip(kind, calls)

    def _every_item_failed(self) -> bool:
        """Every item of the work (two or more) failed once with the streak's fault before any
        sample ended otherwise, and samples are left: a run with fewer items than
        ``max_consecutive_failures`` stops too, instead of waiting out the same fault for every
        remaining sample."""
        if len(self._work_items) < 2 or self.tally.ok + self.tally.failed:
            return False
        if len(self._streak) >= self._work_units:
            return False  # nothing left to spare: the failures are stored as they are
        failed = {calls[-1].get("item_id") for _, _, calls in self._streak}
        return self._work_items <= failed

    def _release_streak(self) -> None:
        held, self._streak, self._streak_kind = self._streak, [], None
        for rows, verdict, calls in held:
            self._accept(rows, verdict, calls)

    def _trip(self, kind: str, calls: list[dict[str, Any]]) -> None:
        last = str(calls[-1].get("error") or kind)[:300]
        if len(self._streak) >= (self.config.max_consecutive_failures or 0):
            what = f"{len(self._streak)} samples in a row failed with the same fault ({kind})"
        else:
            what = (
                f"all {len(self._work_items)} items failed with the same fault ({kind}) and no "
                "sample succeeded"
            )
        self.breaker = f"{what}; last error: {last}"
        self._streak, self._streak_kind = [], None
        # Samples in flight would only wait out the same fault (a hang costs the whole retry
        # schedule): stop them; they are not stored, so --resume redoes them.
        current = asyncio.current_task()
        for task in self._judging:
            if task is not current and task not in self._stopped:
                self._stopped.add(task)
                task.cancel()

    def _accept(
        self,
        rows: dict[str, list[dict[str, Any]]],
        verdict: SampleVerdict,
        calls: list[dict[str, Any]],
    ) -> None:
        buffer = self._buffer
        for table, table_rows in rows.items():
            held = buffer.get(table)
            if held is None:
                buffer[table] = list(table_rows)  # a copy: the sample's lists stay its own
            else:
                held.extend(table_rows)
        self._buffered += 1
        tally = self.tally
        tally.requests += len(calls)
        cost = 0.0
        tokens = 0
        for call in calls:  # one pass: cost, whether every price is known, tokens
            call_cost = call.get("cost_usd")
            if call_cost is None:
                if call["status"] == "ok":
                    tally.cost_known = False
            else:
                cost += call_cost
            tokens += (call.get("prompt_tokens") or 0) + (call.get("completion_tokens") or 0)
        tally.cost_usd += cost
        if verdict.status == "ok":
            tally.ok += 1
        else:
            tally.failed += 1
            reason = (verdict.error or "unknown").split(":")[0]
            tally.errors[reason] = tally.errors.get(reason, 0) + 1
        self._on_sample(verdict, cost, tokens)
        writer = self._writer
        if writer is not None and writer.done():
            self._collect_writer()
        self._write_if_due()

    def _write_if_due(self) -> None:
        """Start a background write of the buffer when it is due and no write is running."""
        due = self._buffered >= self.flush_every or (
            time.monotonic() - self._last_flush >= self.flush_seconds
        )
        writer_idle = self._writer is None or self._writer.done()
        if due and writer_idle and self.write_failure is None:
            # Write in a thread so the event loop keeps serving model calls meanwhile.
            self._writing_count = self._buffered
            self._writing = self._take_buffer()
            if self._write_thread is None:
                self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="clinjudge-store")
            self._writer = asyncio.get_running_loop().run_in_executor(
                self._write_thread, self.store.write_batch, self._writing
            )

    def _collect_writer(self) -> None:
        """Look at a finished background write; keep its batch if it failed."""
        writer = self._writer
        if writer is None or not writer.done() or writer.cancelled():
            return
        self._writer = None
        failure = writer.exception()
        if failure is not None:
            self._write_failed(failure, self._writing, self._writing_count)
        self._writing, self._writing_count = {}, 0

    def _write_failed(
        self, failure: BaseException, batch: dict[str, list[dict[str, Any]]], count: int
    ) -> None:
        self.write_failure = self.write_failure or failure
        self._unwritten.append((batch, count))

    def _take_buffer(self) -> dict[str, list[dict[str, Any]]]:
        batch = self._buffer
        self._buffer = {}
        self._buffered = 0
        self._last_flush = time.monotonic()
        return batch

    def _pending(self) -> tuple[dict[str, list[dict[str, Any]]], int]:
        """Every batch not yet written (failed ones first) merged with the buffer."""
        merged: dict[str, list[dict[str, Any]]] = {}
        count = self._buffered
        for batch, batch_count in [*self._unwritten, (self._take_buffer(), 0)]:
            count += batch_count
            for table, rows in batch.items():
                merged.setdefault(table, []).extend(rows)
        self._unwritten = []
        return merged, count

    def flush(self) -> None:
        """Write buffered and previously failed samples in one transaction (synchronously).

        Raises:
            RunWriteError: The write failed again, or an earlier write had failed.
        """
        batch, count = self._pending()
        if count:
            try:
                self.store.write_batch(batch)
            except Exception as exc:  # noqa: BLE001 - any database or OS failure stops the run
                self.write_failure = self.write_failure or exc
                raise RunWriteError(self._write_message(count, unwritten=True)) from exc
        if self.write_failure is not None:
            raise RunWriteError(self._write_message(count, unwritten=False))

    def _write_message(self, count: int, *, unwritten: bool) -> str:
        failure = self.write_failure
        reason = f"{type(failure).__name__}: {failure}" if failure is not None else "unknown"
        lost = (
            f"{count} finished samples could not be stored and will be judged again"
            if unwritten
            else "every finished sample is stored"
        )
        return (
            f"writing to {self.store.path} failed ({reason}); the run stopped and {lost}. "
            f"Fix the cause (e.g. free disk space), then resume run {self.run_id} "
            f"(database {self.store.path})"
        )

    async def _wait_for_store(self) -> None:
        """Hold a worker while the store is a whole batch behind: a store slower than the
        model (a loaded disk, a fast local judge) would otherwise let the buffer, and memory,
        grow with the run."""
        writer = self._writer
        while writer is not None and not writer.done() and self._buffered >= self.held_samples:
            await asyncio.wait((writer,))  # its failure is collected, not raised, here
            self._collect_writer()
            self._write_if_due()
            writer = self._writer

    async def _worker(self, queue: asyncio.Queue[WorkUnit]) -> None:
        worker = asyncio.current_task()
        assert worker is not None
        budget = self.config.max_cost
        while not self.tally.budget_exhausted and self.fatal is None and self.breaker is None:
            writer = self._writer
            if writer is not None:
                if writer.done():
                    self._collect_writer()
                elif self._buffered >= self.held_samples:
                    await self._wait_for_store()
                    if self.tally.budget_exhausted or self.fatal or self.breaker:
                        return
            if self.write_failure is not None:
                return
            try:
                unit = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if budget is not None and not self._within_budget(unit):
                # No new work; samples in flight finish; the rest is left for --resume.
                self.tally.budget_exhausted = True
                self.tally.not_started = queue.qsize() + 1
                return
            self._in_flight += 1
            # The sample runs in this worker's own task (a task per sample cost a task object
            # and an extra event-loop step per sample); the breaker cancels the worker.
            self._judging.add(worker)
            try:
                await self._judge(unit)
            except asyncio.CancelledError:
                if worker not in self._stopped:
                    raise
                self._stopped.discard(worker)
                if worker.uncancel():
                    raise  # cancelled from outside as well
                return  # stopped by the circuit breaker
            finally:
                self._judging.discard(worker)
                self._in_flight -= 1

    async def run(self, units: list[WorkUnit] | PendingWork) -> RunTally:
        """Judge every unit; on cancellation, store what finished and re-raise.

        Args:
            units: The samples to produce (``PendingWork`` reads their items as they are
                taken, so they are not all held at once).
        """
        if isinstance(units, list):
            queue: asyncio.Queue[WorkUnit] = asyncio.Queue()
            for unit in units:
                queue.put_nowait(unit)
            self._work_items = {unit.item.id for unit in units}
        else:
            queue, self._work_items = units.queue(), units.item_ids()
        self._started = time.monotonic()
        if self.config.max_cost is not None and self.config.mode != "single":
            self._calls_per_sample = max(len(self.models.personas), 1)
        self._work_units = len(units)
        # A sample of a workflow that calls the model one call at a time, in one of at most
        # ``concurrency`` workers: the calls in flight stay within bounds without a semaphore.
        self._calls_bounded = one_call_at_a_time(self.workflow)
        progress = None
        if self.show_progress:
            progress = RunProgress(
                self.console,
                len(units),
                interval=self.progress_every,
                calls=self.models.calls_in_flight,
            )
        if progress is not None:

            def on_sample(verdict: SampleVerdict, cost: float | None, tokens: int = 0) -> None:
                progress.advance(verdict.status == "ok", tokens, cost or 0.0, self.achieved_rpm())

            self._on_sample = on_sample
            progress.start()
        workers = [
            asyncio.create_task(self._worker(queue))
            for _ in range(min(self.config.concurrency, max(len(units), 1)))
        ]
        cache_bound = contextlib.ExitStack()
        try:
            # DuckDB caches what it writes: bounded, its memory stops growing with the run.
            cache_bound.enter_context(self.store.bounded_cache())
            # Samples keep hundreds of objects alive per call in flight: fewer collector passes.
            cache_bound.enter_context(relaxed_collection())
            await asyncio.gather(*workers)
        except asyncio.CancelledError:
            self.tally.interrupted = True
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise
        finally:
            self.tally.achieved_rpm = self.achieved_rpm()
            self._release_streak()  # a streak that never reached the limit is stored
            try:
                await self._finish_writes()
            finally:
                cache_bound.close()
                if self._write_thread is not None:
                    self._write_thread.shutdown(wait=False)
                    self._write_thread = None
                if progress is not None:
                    progress.stop()
        if self.breaker is not None:
            self.tally.interrupted = True
            raise CircuitBreakerOpen(
                f"{self.breaker}. The run stopped (max_consecutive_failures="
                f"{self.config.max_consecutive_failures}); those samples are not stored. Check "
                f"the endpoint, then resume run {self.run_id} (database {self.store.path})"
            )
        if self.fatal is not None:
            raise ModelConfigError(
                f"{self.fatal}; the run stopped sending: fix the API key, model name or endpoint, "
                f"then resume run {self.run_id} (database {self.store.path})"
            )
        return self.tally

    async def _finish_writes(self) -> None:
        # Runs during cancellation too: a write already in its thread must land before the
        # buffer is flushed, or samples would be lost or written out of transaction order.
        if self._writer is not None:
            try:
                await asyncio.shield(self._writer)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await self._writer
            except Exception:  # noqa: BLE001 - collected below with its batch
                pass
            self._collect_writer()
        self.flush()
