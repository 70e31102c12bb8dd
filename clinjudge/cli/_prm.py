"""`judge prm score|best-of-n|eval`: step scores from a process reward model."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeGuard

import typer
from rich.markup import escape
from rich.table import Table

from clinjudge._util.ray_cluster import CONNECT_TIMEOUT_ENV
from clinjudge.cli._common import EXIT_FAILURE, EXIT_USAGE, console, fail, open_store, stdout
from clinjudge.runs import DEFAULT_DB, now

PRM_API_KEY_ENV = "CLINJUDGE_PRM_API_KEY"
"""Bearer token sent to a --prm-url server, when set."""

prm_app = typer.Typer(
    help="Score steps with a process reward model (PRM): score, best-of-n, eval.",
    no_args_is_help=True,
)

ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        help="PRM checkpoint directory or hub id (with --prm-url: its tokenizer).",
    ),
]
PresetOpt = Annotated[
    str, typer.Option(help="Format preset: medprm, prm-clinic, math-shepherd or custom.")
]
InputOpt = Annotated[
    Path,
    typer.Option(
        "--input", help="JSONL/CSV/Parquet: {id, candidate?, text | steps | note, question?, ...}."
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a format field: KEY=VALUE (JSON value), repeatable."),
]
FormatFileOpt = Annotated[
    Path | None, typer.Option("--format-file", help="YAML/JSON file of format fields.")
]
SegmentOpt = Annotated[
    str | None,
    typer.Option(help="Split `text` as medprm, chain, note or lines (default: the preset's)."),
]
DeviceOpt = Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")]
DtypeOpt = Annotated[str, typer.Option(help="auto (bf16 on GPU, fp32 on CPU), bfloat16, ...")]
AttnOpt = Annotated[str, typer.Option(help="auto, sdpa, flash_attention_2 or eager.")]
BatchTokensOpt = Annotated[int, typer.Option(min=1, help="Padded tokens per forward pass.")]
MaxLengthOpt = Annotated[
    int | None, typer.Option(min=1, help="Token limit (default: the format's, else the model's).")
]
ThresholdOpt = Annotated[float, typer.Option(help="Steps scoring below it are flagged.")]
UrlOpt = Annotated[
    str | None, typer.Option("--prm-url", help="vLLM pooling server instead of loading here.")
]
ServedOpt = Annotated[str | None, typer.Option(help="Model name on the --prm-url server.")]
DbOpt = Annotated[str, typer.Option(help="DuckDB file.")]
StoreOpt = Annotated[bool, typer.Option("--store/--no-store", help="Record the run in --db.")]
NameOpt = Annotated[str | None, typer.Option(help="Label for the stored run.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
RayOpt = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="local|auto|ADDRESS",
        help="Score on Ray, one model per replica: local (start Ray here), auto (join this "
        "machine's cluster) or HOST:PORT, the head's GCS address (pip install "
        "'clinjudge\\[ray]').",
    ),
]
RayConnectTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        metavar="SECONDS",
        envvar=CONNECT_TIMEOUT_ENV,
        show_envvar=True,
        show_default="30",
        help="Seconds to wait for the --ray cluster to answer before giving up with one "
        "error line naming it.",
    ),
]
RayReplicasOpt = Annotated[
    int | None,
    typer.Option(min=1, help="Ray model replicas (default: one per GPU, else one)."),
]
RayBatchOpt = Annotated[
    int,
    typer.Option(min=1, help="Candidates a Ray replica takes at a time (stored per batch)."),
]
ResumeOpt = Annotated[
    str | None,
    typer.Option(help="With --ray: finish this stored run, scoring only what it lacks."),
]


@dataclass
class _Options:
    """The options every `judge prm` command takes, declared once (name, type, default)."""

    model: ModelOpt
    input: InputOpt
    preset: PresetOpt = "medprm"
    overrides: SetOpt = None
    format_file: FormatFileOpt = None
    segment: SegmentOpt = None
    threshold: ThresholdOpt = 0.5
    device: DeviceOpt = "auto"
    dtype: DtypeOpt = "auto"
    attn: AttnOpt = "auto"
    batch_tokens: BatchTokensOpt = 16384
    max_length: MaxLengthOpt = None
    prm_url: UrlOpt = None
    served_model: ServedOpt = None
    db: DbOpt = str(DEFAULT_DB)
    store: StoreOpt = True
    name: NameOpt = None
    as_json: JsonOpt = False
    ray: RayOpt = None
    ray_replicas: RayReplicasOpt = None
    ray_batch: RayBatchOpt = 64
    ray_connect_timeout: RayConnectTimeoutOpt = None
    resume: ResumeOpt = None


_LEADING = ("model", "input")  # listed before a command's own options in --help


def _prm_command(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register ``func`` as `judge prm NAME` with the shared options of :class:`_Options`.

    ``func`` declares only its own options plus ``opts: _Options``; typer sees one flat
    signature (model and input, the command's own options, then the rest) and the shared
    values reach ``func`` packed into ``opts``.
    """

    def register(func: Callable[..., None]) -> Callable[..., None]:
        own = [
            p
            for p in inspect.signature(func, eval_str=True).parameters.values()
            if p.name != "opts"
        ]
        hints = inspect.get_annotations(_Options, eval_str=True)
        shared = {
            f.name: inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=hints[f.name],
                default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
            )
            for f in dataclasses.fields(_Options)
        }
        params = [
            *(shared[n] for n in _LEADING),
            *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own),
            *(p for n, p in shared.items() if n not in _LEADING),
        ]

        @functools.wraps(func)
        def command(**values: Any) -> None:
            opts = _Options(**{n: values.pop(n) for n in shared})
            func(opts=opts, **values)

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        prm_app.command(name)(command)
        return command

    return register


def _format(opts: _Options):
    from clinjudge.prm_bridge import (
        load_format_file,
        make_format,
        parse_overrides,
    )

    fields = load_format_file(opts.format_file) if opts.format_file else {}
    fields.update(parse_overrides(opts.overrides or []))
    return make_format(opts.preset, fields)


def _chains(opts: _Options, fmt: Any, *, need_labels: bool = False):
    from clinjudge.prm_bridge import SEGMENTERS, Segmenter, load_chains

    def known(name: str) -> TypeGuard[Segmenter]:
        return name in SEGMENTERS

    segment = opts.segment or fmt.segmenter
    if not known(segment):
        fail(f"--segment {segment!r}: choose {', '.join(SEGMENTERS)}", EXIT_USAGE)
    return load_chains(opts.input, segment, need_labels=need_labels, section=fmt.section)


def _scorer(opts: _Options, fmt: Any):
    from clinjudge.prm_bridge import PRMDependencyError, PRMModelError

    try:
        if opts.prm_url:
            from clinjudge.prm_bridge import VLLMPRM

            return VLLMPRM(
                opts.prm_url,
                fmt,
                tokenizer=opts.model,
                served_model=opts.served_model,
                api_key=os.environ.get(PRM_API_KEY_ENV),
                batch_tokens=opts.batch_tokens,
                max_length=opts.max_length,
            )
        from clinjudge.prm_bridge import TransformersPRM

        return TransformersPRM(
            opts.model,
            fmt,
            device=opts.device,
            dtype=opts.dtype,
            attn=opts.attn,
            batch_tokens=opts.batch_tokens,
            max_length=opts.max_length,
        )
    except (PRMDependencyError, PRMModelError) as exc:
        # A model that cannot be loaded is configuration, as for `judge run --prm`: exit 2.
        fail(str(exc), EXIT_USAGE)


def _score(opts: _Options, *, need_labels: bool = False, command: str = "score"):
    """(format, scorer, chains, results, started) with every warning printed to stderr; with
    --ray the scorer's place holds the Ray run (stored as it goes, finished by `_store`)."""
    from clinjudge.prm_bridge import PRMModelError

    fmt = _format(opts)
    chains = _chains(opts, fmt, need_labels=need_labels)
    if opts.ray is None and (opts.resume or opts.ray_replicas):
        fail("--resume and --ray-replicas need --ray", EXIT_USAGE)
    if opts.ray is not None:
        from clinjudge.cli._prm_ray import score_with_ray

        results, ray_run, started = score_with_ray(opts, fmt, chains, _config(opts, fmt), command)
        _report(results)
        return fmt, ray_run, chains, results, started
    scorer = _scorer(opts, fmt)
    started = now()
    try:
        results = scorer.score(chains, opts.threshold)
    except PRMModelError as exc:
        fail(str(exc), EXIT_FAILURE)
    _report(results)
    return fmt, scorer, chains, results, started


def _report(results: list[Any]) -> None:
    for result in results:
        for warning in result.warnings:
            console.print(f"[yellow]warning:[/] {escape(result.id)}/{escape(result.candidate)}: "
                          f"{escape(warning)}")  # fmt: skip
        if result.error:
            console.print(f"[bold red]error:[/] {escape(result.error)}")


def _config(opts: _Options, fmt: Any) -> dict[str, Any]:
    return {
        "format": fmt.model_dump(mode="json"),
        "device": opts.device,
        "dtype": opts.dtype,
        "batch_tokens": opts.batch_tokens,
        "prm_url": opts.prm_url,
    }


def _store(
    opts: _Options,
    fmt: Any,
    results: list[Any],
    started: Any,
    extra: dict[str, Any],
    ray_run: Any = None,
) -> str | None:
    if not opts.store:
        return None
    from clinjudge.orchestration import new_run_id
    from clinjudge.runs import end_prm_run, write_prm_run

    config = {"command": extra.pop("command"), **_config(opts, fmt), **extra}
    if opts.ray is not None:  # the steps are stored already: close the run
        config["ray"] = {**ray_run.config["ray"], "last_pass": ray_run.summary,
                         "reused": ray_run.reused}  # fmt: skip
        with open_store(opts.db) as store:
            end_prm_run(store, ray_run.run_id, failed=any(r.error for r in results),
                        config=config)  # fmt: skip
        console.print(f"stored run {ray_run.run_id} in {opts.db}")
        return str(ray_run.run_id)
    run_id = new_run_id()
    with open_store(opts.db) as store:
        write_prm_run(
            store,
            run_id,
            results,
            model=opts.served_model or opts.model,
            config=config,
            data_source=str(opts.input),
            name=opts.name,
            started=started,
        )
    console.print(f"stored run {run_id} in {opts.db}")
    return run_id


def _finish(results: list[Any]) -> None:
    failed = sum(1 for r in results if r.error)
    if failed:
        console.print(f"[bold red]{failed} of {len(results)} candidates could not be scored[/]")
        raise typer.Exit(EXIT_FAILURE)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _short(text: str, width: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


@_prm_command("score")
def score_command(opts: _Options) -> None:
    """Score every step of every candidate; flag steps below --threshold."""
    threshold = opts.threshold
    fmt, ray_run, _, results, started = _score(opts)
    run_id = _store(
        opts, fmt, results, started, {"command": "score", "threshold": threshold}, ray_run
    )
    if opts.as_json:
        payload = [
            {**r.model_dump(mode="json"), "flagged": [s.index for s in r.flagged_steps]}
            for r in results
        ]
        typer.echo(json.dumps({"run_id": run_id, "results": payload}, indent=2))
    else:
        for result in results:
            _print_candidate(result, threshold)
    _finish(results)


def _print_candidate(result: Any, threshold: float) -> None:
    title = f"{result.id} / {result.candidate}"
    if result.error:
        stdout.print(f"[bold]{escape(title)}[/]: [red]{escape(result.error)}[/]")
        return
    table = Table(title=escape(title), title_justify="left")
    for column in ("step", "kind", "score", "flag", "text"):
        table.add_column(column)
    for step in result.steps:
        flag = "[red]FLAG[/]" if step.flagged else ""
        table.add_row(str(step.index), step.kind, _fmt(step.score), flag, escape(_short(step.text)))
    stdout.print(table)
    agg = result.aggregates
    stdout.print(
        f"  flagged (< {threshold}): {len(result.flagged_steps)} of {len(result.steps)}; "
        + ", ".join(f"{k} {_fmt(v)}" for k, v in agg.items())
    )


@_prm_command("best-of-n")
def best_of_n_command(
    opts: _Options,
    aggregate: Annotated[
        str | None,
        typer.Option(
            help="min, product, last, mean, geomean, median, max, sum, threshold "
            "(default: the preset's)."
        ),  # fmt: skip
    ] = None,
) -> None:
    """Pick the best candidate per input id (ties go to the earliest in the file)."""
    from clinjudge.prm_bridge import AGGREGATES

    if aggregate is not None and aggregate not in AGGREGATES:
        fail(f"--aggregate {aggregate!r}: choose from {', '.join(AGGREGATES)}", EXIT_USAGE)
    fmt, ray_run, _, results, started = _score(opts, command="best-of-n")
    how = aggregate or fmt.aggregate
    picks = _best_of_n(results, how)
    extra = {"command": "best-of-n", "aggregate": how, "threshold": opts.threshold}
    run_id = _store(opts, fmt, results, started, extra, ray_run)
    if opts.as_json:
        typer.echo(json.dumps({"run_id": run_id, "aggregate": how, "items": picks}, indent=2))
    else:
        table = Table(title=f"best of n by {how}", title_justify="left")
        for column in ("id", "best", how, "candidates (score)"):
            table.add_column(column)
        for pick in picks:
            ranked = ", ".join(f"{c['candidate']} ({_fmt(c['score'])})" for c in pick["ranking"])
            table.add_row(escape(pick["id"]), escape(str(pick["best"])), _fmt(pick["score"]),
                          escape(ranked))  # fmt: skip
        stdout.print(table)
    _finish(results)


def _best_of_n(results: list[Any], how: str) -> list[dict[str, Any]]:
    from clinjudge.prm_bridge import best_candidate

    groups: dict[str, list[Any]] = {}
    for result in results:
        groups.setdefault(result.id, []).append(result)
    picks = []
    for item_id, members in groups.items():
        values = [(m.candidate, m.aggregates.get(how)) for m in members]
        best = best_candidate(values)
        order = sorted(
            range(len(values)),
            key=lambda i: (values[i][1] is None, -(values[i][1] or 0.0), i),
        )
        picks.append(
            {
                "id": item_id,
                "best": None if best is None else values[best][0],
                "score": None if best is None else values[best][1],
                "ranking": [{"candidate": values[i][0], "score": values[i][1]} for i in order],
            }
        )
    return picks


@_prm_command("eval")
def eval_command(opts: _Options) -> None:
    """Evaluate against step labels: PRMScore, F1s, accuracies, first-error accuracy."""
    from clinjudge.prm_bridge import evaluate

    threshold = opts.threshold
    fmt, ray_run, _, results, started = _score(opts, need_labels=True, command="eval")
    labelled = [
        [
            (s.label, s.score, s.error_type, s.kind)
            for s in r.steps
            if s.label is not None and s.score is not None
        ]
        for r in results
        if not r.error
    ]
    report = evaluate(labelled, threshold)
    run_id = _store(opts, fmt, results, started,
                    {"command": "eval", "threshold": threshold,
                     "report": report.model_dump(mode="json")}, ray_run)  # fmt: skip
    if opts.as_json:
        typer.echo(json.dumps({"run_id": run_id, **report.model_dump(mode="json")}, indent=2))
    else:
        _print_report(report)
    _finish(results)


def _print_report(report: Any) -> None:
    table = Table(title=f"PRM evaluation (threshold {report.threshold})", title_justify="left")
    for column in ("group", "steps", "errors", "PRMScore", "F1", "F1 neg", "acc", "acc errors"):
        table.add_column(column)
    groups = {"all": report.overall}
    groups.update({f"kind {k}": v for k, v in report.by_kind.items()})
    groups.update({f"type {k}": v for k, v in report.by_error_type.items()})
    for label, m in groups.items():
        table.add_row(escape(label), str(m.n_steps), str(m.n_erroneous), _fmt(m.prm_score),
                      _fmt(m.f1), _fmt(m.f1_negative), _fmt(m.accuracy),
                      _fmt(m.accuracy_erroneous))  # fmt: skip
    stdout.print(table)
    fe = report.first_error
    stdout.print(
        f"first error: {fe.n_chains} chains ({fe.n_with_error} with an error); accuracy "
        f"{_fmt(fe.accuracy)}, on chains with an error {_fmt(fe.accuracy_with_error)}, "
        f"without {_fmt(fe.accuracy_without_error)}, F1 {_fmt(fe.f1)}"
    )
