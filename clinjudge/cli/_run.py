"""`judge run`: start or resume a run."""

from __future__ import annotations

import contextlib
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from clinjudge.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    console,
    default_db,
    fail,
    open_store,
    user_error_text,
)
from clinjudge.cli._help import PANELS
from clinjudge.cli._options import (
    BaseUrlOption,
    ConcurrencyOption,
    ConfigOption,
    DbOption,
    MaxCostOption,
    ModelOption,
    ModeOption,
    NameOption,
    PersonasOption,
    PRMOption,
    ProgressOption,
    RubricOption,
    SamplesOption,
    ShardOption,
)
from clinjudge.cli._outcome import (
    AllowFailuresOption,
    exit_on_failures,
    parse_allow_failures,
    print_outcome,
)
from clinjudge.cli._quiet import third_party_quiet
from clinjudge.errors import UserError
from clinjudge.judges import (
    COUNT_ENCODING,
    SIMULATED_NOTICE,
    TIMED_OUT,
    ModelConfigError,
    ModelSettings,
    ReasoningEffort,
    counts_exactly,
)
from clinjudge.judges.workflows import workflow_for
from clinjudge.orchestration import (
    PROGRESS_SECONDS_ENV,
    CircuitBreakerOpen,
    ConfigError,
    DryRunEstimate,
    PreparedRun,
    RetryPolicy,
    RunConfig,
    RunTally,
    RunWriteError,
    check_batch_config,
    create_run,
    estimate_batch_run,
    estimate_run,
    execute_batch_run,
    execute_run,
    load_stored_run,
    missing_work,
    prepare_run,
    run_config_from,
    timed_out_calls,
    timeout_advice,
)
from clinjudge.runs import RunStore, is_batch_run, run_counts

# Help panels of `judge run` (the shared options in _options.py carry theirs).
DATA, MODEL, SAMPLING, PANEL = PANELS.data, PANELS.model, PANELS.sampling, PANELS.panel
DOCLENS, PRM, LIMITS, OUTPUT = PANELS.doclens, PANELS.prm, PANELS.limits, PANELS.output
# Defaults shown in --help for options that fall back to the config file, then to these.
_RUN_DEFAULTS = {k: str(f.default) for k, f in RunConfig.model_fields.items()}
_JUDGE_DEFAULTS = {k: str(f.default) for k, f in ModelSettings.model_fields.items()}
BATCH_POLL_SECONDS = 10.0


def _print_estimate(estimate: DryRunEstimate, prepared: PreparedRun) -> None:
    table = Table(title="Dry run: nothing was sent, nothing was written")
    table.add_column("what")
    table.add_column("value", justify="right")
    assert prepared.config.judge is not None
    table.add_row("model", prepared.config.judge.model)
    table.add_row("items", str(len(prepared.items)))
    table.add_row("model calls (first attempts)", str(estimate.prompts))
    exact = counts_exactly(prepared.config.judge)
    approximate = "" if exact else ", approximate"
    table.add_row(
        f"prompt tokens (tiktoken {COUNT_ENCODING}{approximate})", f"{estimate.prompt_tokens:,}"
    )
    table.add_row("largest prompt (tokens)", f"{estimate.max_prompt_tokens_one_call:,}")
    table.add_row("completion tokens (upper bound)", f"{estimate.max_completion_tokens:,}")
    cost = "unknown price" if estimate.cost_usd is None else f"${estimate.cost_usd:,.4f}"
    table.add_row("estimated cost (upper bound)", cost)
    console.print(table)
    if not exact and not prepared.config.judge.is_mock:
        console.print(
            f"[yellow]note:[/] token counts are approximate: the tokenizer of "
            f"{escape(prepared.config.judge.model)} is unknown here, so prompts were counted with "
            f"tiktoken's {COUNT_ENCODING} (OpenAI's); the model's own tokenizer may count 10-20% "
            "more, and the cost with it",
            soft_wrap=True,
        )
    if estimate.note:
        console.print(f"[yellow]note:[/] {escape(estimate.note)}")


def _execute(
    store: Any, run_id: str, prepared: PreparedRun, show_progress: bool, batch: float | None
) -> RunTally:
    """Run the missing work directly, or through the provider's batch API when ``batch`` holds
    its first poll interval in seconds (a run begun with --batch stays a batch run)."""
    if batch is None and is_batch_run(store, run_id):
        batch = BATCH_POLL_SECONDS
    if batch is None:
        return execute_run(store, run_id, prepared, show_progress=show_progress)
    return execute_batch_run(
        store, run_id, prepared, show_progress=show_progress, poll_interval=batch
    )


def limit_items(prepared: PreparedRun, limit: int | None, shuffle: bool) -> PreparedRun:
    """Keep the first ``limit`` items, or with ``shuffle`` a sample drawn with the run's seed
    (in dataset order), so a paid model can be tried on a few items first."""
    if limit is None or limit >= len(prepared.items):
        if shuffle and limit is None:
            raise ConfigError("--shuffle goes with --limit N")
        return prepared
    if shuffle:
        keep = sorted(random.Random(prepared.config.seed).sample(range(len(prepared.items)), limit))
    else:
        keep = list(range(limit))
    positions = prepared.positions or list(range(len(prepared.items)))
    prepared.items = [prepared.items[k] for k in keep]
    prepared.positions = [positions[k] for k in keep]
    return prepared


@contextlib.contextmanager
def _progress_interval(seconds: float | None) -> Iterator[None]:
    """Seconds between progress lines for this invocation (the runner reads the variable)."""
    old = os.environ.get(PROGRESS_SECONDS_ENV)
    if seconds is not None:
        os.environ[PROGRESS_SECONDS_ENV] = str(seconds)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(PROGRESS_SECONDS_ENV, None)
        else:
            os.environ[PROGRESS_SECONDS_ENV] = old


def _timeout_hint(prepared: PreparedRun) -> str:
    """Which setting to change when the judge's calls time out."""
    assert prepared.config.judge is not None
    return timeout_advice(prepared.config.judge, prepared.config.concurrency)


def _already_complete(store: Any, run_id: str, prepared: PreparedRun) -> bool:
    run = store.get_run(run_id)
    return run["status"] == "completed" and not missing_work(store, run_id, prepared)


def _print_budget_stop(
    tally: RunTally, prepared: PreparedRun, run_id: str, store_path: str
) -> None:
    budget = prepared.config.max_cost or 0.0
    console.print(
        f"[yellow]Budget of ${budget:.4f} reached after ${tally.cost_usd:.4f}: "
        f"{tally.not_started} samples not started. Continue with:[/] "
        f"judge run --resume {run_id} --db {escape(store_path)} [--max-cost USD]  (each "
        "invocation may spend up to its budget: the stored one, or --max-cost given with --resume)"
    )


def _finish(
    store_path: str,
    run_id: str,
    prepared: PreparedRun,
    show_progress: bool,
    batch: float | None = None,
    allow_failures: str | None = "0",
    open_run_store: RunStore | None = None,
) -> None:
    """Execute the missing work, print the summary, and exit 1 when more items failed than
    ``--allow-failures`` allows (None: leave the exit code to the caller). ``open_run_store``:
    the store the run was just created in, kept open (and locked) for the judging."""
    assert prepared.config.judge is not None
    simulated = prepared.config.judge.is_mock
    if simulated:
        console.print(f"[bold yellow]{SIMULATED_NOTICE}[/]")
    agent = workflow_for(prepared.config.mode, prepared.rubric)[0]
    opened = contextlib.nullcontext(open_run_store) if open_run_store else open_store(store_path)
    with opened as store:
        if _already_complete(store, run_id, prepared):
            console.print(f"run {escape(run_id)} is already complete: nothing left to do.")
        else:
            try:
                with third_party_quiet():
                    tally = _execute(store, run_id, prepared, show_progress, batch)
                if tally.budget_exhausted:
                    _print_budget_stop(tally, prepared, run_id, store_path)
            except KeyboardInterrupt:
                console.print(
                    f"[yellow]Interrupted. Finished samples are stored; continue with:[/] "
                    f"judge run --resume {escape(run_id)} --db {escape(store_path)}"
                )
                raise typer.Exit(EXIT_INTERRUPTED) from None
            except (ModelConfigError, RunWriteError, CircuitBreakerOpen) as exc:
                # execute_run has already marked the run failed with this reason. The samples a
                # breaker stopped are not stored: its message says whether calls timed out.
                hint = ""
                if isinstance(exc, CircuitBreakerOpen) and TIMED_OUT in str(exc):
                    hint = "\n" + _timeout_hint(prepared)
                fail(f"{exc}{hint}\ncontinue with: judge run --resume {run_id} --db {store_path}")
        from clinjudge.analysis import identical_samples_note  # numpy and pyarrow: load late

        counts = run_counts(store, run_id, agent)
        timed_out = timed_out_calls(store, run_id)
        copies = identical_samples_note(store, run_id)
    cost = f"${counts.cost_usd:.4f}" + ("" if counts.cost_known else " (some prices unknown)")
    print_outcome(counts, cost)
    if timed_out:
        console.print(
            f"[yellow]{timed_out} model call(s) timed out:[/] {escape(_timeout_hint(prepared))}",
            soft_wrap=True,
        )
    if copies is not None:
        console.print(f"[yellow]warning:[/] {escape(copies)}", soft_wrap=True)
    if simulated:
        console.print(f"[bold yellow]{SIMULATED_NOTICE}[/]")
    if allow_failures is not None:
        exit_on_failures(counts, allow_failures)


def run_command(
    rubric: RubricOption = None,
    mode: ModeOption = None,
    data: Annotated[
        Path | None,
        typer.Option(
            rich_help_panel=DATA,
            show_default="required (or data: in --config)",
            help="Items to judge: JSONL, CSV or Parquet.",
        ),
    ] = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    config: ConfigOption = None,
    samples: SamplesOption = None,
    shots: Annotated[
        int | None,
        typer.Option(rich_help_panel=DATA, show_default="0", help="Few-shot examples per prompt."),
    ] = None,
    shot_pool: Annotated[
        Path | None,
        typer.Option(rich_help_panel=DATA, show_default="none", help="Examples with human scores."),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(rich_help_panel=SAMPLING, show_default="0", help="Seed for drawing examples."),
    ] = None,
    concurrency: ConcurrencyOption = None,
    db: DbOption = None,
    name: NameOption = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            rich_help_panel=MODEL,
            show_default=_JUDGE_DEFAULTS["temperature"],
            help="Sampling temperature.",
        ),
    ] = None,
    top_p: Annotated[
        float | None,
        typer.Option(
            rich_help_panel=MODEL,
            show_default=_JUDGE_DEFAULTS["top_p"],
            help="Nucleus sampling mass.",
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=MODEL,
            show_default=_JUDGE_DEFAULTS["max_tokens"],
            help="Cap on generated tokens.",
        ),
    ] = None,
    reasoning_effort: Annotated[
        ReasoningEffort | None,
        typer.Option(
            rich_help_panel=MODEL,
            show_default="the provider's",
            help="Reasoning effort for reasoning models.",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            rich_help_panel=MODEL,
            show_default=_JUDGE_DEFAULTS["timeout"],
            help="Seconds per model call.",
        ),
    ] = None,
    timeout_retries: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=MODEL,
            min=0,
            show_default=str(RetryPolicy.model_fields["timeout_retries"].default),
            help="Retries of a call that timed out (retry.timeout_retries); a slow endpoint "
            "only gets slower when asked again.",
        ),
    ] = None,
    max_repairs: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=SAMPLING,
            show_default=_RUN_DEFAULTS["max_repairs"],
            help="Re-asks after an invalid reply.",
        ),
    ] = None,
    explanations: Annotated[
        bool | None,
        typer.Option(
            "--explanations/--no-explanations",
            rich_help_panel=SAMPLING,
            show_default="no-explanations",
            help="Ask for an explanation per score.",
        ),
    ] = None,
    personas: PersonasOption = None,
    rounds: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=PANEL,
            show_default=_RUN_DEFAULTS["rounds"],
            help="magentic: discussion rounds.",
        ),
    ] = None,
    max_turns: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=PANEL,
            show_default="rounds x personas",
            help="magentic: cap on agent turns.",
        ),
    ] = None,
    max_stalls: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=PANEL,
            show_default=_RUN_DEFAULTS["max_stalls"],
            help="magentic: stalls before replan.",
        ),
    ] = None,
    blind_first_round: Annotated[
        bool | None,
        typer.Option(
            "--blind-first-round/--no-blind-first-round",
            rich_help_panel=PANEL,
            show_default="no-blind-first-round",
            help="magentic: personas grade alone before discussing.",
        ),
    ] = None,
    planning: Annotated[
        bool | None,
        typer.Option(
            "--planning/--no-planning",
            rich_help_panel=PANEL,
            show_default="planning",
            help="magentic: run the planning calls.",
        ),
    ] = None,
    panel_aggregate: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=PANEL,
            show_default=_RUN_DEFAULTS["panel_aggregate"],
            help="panel: median or mean of the members.",
        ),
    ] = None,
    role_model: Annotated[
        list[str] | None,
        typer.Option(
            rich_help_panel=MODEL,
            show_default="the judge model",
            help="Model for one agent or role, AGENT=provider/model (repeatable), "
            "e.g. orchestrator=openai/o3-mini.",
        ),
    ] = None,
    max_cost: MaxCostOption = None,
    max_consecutive_failures: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=LIMITS,
            min=0,
            show_default="10",
            help="Stop the run (resumable) after this many samples in a row fail with the same "
            "call fault (connection refused, timeouts, HTML replies...), or once all items (2 or "
            "more) failed that way before any sample succeeded; 0 never stops.",
        ),
    ] = None,
    shard: ShardOption = None,
    nli: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=DOCLENS,
            show_default="the LLM",
            help="doclens: judge entailment with this Hugging Face NLI checkpoint (path or hub "
            "id) instead of the LLM; needs the prm extra (torch, transformers).",
        ),
    ] = None,
    prm: PRMOption = None,
    prm_preset: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=PRM,
            show_default="from the model",
            help="--prm format preset: medprm, prm-clinic, math-shepherd or custom.",
        ),
    ] = None,
    prm_url: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=PRM,
            show_default="in-process",
            help="--prm via a vLLM pooling server at this URL (--prm: its tokenizer).",
        ),
    ] = None,
    prm_device: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=PRM, show_default="auto", help="--prm device: auto, cpu or cuda[:N]."
        ),
    ] = None,
    prm_section: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=PRM,
            help="--prm: part of the summary scored: all, assessment_plan or a heading name "
            "(default: the preset's; assessment_plan for prm-clinic).",
        ),
    ] = None,
    doclens: Annotated[
        list[str] | None,
        typer.Option(
            rich_help_panel=DOCLENS,
            show_default="see docs/doclens.md",
            help="doclens setting KEY=VALUE (repeatable), e.g. citation_base=1, uncited=zero, "
            "max_citations=3, min_claims=2, nli_truncate_words=500, compat=official; see "
            "docs/doclens.md.",
        ),
    ] = None,
    rpm: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=LIMITS,
            show_default="no limit",
            help="Requests per minute for the judge model.",
        ),
    ] = None,
    tpm: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=LIMITS,
            show_default="no limit",
            help="Tokens per minute for the judge model.",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            rich_help_panel=OUTPUT,
            help="Render prompts, count tokens, estimate cost; call nothing.",
        ),
    ] = False,
    resume: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=OUTPUT,
            show_default="a new run",
            help="Finish the missing work of an earlier run (id or unique prefix).",
        ),
    ] = None,
    progress: ProgressOption = True,
    batch: Annotated[
        bool,
        typer.Option(
            "--batch",
            rich_help_panel=MODEL,
            help="single mode, openai/ or azure/ models: send the work through the provider's "
            "batch API (half price, results within 24 h); --resume picks up a waiting batch.",
        ),
    ] = False,
    poll_interval: Annotated[
        float,
        typer.Option(
            rich_help_panel=MODEL,
            help="--batch: first wait between polls in seconds (doubles to 300).",
            min=0,
        ),
    ] = BATCH_POLL_SECONDS,
    allow_failures: AllowFailuresOption = "0",
    progress_every: Annotated[
        float | None,
        typer.Option(
            rich_help_panel=OUTPUT,
            min=0,
            envvar=PROGRESS_SECONDS_ENV,
            show_envvar=True,
            help="Off a terminal (nohup, CI, notebooks): seconds between progress lines.",
            show_default="30",
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=LIMITS,
            min=1,
            help="Judge only the first N items (with --shuffle: N items drawn with --seed); "
            "try a paid model on a few items first.",
            show_default="all items",
        ),
    ] = None,
    shuffle: Annotated[
        bool,
        typer.Option(
            "--shuffle",
            rich_help_panel=LIMITS,
            help="--limit draws a seeded random sample of items.",
        ),
    ] = False,
    cache: Annotated[
        bool | None,
        typer.Option(
            "--cache/--no-cache",
            rich_help_panel=MODEL,
            help="Reuse replies stored in the database for identical requests (same model, "
            "settings, messages and sample number): hits cost $0 and call nothing; calls.cached "
            "marks them.",
            show_default="off",
        ),
    ] = None,
) -> None:
    """Judge a batch of items; prints the run id on stdout.

    Exits 1 when any item ends without a valid final judgment, unless --allow-failures allows
    it; 2 on bad input or settings; 130 when interrupted.
    """
    batch_poll = poll_interval if batch else None
    parse_allow_failures(allow_failures)
    with _progress_interval(progress_every):
        try:
            if resume:
                _resume(resume, db, progress, max_cost, batch_poll, allow_failures)
                return
            run_config = run_config_from(
                {
                    "config": config,
                    "rubric": rubric,
                    "mode": mode,
                    "data": data,
                    "samples": samples,
                    "shots": shots,
                    "seed": seed,
                    "concurrency": concurrency,
                    "db": db,
                    "name": name,
                    "max_repairs": max_repairs,
                    "explanations": explanations,
                    "shot_pool": shot_pool,
                    "personas": personas,
                    "rounds": rounds,
                    "max_turns": max_turns,
                    "max_stalls": max_stalls,
                    "blind_first_round": blind_first_round,
                    "planning": planning,
                    "panel_aggregate": panel_aggregate,
                    "max_cost": max_cost,
                    "max_consecutive_failures": max_consecutive_failures,
                    "shard": shard,
                    "cache": cache,
                    "model": model,
                    "base_url": base_url,
                    "temperature": temperature,
                    "top_p": top_p,
                    "max_tokens": max_tokens,
                    "reasoning_effort": reasoning_effort,
                    "timeout": timeout,
                    "timeout_retries": timeout_retries,
                    "rpm": rpm,
                    "tpm": tpm,
                    "nli": nli,
                    "doclens": doclens or [],
                    "prm": prm,
                    "prm_preset": prm_preset,
                    "prm_url": prm_url,
                    "prm_device": prm_device,
                    "prm_section": prm_section,
                    "role_model": role_model or [],
                },
                source=str(config or "flags"),
            )
            if batch:
                check_batch_config(run_config, credentials=not dry_run)
            prepared = limit_items(prepare_run(run_config), limit, shuffle)
            if batch:
                check_batch_config(prepared.config, prepared.rubric, credentials=False)
            if dry_run:
                estimate = estimate_batch_run(prepared) if batch else estimate_run(prepared)
                _print_estimate(estimate, prepared)
                return
            # One open store from creating the run to judging it: DuckDB's lock is held
            # throughout, so no other process can slip in between.
            with open_store(run_config.db) as store:
                run_id = create_run(store, prepared)
                sys.stdout.write(run_id + "\n")
                sys.stdout.flush()
                _finish(
                    run_config.db, run_id, prepared, progress, batch_poll, allow_failures, store
                )
        except UserError as exc:
            fail(user_error_text(exc), EXIT_USAGE)


def _resume(
    run_id: str,
    db: str | None,
    progress: bool,
    max_cost: float | None,
    batch: float | None = None,
    allow_failures: str = "0",
) -> None:
    path = db or default_db()
    with open_store(path, read_only=True) as store:  # a typo'd --db must not create a file
        full_id, prepared = load_stored_run(store, run_id)
    if max_cost is not None:
        # A budget given with --resume replaces the stored one for this invocation.
        prepared.config = prepared.config.model_copy(update={"max_cost": max_cost})
    if batch is not None:
        check_batch_config(prepared.config, prepared.rubric)
    sys.stdout.write(full_id + "\n")
    sys.stdout.flush()
    _finish(path, full_id, prepared, progress, batch, allow_failures)
