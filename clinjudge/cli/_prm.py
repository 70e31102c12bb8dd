"""`judge prm score|best-of-n|eval`: step scores from a process reward model.

A thin shell over the public API (``clinjudge.score_prm``, ``best_of_n_prm``,
``evaluate_prm``), as `judge run` is over ``evaluate``: it parses the options, calls the API and
prints. Kept light: `judge prm --help` loads typer and rich only.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from clinjudge._util.ray_cluster import CONNECT_TIMEOUT_ENV
from clinjudge.cli._common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    console,
    fail,
    stdout,
)
from clinjudge.runs import DEFAULT_DB

if TYPE_CHECKING:
    from clinjudge import PRMNotice

T = TypeVar("T")

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


# The API names its parameters; these messages name the flags, as `judge prm` always has.
_COMBINATIONS = {
    "resume,ray_replicas": "--resume and --ray-replicas need --ray",
    "ray,prm_url": "--ray loads the model on the Ray workers; it does not combine with --prm-url",
    "resume,store": "--resume needs the run's store (drop --no-store)",
}
_PREFIXED = ("segment", "resume")  # messages that start with the setting's name


def _notice(notice: PRMNotice) -> None:
    """Print a PRM pass's notice on stderr."""
    if notice.level == "warning":
        console.print(f"[yellow]warning:[/] {escape(notice.text)}")
    elif notice.level == "error":
        console.print(f"[bold red]error:[/] {escape(notice.text)}")
    else:
        console.print(escape(notice.text))


def _arguments(opts: _Options) -> dict[str, Any]:
    """The API's arguments for ``opts``, every value passed on as given."""
    return {
        "model": opts.model,
        "threshold": opts.threshold,
        "preset": opts.preset,
        "format_fields": opts.overrides or [],
        "format_file": opts.format_file,
        "segment": opts.segment,
        "device": opts.device,
        "dtype": opts.dtype,
        "attn": opts.attn,
        "batch_tokens": opts.batch_tokens,
        "max_length": opts.max_length,
        "prm_url": opts.prm_url,
        "served_model": opts.served_model,
        "db": opts.db,
        "store": opts.store,
        "name": opts.name,
        "ray": opts.ray,
        "ray_replicas": opts.ray_replicas,
        "ray_batch": opts.ray_batch,
        "ray_connect_timeout": opts.ray_connect_timeout,
        "resume": opts.resume,
        "on_notice": _notice,
    }


def _call(api: Callable[..., T], opts: _Options, **extra: Any) -> T:
    """Run ``api`` (``clinjudge.score_prm``...) on ``opts``; its errors become exit codes."""
    from clinjudge import PRMModelError, PRMRunStopped, UserError

    try:
        return api(opts.input, **_arguments(opts), **extra)
    except UserError as exc:
        if exc.setting in _COMBINATIONS:
            fail(_COMBINATIONS[exc.setting], EXIT_USAGE)
        if exc.setting in _PREFIXED and str(exc).startswith(f"{exc.setting} "):
            fail(f"--{exc}", EXIT_USAGE)
        raise  # the app prints it, with the flag that fixes it
    except PRMModelError as exc:  # the model failed while scoring
        fail(str(exc), EXIT_FAILURE)
    except PRMRunStopped as exc:
        if exc.interrupted:
            resume = f"; continue with --resume {exc.run_id}" if exc.run_id else ""
            console.print(f"[yellow]Interrupted.[/] The batches stored so far stay{resume}")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        resume = f"; the batches stored so far stay: --resume {exc.run_id}" if exc.run_id else ""
        fail(f"{exc.reason}{resume}", EXIT_FAILURE)


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
    import clinjudge

    threshold = opts.threshold
    result = _call(clinjudge.score_prm, opts)
    results = result.results
    if opts.as_json:
        payload = [
            {**r.model_dump(mode="json"), "flagged": [s.index for s in r.flagged_steps]}
            for r in results
        ]
        typer.echo(json.dumps({"run_id": result.run_id, "results": payload}, indent=2))
    else:
        for one in results:
            _print_candidate(one, threshold)
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
    import clinjudge
    from clinjudge.prm_bridge import AGGREGATES

    if aggregate is not None and aggregate not in AGGREGATES:
        fail(f"--aggregate {aggregate!r}: choose from {', '.join(AGGREGATES)}", EXIT_USAGE)
    result = _call(clinjudge.best_of_n_prm, opts, aggregate=aggregate)
    how = result.aggregate
    if opts.as_json:
        items = [
            {"id": p.id, "best": p.best, "score": p.score,
             "ranking": [{"candidate": c.candidate, "score": c.score} for c in p.ranking]}
            for p in result.items
        ]  # fmt: skip
        typer.echo(json.dumps({"run_id": result.run_id, "aggregate": how, "items": items},
                              indent=2))  # fmt: skip
    else:
        table = Table(title=f"best of n by {how}", title_justify="left")
        for column in ("id", "best", how, "candidates (score)"):
            table.add_column(column)
        for pick in result.items:
            ranked = ", ".join(f"{c.candidate} ({_fmt(c.score)})" for c in pick.ranking)
            table.add_row(escape(pick.id), escape(str(pick.best)), _fmt(pick.score),
                          escape(ranked))  # fmt: skip
        stdout.print(table)
    _finish(result.results)


@_prm_command("eval")
def eval_command(opts: _Options) -> None:
    """Evaluate against step labels: PRMScore, F1s, accuracies, first-error accuracy."""
    import clinjudge

    result = _call(clinjudge.evaluate_prm, opts)
    report = result.report
    if opts.as_json:
        typer.echo(json.dumps({"run_id": result.run_id, **report.model_dump(mode="json")},
                              indent=2))  # fmt: skip
    else:
        _print_report(report)
    _finish(result.results)


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
