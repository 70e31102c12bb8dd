"""The Python API: evaluate, estimate, resume, audit, load a run, its agreement with physicians,
compare runs.

``judge run`` and ``judge audit`` are thin shells over these functions (as Inspect's CLI calls
``inspect_ai.eval``): they parse flags, pass every value on by name, and print. The synchronous
functions work inside a running event loop (a Jupyter kernel) by running the work on a helper
thread with its own loop.

Arguments are checked here, at the boundary: a wrong type or value raises a ``UserError`` whose
``setting`` is the parameter's name, never a TypeError from deep inside DuckDB, Arrow or numpy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import math
import os
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar, Unpack

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, computed_field

from clinjudge._args import (
    _db,
    _flag,
    _optional_path,
    _optional_text,
    _path,
    _text,
    _whole,
    _wrong,
)
from clinjudge._ratings_api import import_ratings
from clinjudge._run_options import ProbeOptions, RunOptions, without_perturber
from clinjudge._util.pandas_import import explain_missing_pandas
from clinjudge.analysis import (
    AUDIT_BOOT,
    AgreementResult,
    AuditStatistics,
    Comparison,
    ProbeStatistics,
    agreement_for_run,
    audit_for_run,
    compare_runs,
    identical_samples_note,
    probe_statistics,
    run_rubric,
    unplaced_ratings,
)
from clinjudge.errors import UserError
from clinjudge.inputs import parse_probes
from clinjudge.judges import COUNT_ENCODING, counts_exactly
from clinjudge.judges.clients import check_credentials, provider_for
from clinjudge.judges.workflows import workflow_for
from clinjudge.orchestration import (
    ConfigError,
    DryRunEstimate,
    PreparedRun,
    RunConfig,
    RunTally,
    check_batch_config,
    check_ray_config,
    create_probe_run,
    create_run,
    estimate_batch_run,
    estimate_local_wall_time,
    estimate_run,
    execute_run_async,
    load_stored_run,
    pending_work,
    perturb_variants,
    perturber_settings,
    prepare_audit,
    prepare_probe,
    prepare_run,
    run_config_from,
    timed_out_calls,
)
from clinjudge.reports import write_audit_report
from clinjudge.rubrics import load_rubric
from clinjudge.runs import (
    HumanRating,
    ImportSummary,
    RunStore,
    StoreError,
    is_batch_run,
    load_human_ratings,
    quality_flag_rows,
    quality_summary,
    record_audit_settings,
    run_counts,
    run_table,
    status_label,
    stored_ratings_for_run,
)

__all__ = [
    "AgreementResult",
    "AuditResult",
    "Comparison",
    "Estimate",
    "FailureSummary",
    "ProbeResult",
    "audit",
    "audit_async",
    "estimate",
    "estimate_audit",
    "Run",
    "RunFlag",
    "RunResult",
    "RunStart",
    "compare",
    "estimate_probe",
    "evaluate",
    "evaluate_async",
    "ImportSummary",
    "import_ratings",
    "load_run",
    "probe",
    "probe_async",
    "resume",
    "resume_async",
    "ProbeOptions",
    "RunOptions",
]

DEFAULT_POLL_SECONDS = 10.0
"""First wait between polls of a provider batch (``batch=True``); it doubles up to 300 s."""

T = TypeVar("T")


def _paths(name: str, value: object) -> list[str]:
    """One path or a list of them: a lone string is one path, never a list of characters."""
    if isinstance(value, str | os.PathLike):
        return [_path(name, value)]
    if not isinstance(value, Sequence) or not value:
        raise _wrong(name, "a path or a non-empty list of paths", value)
    return [_path(name, one) for one in value]


def _texts(name: str, value: object, *, optional: bool = False) -> list[str] | None:
    """One string or a list of them: a lone string is one item, never a list of characters.

    Args:
        name: The parameter, for the message.
        value: What the caller gave.
        optional: None, and an empty list, are allowed.
    """
    if value is None and optional:
        return None
    if isinstance(value, str):
        return [_text(name, value)]
    if not isinstance(value, Sequence) or not (value or optional):
        raise _wrong(name, "a string or a non-empty list of strings", value)
    return [_text(name, one) for one in value]


def _amount(name: str, value: object) -> float | None:
    """None or a finite number >= 0 (dollars, seconds)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong(name, "a number >= 0 or None", value)
    if not math.isfinite(value) or value < 0:
        raise _wrong(name, "a number >= 0 or None", value)
    return float(value)


def _seconds(name: str, value: object) -> float:
    """A finite number of seconds >= 0."""
    seconds = _amount(name, value)
    if seconds is None:
        raise _wrong(name, "a number >= 0", value)
    return seconds


class FailureSummary(BaseModel):
    """Failed samples that share a reason (the text before the first colon).

    Args:
        reason: The reason class, e.g. ``invalid reply``.
        count: Samples that failed this way.
        first_error: The first of their errors, whole.
    """

    model_config = ConfigDict(frozen=True)

    reason: str
    count: int
    first_error: str


class RunFlag(BaseModel):
    """A flag of a whole run (docs/trust.md).

    Args:
        flag: ``no_spread`` or ``unused_scale``.
        attribute: The attribute it is about.
        detail: What was seen.
    """

    model_config = ConfigDict(frozen=True)

    flag: str
    attribute: str
    detail: str


class RunResult(BaseModel):
    """What a finished (or stopped) run produced.

    Args:
        run_id: The run's id.
        db: The database holding it.
        status: completed, failed, interrupted or budget_exhausted.
        status_reason: Why it stopped early, if it did.
        simulated: Scores came from the simulated ``mock/`` provider (not judgments).
        items: Items in the run.
        items_ok: Items with a valid final judgment.
        samples_expected: Samples the run asks for (items x samples).
        samples_ok: Valid samples of the deciding agent.
        samples_failed: Failed samples of the deciding agent.
        calls: Model calls made (every attempt, every agent), replies from the response
            cache included.
        cached_calls: Of ``calls``, those answered from the response cache (``cache``): no
            provider call, cost 0.
        cost_usd: Dollars spent, as priced.
        cost_known: False when some successful call had no known price.
        failures: Failed samples grouped by reason, most frequent first.
        timed_out_calls: Model calls that timed out (``timeout`` or ``concurrency`` may need
            changing).
        warnings: What a person should know about the scores (e.g. repeated samples that are
            word-for-word copies).
        already_complete: A resumed run had nothing left to do.
        spent_usd: Dollars this call spent (``cost_usd`` is the whole run's).
        not_started: Samples the budget (``max_cost``) kept from starting in this call.
        suspect_samples: Samples (of any agent) with a suspect-judgment flag (docs/trust.md).
        flag_counts: Samples per sample flag (``at_token_cap``, ``degenerate_reason``...).
        run_flags: The run's own flags (``no_spread``, ``unused_scale``), each with its
            attribute and what was seen.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    db: str
    status: str
    status_reason: str | None = None
    simulated: bool
    items: int
    items_ok: int
    samples_expected: int = 0
    samples_ok: int
    samples_failed: int
    calls: int
    cost_usd: float
    cost_known: bool
    failures: list[FailureSummary] = []
    timed_out_calls: int = 0
    warnings: list[str] = []
    already_complete: bool = False
    spent_usd: float = 0.0
    not_started: int = 0
    cached_calls: int = 0
    suspect_samples: int = 0
    flag_counts: dict[str, int] = {}
    run_flags: list[RunFlag] = []

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status_text(self) -> str:
        """The status as people read it: ``completed, 0 of 3 valid`` when items lack a valid
        judgment."""
        return status_label(self.status, self.items, self.items_ok)

    @property
    def items_without_valid_final(self) -> int:
        """Items that did not end with a valid final judgment."""
        return self.items - self.items_ok

    def load(self) -> Run:
        """The stored run, for its tables and statistics."""
        return load_run(self.run_id, db=self.db)


class RunStart(BaseModel):
    """A run about to be judged: stored, nothing sent yet. ``on_start`` receives it (the CLI
    prints the run id, so a crash still leaves the id to resume).

    Args:
        run_id: The run's full id.
        db: The database holding it.
        config: The settings it runs with (a resumed run's stored ones, with this call's
            ``max_cost``).
        simulated: Some model is the simulated ``mock/`` provider (``RunConfig.simulated``).
        resumed: An earlier run is being finished.
        unmatched: Audits: encounters some vendors lack (judged anyway, left out of those
            vendors' pairs).
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    db: str
    config: RunConfig
    simulated: bool
    resumed: bool = False
    unmatched: list[dict[str, Any]] = []


OnStart = Callable[[RunStart], None]
"""Called once a run is stored, before any model call."""


class Estimate(BaseModel):
    """What a run would send, counted without sending anything or writing anything
    (:func:`estimate`, :func:`estimate_audit`; ``judge run --dry-run``).

    Args:
        model: The judge model.
        items: Items the run would judge.
        prompts: Model calls, first attempts only.
        prompt_tokens: Prompt tokens of those calls.
        max_prompt_tokens_one_call: The largest prompt.
        max_completion_tokens: Completion tokens at most (``max_tokens`` per call).
        cost_usd: Upper bound in dollars; None when the model's price is unknown.
        tokens_exact: Counted with the model's own tokenizer (else tiktoken's ``encoding``).
        encoding: The tiktoken encoding prompts were counted with.
        simulated: Some model is the simulated ``mock/`` provider.
        batch: Priced at the provider's batch prices.
        note: What the estimate leaves out (DocLens claims, magentic discussions, batches).
        tokens_note: Why the token counts are approximate, when they are (a real model whose
            tokenizer is unknown here).
        unmatched: Audits: encounters some vendors lack.
        cached_input_tokens: Prompt tokens the provider's prompt cache would likely serve
            (an estimate assuming each request finds the earlier ones' prefixes cached;
            None: not estimated for this provider or for batches).
        cache_write_tokens: Prompt tokens written to the cache (Anthropic), estimated likewise.
        cost_with_cache_usd: The cost's upper bound with those tokens at their cache prices.
        local_seconds: A model run in this process (``hf/``): the run's wall time, scaled from
            a short measured warm-up (None for other models, or when it could not be measured).
        local_note: What that estimate was measured on, or why it was not.
        local_warning: Said before a long local run, or when reading a batch's prompts
            outlasts ``timeout``.
    """

    model_config = ConfigDict(frozen=True)

    model: str
    items: int
    prompts: int
    prompt_tokens: int
    max_prompt_tokens_one_call: int
    max_completion_tokens: int
    cost_usd: float | None
    tokens_exact: bool
    encoding: str
    simulated: bool
    batch: bool = False
    note: str = ""
    tokens_note: str | None = None
    unmatched: list[dict[str, Any]] = []
    cached_input_tokens: int | None = None
    cache_write_tokens: int = 0
    cost_with_cache_usd: float | None = None
    local_seconds: float | None = None
    local_note: str | None = None
    local_warning: str | None = None


class AuditResult(AuditStatistics):
    """A vendor audit: per-vendor summaries, paired tests between vendors, flagged items, and
    the judge-corrected (PPI++) physicians' means where ratings were given (``ppi``,
    ``ppi_pairs``), with ``run``, the judging run's result, when the audit judged.

    ``to_arrow()``/``to_pandas()`` give one row per vendor and attribute.
    """

    run: RunResult | None = None

    def to_dict(self) -> dict[str, Any]:
        """The audit's statistics as plain data (what ``judge audit --json`` prints)."""
        out = super().to_dict()
        out.pop("run", None)
        return out

    def statistics(self) -> dict[str, Any]:
        """The audit's statistics as one plain dict (what ``judge audit --json`` prints)."""
        return self.to_dict()


class ProbeResult(ProbeStatistics):
    """A probe run's results (:func:`probe`): per probe and attribute, the share of variants
    whose score moved as expected with a Wilson 95% interval and the mean change (``rows``),
    a verdict per probe (``verdicts``), and ``run``, the judging run's result, when it judged.

    ``to_arrow()``/``to_pandas()`` give one row per probe and attribute.
    """

    run: RunResult | None = None

    def to_dict(self) -> dict[str, Any]:
        """The statistics as plain data (``run`` left out)."""
        out = super().to_dict()
        out.pop("run", None)
        return out


class Run:
    """A stored run, read-only. Tables come back as Arrow tables (``.to_pandas()`` for pandas).

    Args:
        run_id: The run's full id.
        db: The database holding it.
        info: The run's row (settings, models, status, counts).
    """

    def __init__(self, run_id: str, db: str, info: dict[str, Any]):
        self.run_id = run_id
        self.db = db
        self.info = info
        # Its tables are plain pyarrow tables: a missing pandas is explained at import time.
        explain_missing_pandas()

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, status={self.info.get('status')!r}, db={self.db!r})"

    def _table(self, table: str) -> pa.Table:
        with RunStore(self.db, read_only=True) as store:
            return run_table(store, self.run_id, table)

    def items(self) -> pa.Table:
        """The judged items (notes, text under evaluation, reference, vendor, flags)."""
        return self._table("items")

    def judgments(self, *, final: bool | None = None) -> pa.Table:
        """Scores in long form: one row per (item, sample, agent, attribute).

        Args:
            final: True for the final per-item scores only, False for the samples only,
                None for both.
        """
        final = _flag("final", final, optional=True)
        table = self._table("judgments")
        if final is None or table.num_rows == 0:
            return table
        return table.filter(pa.compute.equal(table["final"], final))

    def calls(self) -> pa.Table:
        """Every model call: role, agent, model, tokens, cost, latency, status, error."""
        return self._table("calls")

    def messages(self) -> pa.Table:
        """Transcripts: panel members' and MagenticOne discussion messages."""
        return self._table("messages")

    def quality_flags(self) -> pa.Table:
        """Suspect-judgment flags (docs/trust.md): one row per flag of a sample (item,
        sample, agent) or of the run (``item_id`` empty), with the attribute and what was
        seen."""
        with RunStore(self.db, read_only=True) as store:
            rows = quality_flag_rows(store, self.run_id)
        names = ["item_id", "sample", "agent", "flag", "attribute", "detail"]
        return pa.table({n: [r[n] for r in rows] for n in names})

    def agreement(self, *, n_boot: int = 1000, seed: int = 0) -> AgreementResult:
        """Agreement of this run's judge with the physicians' ratings in the store.

        Args:
            n_boot: Bootstrap resamples.
            seed: Bootstrap seed.
        """
        n_boot = _whole("n_boot", n_boot, 1)
        seed = _whole("seed", seed, 0)
        with RunStore(self.db, read_only=True) as store:
            return agreement_for_run(store, self.run_id, n_boot=n_boot, seed=seed)

    def audit(
        self,
        *,
        rules: Sequence[str] | None = None,
        n_boot: int = AUDIT_BOOT,
        seed: int = 0,
        ratings: str | Path | None = None,
        report_dir: str | Path | None = None,
        strict: bool = False,
    ) -> AuditResult:
        """Statistics of this vendor audit run, recomputed from the store (no judging).

        Args:
            rules: Flag rules such as ``accurate<=2`` (default: those that apply to the rubric).
            n_boot: Bootstrap resamples for the confidence intervals (0: none).
            seed: Bootstrap seed.
            ratings: Physicians' ratings of a sample of the items (as for :func:`audit`).
            report_dir: Write report.html and report.md here.
            strict: As for :func:`audit`.
        """
        rules = _texts("rules", rules, optional=True)
        n_boot = _whole("n_boot", n_boot, 0)
        seed = _whole("seed", seed, 0)
        ratings = _optional_path("ratings", ratings)
        report_dir = _optional_path("report_dir", report_dir)
        strict = bool(_flag("strict", strict))
        physicians = load_human_ratings(ratings, run_rubric(self.info)) if ratings else None
        if physicians is None:
            # Ratings in the store (`judge rate`, `judge ratings import`) need no file (#38).
            with RunStore(self.db, read_only=True) as store:
                physicians = stored_ratings_for_run(store, self.run_id) or None
        return _audit_result(
            self.db,
            self.run_id,
            rules,
            n_boot,
            seed,
            physicians,
            report_dir,
            strict=strict,
            ratings_file=ratings is not None,
        )

    def probe(self) -> ProbeResult:
        """The probe results of this ``judge probe`` run, recomputed from the store."""
        return _probe_result(self.db, self.run_id)


def _existing_db(db: str | Path | None) -> str:
    """The database, which must exist: functions that only read or finish runs never create
    one (a mistyped path would otherwise become an empty database)."""
    path = _db(db)
    if not Path(path).exists():
        raise StoreError(f"no database at {path}", setting="db")
    return path


def load_run(run_id: str, *, db: str | Path | None = None) -> Run:
    """Open a stored run by id or unique part of its id.

    Args:
        run_id: Run id or a unique part of it.
        db: Database (default ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb).
    """
    run_id = _text("run_id", run_id)
    path = _db(db)
    with RunStore(path, read_only=True) as store:
        info = store.get_run(run_id)
    return Run(info["run_id"], path, info)


def _result(
    store: RunStore,
    run_id: str,
    agent: str,
    tally: RunTally | None = None,
    *,
    already_complete: bool = False,
) -> RunResult:
    run = store.get_run(run_id)
    counts = run_counts(store, run_id, agent)
    copies = identical_samples_note(store, run_id)
    quality = quality_summary(store, run_id)
    return RunResult(
        run_id=run["run_id"],
        db=str(store.path),
        status=run["status"],
        status_reason=run.get("status_reason"),
        simulated=bool(run["simulated"]),
        items=counts.items,
        items_ok=counts.items_ok,
        samples_expected=counts.samples_expected,
        samples_ok=counts.samples_ok,
        samples_failed=counts.samples_failed,
        calls=counts.calls,
        cost_usd=counts.cost_usd,
        cost_known=counts.cost_known,
        failures=[FailureSummary(**vars(f)) for f in counts.failures],
        timed_out_calls=timed_out_calls(store, run_id),
        warnings=[copies] if copies else [],
        already_complete=already_complete,
        spent_usd=tally.cost_usd if tally else 0.0,
        not_started=tally.not_started if tally else 0,
        cached_calls=counts.cached_calls,
        suspect_samples=quality["suspect_samples"],
        flag_counts=quality["by_flag"],
        run_flags=[RunFlag(**f) for f in quality["run_flags"]],
    )


@dataclasses.dataclass(frozen=True)
class _Judging:
    """How one call judges: progress, provider batches, who hears of the start, signals."""

    progress: bool = False
    progress_every: float | None = None
    batch_poll: float | None = None
    """Seconds before the first poll of a provider batch; None: call the models directly."""
    on_start: OnStart | None = None
    owns_loop: bool = False
    """The call runs its own event loop: SIGTERM stops the run as Ctrl-C does."""


def _judging(
    *,
    progress: object,
    progress_every: object,
    batch: object,
    poll_interval: object,
    on_start: OnStart | None,
) -> _Judging:
    """The judging arguments of evaluate, resume and audit, checked."""
    _flag("progress", progress)
    if on_start is not None and not callable(on_start):
        raise _wrong("on_start", "a function of one RunStart, or None", on_start)
    return _Judging(
        progress=bool(progress),
        progress_every=_amount("progress_every", progress_every),
        batch_poll=_seconds("poll_interval", poll_interval) if _flag("batch", batch) else None,
        on_start=on_start,
    )


async def _judge(
    store: RunStore,
    run_id: str,
    prepared: PreparedRun,
    judging: _Judging,
    *,
    resumed: bool = False,
    unmatched: Sequence[dict[str, Any]] = (),
) -> RunResult:
    """Tell ``on_start``, produce the missing samples (directly or through a provider batch)
    and count what the run holds. ``store`` stays open (and locked) throughout."""
    config = prepared.config
    finished = resumed and store.get_run(run_id)["status"] == "completed"
    # Counted, not read: a completed run's missing samples are usually none.
    nothing_left = finished and not pending_work(store, run_id, prepared)
    if resumed and not nothing_left:
        # A key unset since the run began is bad settings: refused before the run restarts
        # (no call, the stored run left as it was, not marked failed again).
        _check_keys(config)
    if judging.on_start is not None:
        start = RunStart(
            run_id=run_id,
            db=str(store.path),
            config=config,
            simulated=config.simulated,
            resumed=resumed,
            unmatched=list(unmatched),
        )
        judging.on_start(start)
    agent = workflow_for(config.mode, prepared.rubric)[0]
    if nothing_left:
        return _result(store, run_id, agent, already_complete=True)
    tally = await execute_run_async(
        store,
        run_id,
        prepared,
        show_progress=judging.progress,
        progress_every=judging.progress_every,
        batch_poll_interval=judging.batch_poll,
        handle_sigterm=judging.owns_loop,
    )
    return _result(store, run_id, agent, tally)


def _check_batch(config: RunConfig, batch: bool, *, credentials: bool = True) -> None:
    """Refuse a run that cannot go through a provider's batch API, before anything is read or
    written (one check, with the rubric: a claim rubric cannot go either).

    Args:
        config: The run's settings.
        batch: Whether the run goes through a batch API.
        credentials: Also require the API key (a dry run needs none).
    """
    if not batch:
        return
    if config.cache:
        # A batch neither reads nor fills the response cache: taking cache silently would
        # pay for replies the user believed were free.
        raise ConfigError(
            "batch and cache do not combine: a provider batch neither reads nor fills the "
            "response cache; drop one of them",
            setting="batch,cache",
        )
    check_batch_config(config, load_rubric(config.rubric), credentials=credentials)


def _check_keys(config: RunConfig) -> None:
    """Every model's API key and endpoint, checked before the run is stored: a missing key is
    bad settings (nothing written), not a failed run to resume."""
    for settings in (config.judge, *config.roles.values()):
        if settings is not None:
            check_credentials(settings)


def _new_run(
    data: object,
    options: RunOptions,
    *,
    limit: object,
    shuffle: object,
    batch: bool,
    credentials: bool,
    source: str | None,
) -> PreparedRun:
    """A new run's settings, checked and prepared (nothing written)."""
    if "dry_run" in options:
        raise ConfigError(
            "dry_run: call clinjudge.estimate(...) with the same arguments; it returns the "
            "Estimate without judging",
            setting="dry_run",
        )
    limit = None if limit is None else _whole("limit", limit, 1)
    shuffle = _flag("shuffle", shuffle)
    config = run_config_from({**options, "data": _optional_path("data", data)}, source=source)
    _check_batch(config, batch, credentials=credentials)
    if credentials:
        _check_keys(config)
    return prepare_run(config, limit=limit, shuffle=bool(shuffle))


async def _evaluate(
    data: object,
    judging: _Judging,
    *,
    limit: object,
    shuffle: object,
    source: str | None,
    options: RunOptions,
) -> RunResult:
    batch = judging.batch_poll is not None
    prepared = await asyncio.to_thread(
        _new_run,
        data,
        options,
        limit=limit,
        shuffle=shuffle,
        batch=batch,
        credentials=True,
        source=source,
    )
    # One open store from creating the run to judging it: DuckDB's lock is held throughout,
    # so no other process can slip in between.
    with RunStore(prepared.config.db) as store:
        run_id = create_run(store, prepared)
        return await _judge(store, run_id, prepared, judging)


async def evaluate_async(
    data: str | Path | None = None,
    *,
    progress: bool = False,
    progress_every: float | None = None,
    limit: int | None = None,
    shuffle: bool = False,
    batch: bool = False,
    poll_interval: float = DEFAULT_POLL_SECONDS,
    on_start: OnStart | None = None,
    source: str | None = None,
    **options: Unpack[RunOptions],
) -> RunResult:
    """Judge a dataset and store everything; the async form of :func:`evaluate` (same
    arguments)."""
    judging = _judging(
        progress=progress,
        progress_every=progress_every,
        batch=batch,
        poll_interval=poll_interval,
        on_start=on_start,
    )
    return await _evaluate(
        data, judging, limit=limit, shuffle=shuffle, source=source, options=options
    )


def evaluate(
    data: str | Path | None = None,
    *,
    progress: bool = False,
    progress_every: float | None = None,
    limit: int | None = None,
    shuffle: bool = False,
    batch: bool = False,
    poll_interval: float = DEFAULT_POLL_SECONDS,
    on_start: OnStart | None = None,
    source: str | None = None,
    **options: Unpack[RunOptions],
) -> RunResult:
    """Judge a dataset with a rubric and store every score, call and transcript.

    Example::

        result = clinjudge.evaluate("items.jsonl", rubric="pdsqi9", mode="panel",
                                    model="openai/gpt-4o-mini", samples=3, limit=5)
        scores = result.load().judgments(final=True).to_pandas()

    For a dry run (count tokens and cost, call nothing) use :func:`estimate` with the same
    arguments. Ctrl-C (and SIGTERM, when this call owns the event loop) stops the run cleanly:
    finished samples are stored, the run is marked ``interrupted`` and ``KeyboardInterrupt``
    propagates; :func:`resume` finishes it.

    Args:
        data: Items to judge (JSONL, CSV or Parquet), or None to take it from ``config``.
        progress: Draw a progress bar on stderr.
        progress_every: Off a terminal, seconds between progress lines (default
            ``$CLINJUDGE_PROGRESS_SECONDS``, else 30).
        limit: Judge only the first ``limit`` items (of the shard, with ``shard``).
        shuffle: With ``limit``: a sample of items drawn with ``seed`` instead.
        batch: Single mode, ``openai/`` or ``azure/`` models: send the work through the
            provider's batch API (half price, results within 24 h).
        poll_interval: With ``batch``: seconds before the first poll (doubles up to 300).
        on_start: Called with a :class:`RunStart` once the run is stored, before any model
            call.
        source: What the settings came from, named in error messages (the CLI says "flags").
        **options: The settings of ``judge run`` by name, each declared in
            :class:`RunOptions` (``rubric``, ``mode``, ``model``, ``samples``, ``db``,
            ``config`` for a YAML file...). Without a model it
            uses ``$CLINJUDGE_MODEL``, else the simulated ``mock/judge`` (its run is marked
            simulated).
    """
    judging = _judging(
        progress=progress,
        progress_every=progress_every,
        batch=batch,
        poll_interval=poll_interval,
        on_start=on_start,
    )
    return _run_sync(
        lambda owns_loop: _evaluate(
            data,
            _own(judging, owns_loop),
            limit=limit,
            shuffle=shuffle,
            source=source,
            options=options,
        )
    )


def _estimate(
    prepared: PreparedRun, batch: bool, unmatched: Sequence[dict[str, Any]] = ()
) -> Estimate:
    config = prepared.config
    judge = config.judge
    assert judge is not None
    counted: DryRunEstimate = estimate_batch_run(prepared) if batch else estimate_run(prepared)
    local = None if batch else estimate_local_wall_time(prepared, counted)
    exact = counts_exactly(judge)
    tokens_note = None
    if not exact and not provider_for(judge).simulated:
        tokens_note = (
            f"token counts are approximate: the tokenizer of {judge.model} is unknown here, so "
            f"prompts were counted with tiktoken's {COUNT_ENCODING} (OpenAI's); the model's own "
            "tokenizer may count 10-20% more, and the cost with it"
        )
    return Estimate(
        model=judge.model,
        items=len(prepared.items),
        prompts=counted.prompts,
        prompt_tokens=counted.prompt_tokens,
        max_prompt_tokens_one_call=counted.max_prompt_tokens_one_call,
        max_completion_tokens=counted.max_completion_tokens,
        cost_usd=counted.cost_usd,
        tokens_exact=exact,
        encoding=COUNT_ENCODING,
        simulated=config.simulated,
        batch=batch,
        note=counted.note,
        tokens_note=tokens_note,
        unmatched=list(unmatched),
        cached_input_tokens=counted.cached_input_tokens,
        cache_write_tokens=counted.cache_write_tokens,
        cost_with_cache_usd=counted.cost_with_cache_usd,
        local_seconds=local.seconds if local else None,
        local_note=local.note if local else None,
        local_warning=local.warning if local else None,
    )


def estimate(
    data: str | Path | None = None,
    *,
    limit: int | None = None,
    shuffle: bool = False,
    batch: bool = False,
    source: str | None = None,
    **options: Unpack[RunOptions],
) -> Estimate:
    """A dry run: render every prompt of the run :func:`evaluate` would make with the same
    arguments, count tokens and price them. Calls nothing, writes nothing, needs no API key.

    Args:
        data: Items to judge, or None to take it from ``config``.
        limit: Count only the first ``limit`` items.
        shuffle: With ``limit``: a sample of items drawn with ``seed`` instead.
        batch: Price at the provider's batch prices (and check the run can go as a batch).
        source: What the settings came from, named in error messages.
        **options: The settings of ``judge run`` by name (see :func:`evaluate`).
    """
    batch = bool(_flag("batch", batch))
    prepared = _new_run(
        data,
        options,
        limit=limit,
        shuffle=shuffle,
        batch=batch,
        credentials=False,
        source=source,
    )
    return _estimate(prepared, batch)


async def _resume(run_id: str, db: str, max_cost: float | None, judging: _Judging) -> RunResult:
    with RunStore(db) as store:
        full_id, prepared = load_stored_run(store, run_id)
        # Before the run is marked running again: a Ray cluster that is gone is one line.
        check_ray_config(prepared.config)
        if max_cost is not None:
            # A budget given with the resume replaces the stored one for this call.
            prepared.config = prepared.config.model_copy(update={"max_cost": max_cost})
        poll = judging.batch_poll
        if poll is None and is_batch_run(store, full_id):
            poll = DEFAULT_POLL_SECONDS  # a run begun as a provider batch stays one
        if poll is not None:
            check_batch_config(prepared.config, prepared.rubric)
        judging = dataclasses.replace(judging, batch_poll=poll)
        return await _judge(store, full_id, prepared, judging, resumed=True)


async def resume_async(
    run_id: str,
    *,
    db: str | Path | None = None,
    max_cost: float | None = None,
    progress: bool = False,
    progress_every: float | None = None,
    batch: bool = False,
    poll_interval: float = DEFAULT_POLL_SECONDS,
    on_start: OnStart | None = None,
) -> RunResult:
    """Finish the missing work of a stored run: the async form of :func:`resume` (same
    arguments)."""
    run_id = _text("run_id", run_id)
    max_cost = _amount("max_cost", max_cost)
    judging = _judging(
        progress=progress,
        progress_every=progress_every,
        batch=batch,
        poll_interval=poll_interval,
        on_start=on_start,
    )
    return await _resume(run_id, _existing_db(db), max_cost, judging)


def _own(judging: _Judging, owns_loop: bool) -> _Judging:
    return dataclasses.replace(judging, owns_loop=owns_loop)


def _run_sync(start: Callable[[bool], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion, also from inside a running event loop.

    Args:
        start: Makes the coroutine; its argument says whether it runs on a loop of its own (so
            it may take SIGTERM as a stop, as the CLI needs).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        try:
            return asyncio.run(start(True))
        except asyncio.CancelledError:
            # SIGTERM cancelled the run (stored as interrupted): stop as Ctrl-C does.
            raise KeyboardInterrupt from None
    # A notebook's loop is already running in this thread: use a thread with its own loop.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="clinjudge") as pool:
        return pool.submit(asyncio.run, start(False)).result()


def resume(
    run_id: str,
    *,
    db: str | Path | None = None,
    max_cost: float | None = None,
    progress: bool = False,
    progress_every: float | None = None,
    batch: bool = False,
    poll_interval: float = DEFAULT_POLL_SECONDS,
    on_start: OnStart | None = None,
) -> RunResult:
    """Finish exactly the missing work of a stored run (after a crash, stop or budget).

    A run begun with ``batch`` stays a provider batch run: its waiting batch is polled, never
    submitted twice.

    Args:
        run_id: Run id or a unique part of it.
        db: Database (default ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb); it must exist.
        max_cost: A budget for this call, replacing the stored one.
        progress: Draw a progress bar on stderr.
        progress_every: Off a terminal, seconds between progress lines.
        batch: Finish the run through the provider's batch API.
        poll_interval: With a batch: seconds before the first poll.
        on_start: Called with a :class:`RunStart` before any model call.
    """
    run_id = _text("run_id", run_id)
    max_cost = _amount("max_cost", max_cost)
    judging = _judging(
        progress=progress,
        progress_every=progress_every,
        batch=batch,
        poll_interval=poll_interval,
        on_start=on_start,
    )
    path = _existing_db(db)
    return _run_sync(lambda owns_loop: _resume(run_id, path, max_cost, _own(judging, owns_loop)))


def compare(
    run_ids: Sequence[str],
    *,
    db: str | Path | None = None,
    sort: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> Comparison:
    """Compare judge configurations (runs over the same items) on agreement, cost and latency.

    Args:
        run_ids: Run ids or unique parts of them (one id alone may be a plain string).
        db: Database (default ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb).
        sort: Column to sort by (e.g. ``icc``, ``cost_per_item_usd``).
        n_boot: Bootstrap resamples per run.
        seed: Bootstrap seed.
    """
    ids = _texts("run_ids", run_ids) or []
    sort = _optional_text("sort", sort)
    n_boot = _whole("n_boot", n_boot, 1)
    seed = _whole("seed", seed, 0)
    with RunStore(_db(db), read_only=True) as store:
        return compare_runs(store, ids, sort=sort, n_boot=n_boot, seed=seed)


def _audit_result(
    db: str,
    run_id: str,
    rules: list[str] | None,
    n_boot: int,
    seed: int,
    ratings: list[HumanRating] | None,
    report_dir: str | None,
    run: RunResult | None = None,
    *,
    strict: bool = False,
    ratings_file: bool = False,
) -> AuditResult:
    """An audit run's statistics (and report, when asked for) from the store.

    The bootstrap settings, and the physicians' ratings when they came from a file
    (``ratings_file``), are kept with the run first: the viewer recomputes the audit from
    there, and shows what this call printed (#39). A file's ratings stay out of the imported
    ones (``human_ratings``), which a file tried on one audit must not change; ratings read
    from the store are read from there again.
    """
    settings: dict[str, Any] = {"n_boot": n_boot, "seed": seed}
    if ratings is not None and ratings_file:  # the store's own ratings are read from there
        settings["ratings"] = [[r.item_id, r.rater_id, r.attribute, r.score] for r in ratings]
    with RunStore(db) as store:
        run_id = record_audit_settings(store, run_id, settings)
    with RunStore(db, read_only=True) as store:
        stats = audit_for_run(
            store, run_id, rules=rules, n_boot=n_boot, seed=seed, ratings=ratings, strict=strict
        )
    if report_dir is not None:
        write_audit_report(stats, report_dir)
    result = AuditResult.model_validate(stats.to_dict())
    return result.model_copy(update={"run": run}) if run is not None else result


def _audit_settings(
    vendors: object, options: RunOptions, source: str | None
) -> tuple[RunConfig, list[str]]:
    """An audit's settings and vendor files: ``vendors``, else ``data`` in the config file."""
    paths = None if vendors is None else _paths("vendors", vendors)
    data = ",".join(paths) if paths else None
    config = run_config_from({**options, "data": data}, source=source)
    if paths is None:
        if not config.data:
            raise ConfigError("no input data: pass one file per vendor", setting="vendors")
        paths = [config.data]
    return config, paths


def _prepare_audit(
    vendors: object,
    rules: list[str] | None,
    ratings: str | None,
    source: str | None,
    options: RunOptions,
    credentials: bool = True,
    batch: bool = False,
    strict: bool = False,
) -> tuple[PreparedRun, list[dict[str, Any]], list[HumanRating] | None]:
    """An audit's run, its unmatched encounters and the physicians' ratings, all checked
    before anything is written (a bad ratings file stops the audit first); ``credentials``
    also checks the API keys (a dry run needs none), ``batch`` that the run can go through a
    provider's batch API, ``strict`` that every rating names one of the audit's items."""
    config, paths = _audit_settings(vendors, options, source)
    _check_batch(config, batch, credentials=credentials)
    if credentials:
        _check_keys(config)
    prepared, audit_items = prepare_audit(config, paths, rules)
    physicians = load_human_ratings(ratings, prepared.rubric) if ratings else None
    if strict and physicians:
        # Before judging, so a misspelt vendor costs nothing. The items of every shard count:
        # a shard's own statistics warn about the ratings of the others' items.
        unplaced_ratings(physicians, set(audit_items.ids), audit_items.vendors, strict=True)
    return prepared, list(audit_items.unmatched), physicians


async def _audit(
    vendors: object,
    judging: _Judging,
    *,
    rules: object,
    report_dir: object,
    n_boot: object,
    ratings: object,
    source: str | None,
    options: RunOptions,
    strict: object = False,
) -> AuditResult:
    checked_rules = _texts("rules", rules, optional=True)
    report = _optional_path("report_dir", report_dir)
    boot = _whole("n_boot", n_boot, 0)  # 0: no confidence intervals, as `judge audit --boot 0`
    physicians_file = _optional_path("ratings", ratings)
    refuse = bool(_flag("strict", strict))
    batch = judging.batch_poll is not None
    prepared, unmatched, physicians = await asyncio.to_thread(
        _prepare_audit,
        vendors,
        checked_rules,
        physicians_file,
        source,
        options,
        True,
        batch,
        refuse,
    )
    config = prepared.config
    with RunStore(config.db) as store:
        run_id = create_run(store, prepared)
        run = await _judge(store, run_id, prepared, judging, unmatched=unmatched)
    # `strict` was applied before judging, against every item: refusing now would throw away
    # what was judged (a shard's run lacks the other shards' items, which are only named).
    return _audit_result(
        config.db,
        run_id,
        checked_rules,
        boot,
        config.seed,
        physicians,
        report,
        run,
        ratings_file=physicians_file is not None,
    )


async def audit_async(
    vendors: Sequence[str | Path] | str | Path | None = None,
    *,
    rules: Sequence[str] | None = None,
    report_dir: str | Path | None = None,
    n_boot: int = AUDIT_BOOT,
    progress: bool = False,
    progress_every: float | None = None,
    ratings: str | Path | None = None,
    strict: bool = False,
    batch: bool = False,
    poll_interval: float = DEFAULT_POLL_SECONDS,
    on_start: OnStart | None = None,
    source: str | None = None,
    **options: Unpack[RunOptions],
) -> AuditResult:
    """Judge several vendors' outputs on the same encounters; the async form of :func:`audit`
    (same arguments)."""
    judging = _judging(
        progress=progress,
        progress_every=progress_every,
        batch=batch,
        poll_interval=poll_interval,
        on_start=on_start,
    )
    return await _audit(
        vendors,
        judging,
        rules=rules,
        report_dir=report_dir,
        n_boot=n_boot,
        ratings=ratings,
        source=source,
        options=options,
        strict=strict,
    )


def audit(
    vendors: Sequence[str | Path] | str | Path | None = None,
    *,
    rules: Sequence[str] | None = None,
    report_dir: str | Path | None = None,
    n_boot: int = AUDIT_BOOT,
    progress: bool = False,
    progress_every: float | None = None,
    ratings: str | Path | None = None,
    strict: bool = False,
    batch: bool = False,
    poll_interval: float = DEFAULT_POLL_SECONDS,
    on_start: OnStart | None = None,
    source: str | None = None,
    **options: Unpack[RunOptions],
) -> AuditResult:
    """Audit vendors: one judge configuration over every vendor's outputs, then statistics.

    Works inside a running loop, as :func:`evaluate` does.

    Args:
        vendors: One file per vendor (the vendor is the file stem unless records carry
            ``vendor``), or one file (a plain path) whose records all carry ``vendor``; None
            takes ``data`` from ``config``.
        rules: Flag rules such as ``accurate<=2`` (default: those that apply to the rubric).
        report_dir: Write report.html and report.md here.
        n_boot: Bootstrap resamples for the confidence intervals (0: none).
        progress: Draw a progress bar on stderr.
        progress_every: Off a terminal, seconds between progress lines.
        ratings: Physicians' ratings of a random sample of the items (as for
            :func:`import_ratings`, or with ``vendor`` + ``item_id``): adds the judge-corrected
            (PPI++) estimates of the physicians' means (``ppi``, ``ppi_pairs``).
        strict: Refuse (:class:`UserError`, before anything is judged) ratings that name a
            vendor or item the audit does not have; without it they are left out and
            ``ppi_warnings`` names each one.
        batch: Single mode, ``openai/`` or ``azure/`` models: judge through the provider's
            batch API (half price, results within 24 h), as :func:`evaluate` does.
        poll_interval: With ``batch``: seconds before the first poll (doubling to 300).
        on_start: Called with a :class:`RunStart` (its ``unmatched`` encounters too) once the
            run is stored, before any model call.
        source: What the settings came from, named in error messages.
        **options: The settings of ``judge run`` by name (see :func:`evaluate`).
    """
    judging = _judging(
        progress=progress,
        progress_every=progress_every,
        batch=batch,
        poll_interval=poll_interval,
        on_start=on_start,
    )
    return _run_sync(
        lambda owns_loop: _audit(
            vendors,
            _own(judging, owns_loop),
            rules=rules,
            report_dir=report_dir,
            n_boot=n_boot,
            ratings=ratings,
            source=source,
            options=options,
            strict=strict,
        )
    )


def estimate_audit(
    vendors: Sequence[str | Path] | str | Path | None = None,
    *,
    rules: Sequence[str] | None = None,
    ratings: str | Path | None = None,
    strict: bool = False,
    batch: bool = False,
    source: str | None = None,
    **options: Unpack[RunOptions],
) -> Estimate:
    """A dry run of :func:`audit` with the same arguments: counts tokens and cost, checks the
    flag rules and the ratings file; calls nothing, writes nothing.

    Args:
        vendors: As for :func:`audit`.
        rules: Flag rules (checked).
        ratings: Physicians' ratings (checked against the rubric).
        strict: Also check that every rating names one of the audit's items.
        batch: Priced at the provider's batch prices (and checked for a batch run).
        source: What the settings came from, named in error messages.
        **options: The settings of ``judge run`` by name (see :func:`evaluate`).
    """
    checked_rules = _texts("rules", rules, optional=True)
    physicians_file = _optional_path("ratings", ratings)
    by_batch = bool(_flag("batch", batch))
    refuse = bool(_flag("strict", strict))
    prepared, unmatched, _ = _prepare_audit(
        vendors, checked_rules, physicians_file, source, options, False, by_batch, refuse
    )
    return _estimate(prepared, by_batch, unmatched)


def _probe_result(db: str, run_id: str, run: RunResult | None = None) -> ProbeResult:
    """A probe run's statistics from the store."""
    with RunStore(db, read_only=True) as store:
        stats = probe_statistics(store, run_id)
    result = ProbeResult.model_validate(stats.to_dict())
    return result.model_copy(update={"run": run}) if run is not None else result


def _prepare_probe_run(
    data: object,
    probes: object,
    options: RunOptions,
    *,
    limit: object,
    credentials: bool,
    source: str | None,
) -> Any:
    """A probe run's settings, checked, and its originals and variants built (nothing
    written)."""
    if "dry_run" in options:
        raise ConfigError(
            "dry_run: call clinjudge.estimate_probe(...) with the same arguments",
            setting="dry_run",
        )
    chosen = _probe_names(probes)
    limit = None if limit is None else _whole("limit", limit, 1)
    config = run_config_from({**options, "data": _optional_path("data", data)}, source=source)
    if credentials:
        _check_keys(config)
    return prepare_probe(config, chosen, limit=limit)


def _probe_names(probes: object) -> list[str]:
    if probes is not None and not isinstance(probes, str | Sequence):
        raise _wrong("probes", "probe names (a list or 'a,b')", probes)
    try:
        return parse_probes(probes)  # type: ignore[arg-type]
    except ValueError as exc:
        raise UserError(str(exc), setting="probes") from None


async def _probe(
    data: object,
    judging: _Judging,
    *,
    probes: object,
    limit: object,
    source: str | None,
    options: ProbeOptions,
) -> ProbeResult:
    perturber = _optional_text("perturber", options.get("perturber"))
    prepared = await asyncio.to_thread(
        _prepare_probe_run,
        data,
        probes,
        without_perturber(options),
        limit=limit,
        credentials=True,
        source=source,
    )
    config = prepared.run.config
    if perturber:  # a model rewrites the variants, keeping each edit (docs/trust.md)
        judge = config.judge or next(iter(config.roles.values()), None)
        if judge is None:
            raise ConfigError("perturber: the run names no model to share an endpoint with")
        await perturb_variants(
            prepared,
            perturber_settings(judge, perturber),
            prepared.run.rubric,
            concurrency=config.concurrency,
        )
    with RunStore(config.db) as store:
        run_id = create_probe_run(store, prepared)
        run = await _judge(store, run_id, prepared.run, judging)
    return _probe_result(config.db, run_id, run)


async def probe_async(
    data: str | Path | None = None,
    *,
    probes: Sequence[str] | str | None = None,
    limit: int | None = None,
    progress: bool = False,
    progress_every: float | None = None,
    on_start: OnStart | None = None,
    source: str | None = None,
    **options: Unpack[ProbeOptions],
) -> ProbeResult:
    """Probe a judge configuration; the async form of :func:`probe` (same arguments)."""
    judging = _judging(
        progress=progress,
        progress_every=progress_every,
        batch=False,
        poll_interval=DEFAULT_POLL_SECONDS,
        on_start=on_start,
    )
    return await _probe(data, judging, probes=probes, limit=limit, source=source, options=options)


def probe(
    data: str | Path | None = None,
    *,
    probes: Sequence[str] | str | None = None,
    limit: int | None = None,
    progress: bool = False,
    progress_every: float | None = None,
    on_start: OnStart | None = None,
    source: str | None = None,
    **options: Unpack[ProbeOptions],
) -> ProbeResult:
    """Test a judge with controlled edits of each item: does its score move when the text
    gets worse, and hold still when it should?

    Each item gets one seeded, rule-based variant per probe (contradiction, fabrication,
    omission, padding, disorder, uncited, stigma, injection, neutral; seeded with ``seed``);
    originals and variants are judged in one ordinary run (:func:`resume` finishes it), and
    each variant's scores are compared with its original's. An item a probe cannot edit is
    skipped with its reason counted. Passing probes is necessary, not sufficient: agreement
    with physicians remains the test (docs/trust.md).

    Example::

        result = clinjudge.probe("items.jsonl", rubric="pdsqi9", model="openai/gpt-4o-mini")
        result.to_pandas()        # one row per probe and attribute
        [(v.probe, v.verdict) for v in result.verdicts]

    Args:
        data: Items to probe (JSONL, CSV or Parquet), or None to take it from ``config``.
        probes: Probe names (a list or ``"a,b"``); None: all of them.
        limit: Probe only the first ``limit`` items.
        progress: Draw a progress bar on stderr.
        progress_every: Off a terminal, seconds between progress lines.
        on_start: Called with a :class:`RunStart` once the run is stored, before any model
            call.
        source: What the settings came from, named in error messages.
        **options: The settings of ``judge run`` by name (:class:`RunOptions`), and
            ``perturber`` (:class:`ProbeOptions`): a model
            (``provider/model``, reached with the judge's endpoint and key) that rewrites
            each variant more naturally, kept only where the edit survives (docs/trust.md).
    """
    judging = _judging(
        progress=progress,
        progress_every=progress_every,
        batch=False,
        poll_interval=DEFAULT_POLL_SECONDS,
        on_start=on_start,
    )
    return _run_sync(
        lambda owns_loop: _probe(
            data,
            _own(judging, owns_loop),
            probes=probes,
            limit=limit,
            source=source,
            options=options,
        )
    )


def estimate_probe(
    data: str | Path | None = None,
    *,
    probes: Sequence[str] | str | None = None,
    limit: int | None = None,
    source: str | None = None,
    **options: Unpack[ProbeOptions],
) -> Estimate:
    """A dry run of :func:`probe` with the same arguments: builds the variants, renders every
    prompt of originals and variants, counts tokens and prices them; calls nothing, writes
    nothing, needs no API key.

    Args:
        data: As for :func:`probe`.
        probes: As for :func:`probe`.
        limit: As for :func:`probe`.
        source: What the settings came from, named in error messages.
        **options: The settings of ``judge run`` by name.
    """
    # A perturber's calls are not estimated (the CLI says so); its name is no run setting.
    prepared = _prepare_probe_run(
        data, probes, without_perturber(options), limit=limit, credentials=False, source=source
    )
    return _estimate(prepared.run, False)
