"""Single-judge runs through a provider batch API (OpenAI, Azure OpenAI): half price, 24 h.

A run proceeds in rounds. Each round uploads the queued requests as one batch, records the batch
in ``provider_batches`` before it waits, polls until the provider is done, then ingests every
result in one transaction: a ``calls`` row per request, the sample's rows when it is decided, and
follow-up requests for the rest (a repair re-ask after an invalid reply, or the same request
again after a provider error, within the run's repair and retry limits). The queue itself lives
in ``provider_batch_requests``, so a process killed at any point resumes where it stopped: an
open batch is polled again (never submitted twice) and queued requests are sent once.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from clinjudge.errors import UserError
from clinjudge.judges import (
    CallOutcome,
    ModelConfigError,
    ProviderFault,
    SampleVerdict,
)
from clinjudge.judges.clients import (
    BatchClient,
    BatchLine,
    BatchResults,
    BatchState,
    CallConfig,
    Completion,
    batch_call_cost,
    batch_output_mode,
    batch_price_per_token,
    batch_supported,
    check_batch_settings,
    count_batch_files,
    count_message_tokens,
    count_tokens,
    pack_batch_file,
    request_line,
)
from clinjudge.judges.workflows import (
    JUDGE_AGENT,
    first_turns,
    judge_call_config,
    reply_problem,
)
from clinjudge.orchestration._config import EXPECTED_REPLY_TOKENS, ConfigError, RunConfig
from clinjudge.orchestration._run_items import run_items
from clinjudge.orchestration._sample_runner import RunTally
from clinjudge.orchestration._session import (
    DryRunEstimate,
    PreparedRun,
    drive_run,
    estimate_run,
    pending_work,
    run_in_new_loop,
)
from clinjudge.rubrics import (
    ChatTurn,
    Item,
    JudgmentParseError,
    Rubric,
    parse_judgment,
    render_repair,
)
from clinjudge.runs import (
    RunStore,
    SampleKey,
    call_row,
    ensure_batch_tables,
    queue_requests,
    record_ingested_batch,
    record_submitted_batch,
    return_refused_batch,
    update_batch,
    verdict_rows,
)
from clinjudge.runs.orchestration_reads import (
    calls_of_agent,
    failed_batch_errors,
    iter_batch_requests,
    last_batch_attempt,
    last_request_seqs,
    open_batch,
    open_request_samples,
    queued_request_count,
)


class BatchProviderError(UserError):
    """The provider refused or failed a step of a batch run (an upload, the wait, the results);
    the run is kept as it stood, for ``--resume``."""


TOKEN_CAP_SHARE = 0.9
"""Share of the provider's enqueued-token limit a batch holds after a refusal for it (our token
count and the provider's differ a little)."""

QUEUE_CHUNK = 1000
"""Requests :meth:`BatchRun.seed_queue` builds before it queues them (one transaction)."""


def check_batch_config(
    config: RunConfig, rubric: Rubric | None = None, *, credentials: bool = True
) -> None:
    """Reject runs that cannot go through a batch API, before anything is written.

    Args:
        config: The run configuration.
        rubric: The run's rubric, once loaded (claim rubrics need several calls per sample).
        credentials: Also require the API key (and Azure endpoint); a dry run needs neither.

    Raises:
        ConfigError: A mode other than ``single``, or roles configured.
        ModelConfigError: A provider without a batch API, a missing key or endpoint.
    """
    if config.mode != "single":
        raise ConfigError(
            f"batch runs work with mode single only (got mode {config.mode}): panel and "
            "magentic modes need each reply before the next request"
        )
    if config.prm is not None:
        raise ConfigError(
            "a batch run does not combine with a prm model: the PRM's evidence is computed "
            "locally per item while the batch runs remotely (run directly, or score with "
            "`judge prm score`)"
        )
    if rubric is not None and getattr(rubric, "method", None) == "claims":
        raise ConfigError(
            f"a batch run cannot judge rubric {rubric.name!r}: its scores come from claim-level "
            "calls that depend on each other (use a direct run)"
        )
    if config.judge is None:
        raise ConfigError("no judge model: set judge.model", setting="judge.model")
    if credentials:
        check_batch_settings(config.judge)
    elif not batch_supported(config.judge):
        raise ModelConfigError(
            f"model {config.judge.model}: a batch run needs an openai/ or azure/ model "
            "(the OpenAI and Azure OpenAI batch APIs)"
        )


def estimate_batch_run(prepared: PreparedRun) -> DryRunEstimate:
    """Like :func:`estimate_run`, priced at the provider's batch prices."""
    estimate = estimate_run(prepared)
    settings = prepared.config.judge
    assert settings is not None
    per_token = batch_price_per_token(settings)
    estimate.cost_usd = (
        None
        if per_token is None
        else estimate.prompt_tokens * per_token[0] + estimate.max_completion_tokens * per_token[1]
    )
    files = _first_round_files(prepared)
    note = (
        "priced at batch prices (provider batch API, results within 24 h); the first requests "
        f"fill {files} batch input file(s) (the providers' limit per file), sent one after "
        "another"
    )
    estimate.note = f"{estimate.note}; {note}" if estimate.note else note
    return estimate


def _judge_call(prepared: PreparedRun) -> CallConfig:
    """The call every request line carries: a single judge's first call (its reply schema)."""
    return judge_call_config(prepared.rubric, explanations=prepared.config.explanations)


def _first_request_turns(prepared: PreparedRun, item: Item, sample: int) -> list[ChatTurn]:
    """The conversation of a sample's first request: the single judge's prompt."""
    config = prepared.config
    shots = config.shots_for(prepared.shots, item.id, sample)
    return first_turns(item, prepared.rubric, shots, explanations=config.explanations)


def _first_round_files(prepared: PreparedRun) -> int:
    """How many batch input files a run's first requests fill, each line as it would be sent."""
    settings = prepared.config.judge
    assert settings is not None
    call = _judge_call(prepared)

    def lines() -> Iterator[dict[str, Any]]:
        items = run_items(prepared.items)
        for sample in range(1, prepared.config.samples + 1):
            for item in items:  # read again for each sample, a chunk at a time
                turns = _first_request_turns(prepared, item, sample)
                yield request_line(settings, custom_id(item.id, sample, 0), turns, call)

    return count_batch_files(lines())


def custom_id(item_id: str, sample: int, seq: int) -> str:
    """A request's id in a batch: sample, call number and a digest of the item id (item ids
    may be long or hold any character; the requests table maps it back)."""
    digest = hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:24]
    return f"s{sample}-c{seq}-{digest}"


@dataclass
class _Request:
    custom_id: str
    item_id: str
    sample: int
    seq: int
    tries: int
    repairs: int
    turns: list[ChatTurn]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> _Request:
        messages = row["messages"]
        if isinstance(messages, str):
            messages = json.loads(messages)
        return cls(
            row["custom_id"],
            row["item_id"],
            row["sample"],
            row["seq"],
            row["tries"],
            row["repairs"],
            [ChatTurn(m["role"], m["content"]) for m in messages],
        )

    def row(self, run_id: str) -> dict[str, Any]:
        return {
            "run_id": run_id,
            "custom_id": self.custom_id,
            "item_id": self.item_id,
            "sample": self.sample,
            "seq": self.seq,
            "tries": self.tries,
            "repairs": self.repairs,
            "messages": [{"role": t.role, "content": t.content} for t in self.turns],
            "attempt": None,
            "state": "queued",
        }

    def follow_up(self, turns: list[ChatTurn], *, tries: int, repairs: int) -> _Request:
        seq = self.seq + 1
        return _Request(
            custom_id(self.item_id, self.sample, seq),
            self.item_id,
            self.sample,
            seq,
            tries,
            repairs,
            turns,
        )


@dataclass
class _Ingested:
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    queued: list[_Request] = field(default_factory=list)


def _timestamp(unix: float | None) -> datetime:
    return datetime.fromtimestamp(unix, UTC) if unix else datetime.now(UTC)


class BatchRun:
    """Executes the missing samples of a single-judge run through a provider batch API.

    Args:
        store: The run store.
        run_id: The run.
        prepared: The run's config, rubric, items and shots.
        client: The batch client (built from the judge's settings when omitted).
        poll_interval: First wait between polls, in seconds (doubling up to ``max_poll_interval``).
        max_poll_interval: Longest wait between polls.
        show_progress: Show the batch's state while waiting.
        console: Console for progress and notices.
    """

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        prepared: PreparedRun,
        client: BatchClient | None = None,
        *,
        poll_interval: float = 10.0,
        max_poll_interval: float = 300.0,
        show_progress: bool = True,
        console: Console | None = None,
    ):
        settings = prepared.config.judge
        if settings is None:
            raise ConfigError("no judge model: set judge.model", setting="judge.model")
        self.store = store
        self.run_id = run_id
        self.prepared = prepared
        self.settings = settings
        self.client = client or BatchClient(settings)
        self.poll_interval = poll_interval
        self.max_poll_interval = max_poll_interval
        self.show_progress = show_progress
        self.console = console or Console(stderr=True)
        self.tally = RunTally()
        self._replies = (0, 0)
        """Replies received in this call, and their tokens (a reply's expected length)."""
        self._token_cap: int | None = None
        """Prompt tokens a batch may hold, once the provider refused one for its limit."""
        self._output_mode = batch_output_mode(settings, _judge_call(prepared).schema)
        """How every request line constrains its reply (each carries the rubric's schema)."""

    # -- the queue ---------------------------------------------------------------------------

    def seed_queue(self) -> int:
        """Queue a first request for every missing sample that has no request open; returns
        how many were queued."""
        open_samples = open_request_samples(self.store, self.run_id)
        last_seq = last_request_seqs(self.store, self.run_id, JUDGE_AGENT)
        new: list[_Request] = []
        queued = 0
        # Items are read from the store a chunk at a time and their requests queued as they
        # come: a process killed meanwhile leaves some queued, and the next seed (once they
        # are out) queues the samples still without one.
        for unit in pending_work(self.store, self.run_id, self.prepared):
            where = (unit.item.id, unit.sample)
            if where in open_samples:
                continue
            turns = _first_request_turns(self.prepared, unit.item, unit.sample)
            seq = last_seq.get(where, -1) + 1
            new.append(
                _Request(custom_id(unit.item.id, unit.sample, seq), *where, seq, 1, 0, turns)
            )
            if len(new) >= QUEUE_CHUNK:
                queued += self._queue(new)
        return queued + self._queue(new)

    def _queue(self, requests: list[_Request]) -> int:
        """Queue these requests (emptying the list); how many there were."""
        if requests:
            queue_requests(self.store, [r.row(self.run_id) for r in requests])
        count = len(requests)
        requests.clear()
        return count

    def _update_batch(self, attempt: int, state: BatchState) -> None:
        update_batch(self.store, self.run_id, attempt, state)

    # -- one round ---------------------------------------------------------------------------

    async def submit(self) -> dict[str, Any] | None:
        """Upload the queued requests that fit one batch input file (and what is left of
        ``max_cost``) and record the file, then create the batch and record its id; returns
        the stored batch row, or None when the budget leaves room for no request."""
        attempt = last_batch_attempt(self.store, self.run_id) + 1
        call = _judge_call(self.prepared)
        queued = (
            _Request.from_row(row)
            for page in iter_batch_requests(self.store, self.run_id, "queued")
            for row in page
        )
        with pack_batch_file(
            request_line(self.settings, r.custom_id, r.turns, call)
            for r in self._within_limits(queued)
        ) as batch_file:
            if not batch_file.custom_ids:
                return None
            file_id = await self.client.upload(batch_file)
        stamp = datetime.now(UTC)
        batch_row = {
            "run_id": self.run_id,
            "attempt": attempt,
            "batch_id": None,
            "status": "uploaded",
            "provider": self.settings.provider,
            "model": self.settings.model,
            "created_at": stamp,
            "updated_at": stamp,
            "request_count": len(batch_file.custom_ids),
            "completed": 0,
            "failed": 0,
            "input_file_id": file_id,
            "ingested": False,
        }
        record_submitted_batch(self.store, batch_row, batch_file.custom_ids)
        await self._create(attempt, file_id)
        submitted = open_batch(self.store, self.run_id)
        assert submitted is not None
        return submitted

    def _within_limits(self, requests: Iterator[_Request]) -> Iterator[_Request]:
        """The leading requests that fit what this call has left of ``max_cost`` and the
        provider's enqueued-token limit, once it refused a batch for it.

        The expected cost of a request is its prompt, counted, and a reply of the average
        length so far (before any, ``max_tokens``), at batch prices: a batch, once sent,
        cannot be stopped.
        """
        budget = self.prepared.config.max_cost
        per_token = batch_price_per_token(self.settings)
        priced = budget is not None and per_token is not None
        if not priced and self._token_cap is None:
            yield from requests
            return
        money = (budget or 0.0) - self.tally.cost_usd
        replies, reply_tokens = self._replies
        reply = reply_tokens / replies if replies else self.settings.max_tokens
        reply_cost = (reply or EXPECTED_REPLY_TOKENS) * per_token[1] if per_token else 0.0
        tokens = self._token_cap
        for n, request in enumerate(requests):
            prompt = count_message_tokens([t.content for t in request.turns])
            if priced and per_token is not None:
                money -= prompt * per_token[0] + reply_cost
                if money < 0:
                    return
            if tokens is not None:
                tokens -= prompt
                if tokens < 0 and not n:
                    raise BatchProviderError(
                        f"request {request.custom_id} alone has {prompt:,} prompt tokens, more "
                        f"than the provider lets a batch queue ({self._token_cap:,}, from its "
                        "enqueued-token limit); judge it with a direct run"
                    )
                if tokens < 0:
                    return
            yield request

    def _learned_token_cap(self) -> int | None:
        """The batch size an earlier refusal of this run set (a resumed run keeps to it)."""
        for errors in failed_batch_errors(self.store, self.run_id):
            limit = BatchState("", "failed", "", errors=errors).token_queue_limit
            if limit is not None:
                return int(limit * TOKEN_CAP_SHARE)
        return None

    def _refused_for_tokens(self, batch: dict[str, Any], state: BatchState) -> None:
        """A batch the provider refused for its enqueued-token limit: its requests go back to
        the queue untouched (none ran, so no attempt counts) and later batches stay under
        nine tenths of the limit; refused again at that size, the run stops."""
        attempt = batch["attempt"]
        return_refused_batch(self.store, self.run_id, attempt)
        limit = state.token_queue_limit
        reason = "; ".join(state.errors)
        cap = None if limit is None else int(limit * TOKEN_CAP_SHARE)
        if cap is None or (self._token_cap is not None and self._token_cap <= cap):
            raise BatchProviderError(
                f"batch {attempt} was refused: {reason}. "
                + (
                    "Other batches of the organization hold its enqueued-token limit"
                    if limit is not None
                    else "The provider did not say its enqueued-token limit"
                )
                + f". The run is kept: `judge run --resume {self.run_id}` tries again "
                "(nothing was sent twice)"
            )
        self._token_cap = cap
        self.console.print(
            f"batch {attempt}: refused by the provider (its enqueued-token limit is "
            f"{limit:,}); its requests go again, in batches of at most {self._token_cap:,} "
            "prompt tokens"
        )

    async def _create(self, attempt: int, file_id: str) -> BatchState:
        state = await self.client.create(
            file_id, {"clinjudge_run_id": self.run_id, "clinjudge_attempt": str(attempt)}
        )
        self._update_batch(attempt, state)
        self.console.print(
            f"batch {attempt}: {state.id} submitted ({state.total or '?'} requests); "
            "results within the 24 h window"
        )
        return state

    async def _batch_id(self, batch: dict[str, Any]) -> str:
        """The provider's id of a stored batch; a batch whose creation was cut short is looked
        up by its input file, and created only if the provider has none."""
        if batch["batch_id"]:
            return batch["batch_id"]
        found = await self.client.find(batch["input_file_id"])
        if found is not None:
            self._update_batch(batch["attempt"], found)
            return found.id
        return (await self._create(batch["attempt"], batch["input_file_id"])).id

    async def wait(self, batch: dict[str, Any]) -> BatchState:
        """Poll a stored batch until the provider is done with it, showing its state."""
        batch_id = await self._batch_id(batch)
        attempt = batch["attempt"]
        progress = self._progress() if self.show_progress else None
        task = None
        if progress is not None:
            task = progress.add_task(
                "batch", total=batch["request_count"], attempt=attempt, status="submitted", failed=0
            )
            progress.start()
        last_status = batch["status"]

        def on_update(state: BatchState) -> None:
            nonlocal last_status
            if state.status != last_status:
                self._update_batch(attempt, state)
                last_status = state.status
            if progress is not None and task is not None:
                progress.update(
                    task,
                    completed=state.completed + state.failed,
                    status=state.status,
                    failed=state.failed,
                )

        try:
            state = await self.client.poll(
                batch_id,
                interval=self.poll_interval,
                max_interval=self.max_poll_interval,
                on_update=on_update,
            )
        finally:
            if progress is not None:
                progress.stop()
        self._update_batch(attempt, state)
        return state

    def _progress(self) -> Progress:
        return Progress(
            TextColumn("[bold]batch {task.fields[attempt]}[/] {task.fields[status]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed [red]{task.fields[failed]}[/]"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )

    # -- ingesting results -------------------------------------------------------------------

    def _prior_calls(self, requests: list[_Request]) -> dict[tuple[str, int], list[dict]]:
        wanted = sorted({(r.item_id, r.sample) for r in requests})
        calls: dict[tuple[str, int], list[dict]] = defaultdict(list)
        for row in calls_of_agent(self.store, self.run_id, JUDGE_AGENT, wanted):
            calls[(row["item_id"], row["sample"])].append(row)
        return calls

    def _outcome(self, request: _Request, result: Completion, latency: float | None) -> CallOutcome:
        text = "" if result.tool_calls else result.text
        prompt, completion = result.prompt_tokens, result.completion_tokens
        estimated = not prompt
        if estimated:
            prompt = count_message_tokens([t.content for t in request.turns])
            completion = count_tokens(text)
        return CallOutcome(
            text=text,
            finish_reason=result.finish_reason,
            prompt_tokens=prompt,
            completion_tokens=completion,
            tokens_estimated=estimated,
            cost_usd=batch_call_cost(self.settings, prompt, completion),
            latency_s=latency or 0.0,
            output_mode=self._output_mode,
            max_tokens=self.settings.max_tokens,
        )

    def _settle(
        self, request: _Request, line: BatchLine, state: BatchState, out: _Ingested
    ) -> tuple[dict[str, Any], SampleVerdict | None]:
        """The call row of one result, and the sample's verdict when it is decided (else the
        follow-up request is queued in ``out``)."""
        config = self.prepared.config
        rubric = self.prepared.rubric
        key = SampleKey(self.run_id, request.item_id, request.sample, JUDGE_AGENT)
        started = _timestamp(state.created_at)
        # A batch request has no latency of its own: record the batch's turnaround.
        ended, created = state.ended_at, state.created_at
        latency = ended - created if ended and created else None

        def record(outcome: CallOutcome | None, fault: ProviderFault | None) -> dict[str, Any]:
            return call_row(
                key,
                request.seq,
                role="judge",
                model=self.settings.model,
                started=started,
                outcome=outcome,
                fault=fault,
            )

        if line.result is None:
            fault = line.fault or ProviderFault("no result", retryable=True)
            fault.output_mode = self._output_mode
            if fault.usage is not None:  # a malformed reply the provider still billed
                fault.cost_usd = batch_call_cost(self.settings, *fault.usage)
            row = record(None, fault)
            if fault.retryable and request.tries < config.retry.max_attempts:
                out.queued.append(
                    request.follow_up(
                        request.turns, tries=request.tries + 1, repairs=request.repairs
                    )
                )
                return row, None
            return row, SampleVerdict(
                "failed", error=f"provider: {fault.reason}", transcript=list(request.turns)
            )
        outcome = self._outcome(request, line.result, latency)
        row = record(outcome, None)
        turns = [*request.turns, ChatTurn("assistant", outcome.text)]
        try:
            parsed = parse_judgment(outcome.text, rubric)
        except JudgmentParseError as exc:
            if request.repairs < config.max_repairs:
                repair = ChatTurn("user", render_repair(str(exc), rubric))
                out.queued.append(
                    request.follow_up([*turns, repair], tries=1, repairs=request.repairs + 1)
                )
                return row, None
            problem = reply_problem(str(exc), outcome.finish_reason)
            return row, SampleVerdict(
                "failed",
                error=f"invalid reply after {request.repairs} repair(s): {problem}",
                raw_text=outcome.text,
                transcript=turns,
            )
        return row, SampleVerdict.judged(parsed, turns)

    async def ingest(self, batch: dict[str, Any], state: BatchState) -> None:
        """Store every result of a finished batch and queue the follow-ups, in one
        transaction; its requests are read and settled a page at a time meanwhile."""
        attempt = batch["attempt"]
        if state.over_token_queue:
            self._refused_for_tokens(batch, state)
            return
        results = await self.client.results(state)
        if state.status == "failed" and not results:
            reason = "; ".join(state.errors) or "no details"
            failed = ProviderFault(f"batch failed: {reason}"[:500], retryable=True)
        else:
            failed = ProviderFault("no result in the batch's output or error file", retryable=True)
        queued = [0]

        def settled() -> Iterator[dict[str, list[dict[str, Any]]]]:
            for page in iter_batch_requests(self.store, self.run_id, "submitted", attempt):
                requests = [_Request.from_row(row) for row in page]
                out = self._settle_all(requests, results, failed, state)
                queued[0] += len(out.queued)
                yield out.rows

        record_ingested_batch(self.store, self.run_id, attempt, settled())
        if queued[0]:
            self.console.print(
                f"batch {attempt}: {queued[0]} requests queued again (errors or repairs)"
            )

    def _settle_all(
        self,
        requests: list[_Request],
        results: BatchResults,
        failed: ProviderFault,
        state: BatchState,
    ) -> _Ingested:
        """The rows of some of a batch's requests: a call each, the samples they decide, and
        the follow-up requests of the rest."""
        prior = self._prior_calls(requests)
        out = _Ingested()
        for request in requests:
            line = results.pop(request.custom_id) or BatchLine(request.custom_id, fault=failed)
            row, verdict = self._settle(request, line, state, out)
            out.rows["calls"].append(row)
            self.tally.requests += 1
            if row["status"] == "ok":
                replies, tokens = self._replies
                self._replies = (replies + 1, tokens + (row["completion_tokens"] or 0))
            cost = row.get("cost_usd")
            if cost is None and row["status"] == "ok":
                self.tally.cost_known = False
            self.tally.cost_usd += cost or 0.0
            if verdict is None:
                continue
            where = (request.item_id, request.sample)
            key = SampleKey(self.run_id, request.item_id, request.sample, JUDGE_AGENT)
            calls = [*prior.get(where, []), row]
            decided = verdict_rows(key, self.prepared.rubric, verdict, calls)
            for table in ("samples", "judgments", "messages"):  # calls rows are added above
                out.rows[table].extend(decided[table])
            self._count(verdict)
        out.rows["provider_batch_requests"] = [r.row(self.run_id) for r in out.queued]
        return out

    def _count(self, verdict: SampleVerdict) -> None:
        if verdict.status == "ok":
            self.tally.ok += 1
            return
        self.tally.failed += 1
        reason = (verdict.error or "unknown").split(":")[0]
        self.tally.errors[reason] = self.tally.errors.get(reason, 0) + 1

    # -- the whole run -----------------------------------------------------------------------

    async def run(self) -> RunTally:
        """Submit, wait for and ingest batches until every sample is decided."""
        ensure_batch_tables(self.store)
        self._token_cap = self._learned_token_cap()
        try:
            while True:
                batch = open_batch(self.store, self.run_id)
                if batch is None:
                    if not queued_request_count(self.store, self.run_id) and not self.seed_queue():
                        return self.tally
                    with self._step(
                        "sending batch", last_batch_attempt(self.store, self.run_id) + 1
                    ):
                        batch = await self.submit()
                    if batch is None:
                        return self._out_of_budget()
                elif batch["batch_id"]:
                    self.console.print(
                        f"batch {batch['attempt']}: resuming the wait for {batch['batch_id']}"
                    )
                with self._step("waiting for batch", batch["attempt"]):
                    state = await self.wait(batch)
                with self._step("reading the results of batch", batch["attempt"]):
                    await self.ingest(batch, state)
        finally:
            await self.client.close()

    def _out_of_budget(self) -> RunTally:
        """End the run here: ``max_cost`` leaves room for none of the queued requests."""
        self.tally.budget_exhausted = True
        self.tally.not_started = queued_request_count(self.store, self.run_id)
        return self.tally

    @contextmanager
    def _step(self, what: str, attempt: int) -> Iterator[None]:
        """A provider's error in this step of the run stops it with one line to act on."""
        try:
            yield
        except ProviderFault as fault:
            raise BatchProviderError(
                f"{what} {attempt} failed: {fault.reason}. The run is kept: once this is fixed, "
                f"`judge run --resume {self.run_id}` carries on (nothing is sent twice)"
            ) from fault


def execute_batch_run(
    store: RunStore,
    run_id: str,
    prepared: PreparedRun,
    *,
    show_progress: bool = True,
    client: BatchClient | None = None,
    poll_interval: float = 10.0,
    max_poll_interval: float = 300.0,
) -> RunTally:
    """Produce every missing sample of a single-judge run through the provider's batch API,
    then write the final per-item scores.

    Ctrl-C, SIGTERM or a crash leave the submitted batch recorded: running the same run again
    (``judge run --resume``) polls it instead of submitting it again.

    Args:
        store: The run store.
        run_id: The run.
        prepared: The run's config, rubric, items and shots.
        show_progress: Show the batch's state while waiting.
        client: A batch client (tests inject one); built from the judge's settings otherwise.
        poll_interval: First wait between polls, in seconds.
        max_poll_interval: Longest wait between polls.
    """
    config = prepared.config
    check_batch_config(config, prepared.rubric, credentials=client is None)
    ensure_batch_tables(store)
    batch_run = BatchRun(
        store,
        run_id,
        prepared,
        client,
        poll_interval=poll_interval,
        max_poll_interval=max_poll_interval,
        show_progress=show_progress,
    )
    coroutine = drive_run(
        store, run_id, prepared, batch_run.run, agent=JUDGE_AGENT, handle_sigterm=True
    )
    return run_in_new_loop(store, run_id, coroutine)
