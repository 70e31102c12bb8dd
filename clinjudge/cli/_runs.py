"""`judge runs list|show` and `judge export`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.cells import cell_len
from rich.markup import escape
from rich.table import Table

from clinjudge._util.modes import deciding_agent
from clinjudge.cli._common import (
    EXIT_USAGE,
    StoreDbOption,
    console,
    fail,
    open_store,
    stdout,
)
from clinjudge.cli._doclens_view import doclens_table
from clinjudge.cli._fit import print_fitted, short_model
from clinjudge.cli._options import DocLensCompatOption
from clinjudge.cli._prompt_cache_view import with_prompt_cache
from clinjudge.cli._scores_view import score_summary, scores_table
from clinjudge.errors import UserError
from clinjudge.rubrics import Rubric
from clinjudge.runs import (
    DEFAULT_DB,
    EXPORT_TABLES,
    FLAG_MEANINGS,
    check_output_file,
    delete_run,
    export_run,
    flag_run_scores,
    flag_samples,
    gate_coercions,
    infer_format,
    is_claims_run,
    provider_batch_rows,
    quality_summary,
    rename_run,
    run_counts,
    runs_overview,
    status_label,
)

if TYPE_CHECKING:
    from clinjudge.analysis import DocLensReport

DOCLENS_SCORES = "doclens"
"""The export table of a DocLens run's pooled scores (computed, not stored)."""
TABLES = (*EXPORT_TABLES, DOCLENS_SCORES)

runs_app = typer.Typer(help="List, inspect, rename and delete stored runs.", no_args_is_help=True)


@runs_app.command("list")
def list_command(
    db: StoreDbOption = str(DEFAULT_DB),
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (one object per run).")
    ] = False,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Show at most this many runs (newest first).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Runs whose name contains this.")] = None,
    rubric: Annotated[str | None, typer.Option(help="Runs whose rubric contains this.")] = None,
    mode: Annotated[
        str | None, typer.Option(help="Runs of this mode (single, panel, ...).")
    ] = None,
    status: Annotated[
        str | None, typer.Option(help="Runs with this status (completed, failed, ...).")
    ] = None,
) -> None:
    """List runs, newest first, with their cost and failed items."""
    filters = {"name": name, "rubric": rubric, "mode": mode, "status": status}
    with open_store(db, read_only=True) as store:
        rows = runs_overview(store, filters=filters, limit=limit)
    if as_json:
        typer.echo(json.dumps(rows, default=str, indent=2))
        return
    table = Table()
    table.add_column("run_id", no_wrap=True)
    for column in ("name", "created", "status", "mode", "rubric", "model"):
        table.add_column(column)
    for column in ("items", "samples", "failed", "cost"):
        table.add_column(column, justify="right")
    for row in rows:
        # An hf/ model by its file name: a full path wraps over many lines (--json has it).
        model = short_model(row["model"]) + (" (SIMULATED)" if row["simulated"] else "")
        cost = "-" if row["cost_usd"] is None else f"${row['cost_usd']:.4f}"
        table.add_row(
            escape(str(row["run_id"])),
            escape(row["name"] or ""),
            str(row["created_at"])[:16],  # to the minute: the run id has the seconds
            escape(status_label(str(row["status"]), row["n_items"], row["valid_items"])),
            escape(str(row["mode"])),
            escape(row["rubric"] or ""),
            escape(model),
            str(row["n_items"]),
            str(row["n_samples"]),
            str(row["failed_items"]),
            cost,
        )
    unbounded = stdout.options.update_width(1_000_000)  # the table's natural width
    if stdout.measure(table, options=unbounded).maximum <= stdout.size.width:
        stdout.print(table)
    else:  # a narrow terminal: rich would cut every column but the id to "…"
        _print_run_blocks(rows)


def _print_run_blocks(rows: list[dict[str, Any]]) -> None:
    """``runs list`` on a terminal too narrow for its table: a few lines per run, every value
    labelled and whole (lines break between values, never inside one).

    Args:
        rows: What ``runs_overview`` returns.
    """
    if not rows:
        console.print("no runs")  # the wide layout shows an empty table
        return
    width = max(stdout.size.width, 20)
    for row in rows:
        status = status_label(str(row["status"]), row["n_items"], row["valid_items"])
        model = short_model(row["model"]) + (" (SIMULATED)" if row["simulated"] else "")
        cost = "-" if row["cost_usd"] is None else f"${row['cost_usd']:.4f}"
        head = [str(row["run_id"]), status, str(row["created_at"])[:16], row["name"] or ""]
        rest = [
            f"{row['rubric'] or '-'} {row['mode']}",
            model,
            f"{row['n_items']} items",
            f"{row['n_samples']} samples",
            f"{row['failed_items']} failed",
            cost,
        ]
        for number, line in enumerate(_pack(head, width) + _pack(rest, width - 2)):
            indent = "" if number == 0 else "  "
            stdout.print(indent + escape(line), highlight=False, soft_wrap=True, overflow="fold")


def _pack(fields: list[str], width: int) -> list[str]:
    """``fields`` two spaces apart, in lines of at most ``width`` characters where they fit
    (a field wider than that gets a line of its own)."""
    lines: list[str] = []
    for field in (f for f in fields if f):
        if lines and cell_len(lines[-1]) + 2 + cell_len(field) <= width:
            lines[-1] += "  " + field
        else:
            lines.append(field)
    return lines


@runs_app.command("delete")
def delete_command(
    run_ids: Annotated[list[str], typer.Argument(help="Run ids or unique parts of them.")],
    db: StoreDbOption = str(DEFAULT_DB),
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete runs: every row of each run in every table (items, samples, judgments, calls,
    messages, claims, PRM steps, the replies it cached). Physicians' ratings are kept."""
    with open_store(db) as store:
        runs = [store.get_run(run_id) for run_id in run_ids]
        for run in runs:
            label = f" ({run['name']})" if run["name"] else ""
            console.print(
                f"run {escape(run['run_id'])}{escape(label)}: {escape(str(run['status']))}, "
                f"{escape(str(run['mode']))}, "
                f"{run['n_items']} items"
            )
        if not yes and not typer.confirm(f"Delete {len(runs)} run(s) from {db}?", err=True):
            console.print("nothing deleted")
            raise typer.Exit(1)
        for run in runs:
            removed = delete_run(store, run["run_id"])
            console.print(f"deleted run {escape(run['run_id'])} ({sum(removed.values())} rows)")


@runs_app.command("flag")
def flag_command(
    run_id: Annotated[str, typer.Argument(help="Run id or a unique part of it.")],
    db: StoreDbOption = str(DEFAULT_DB),
) -> None:
    """Work out a run's suspect-judgment flags again from what it stored (a run from before
    clinjudge recorded them); a finished run gets them when it ends. Prints what was found."""
    from clinjudge.analysis import run_rubric

    with open_store(db) as store:
        run = store.get_run(run_id)
        rubric = run_rubric(run)
        flag_samples(store, run["run_id"], rubric)
        flag_run_scores(store, run["run_id"], rubric)
        quality = quality_summary(store, run["run_id"])
    if quality["suspect_samples"] or quality["run_flags"]:
        stdout.print(_flags_table(quality))
    else:
        console.print(f"run {escape(run['run_id'])}: no suspect-judgment flags")


@runs_app.command("rename")
def rename_command(
    run_id: Annotated[str, typer.Argument(help="Run id or a unique part of it.")],
    name: Annotated[str, typer.Argument(help="The new name.")],
    db: StoreDbOption = str(DEFAULT_DB),
) -> None:
    """Give a run a new name (its id stays)."""
    with open_store(db) as store:
        full_id = rename_run(store, run_id, name)
    console.print(f"run {full_id} is now named {escape(name.strip())!r}")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value)


_BY_AGENT_COLUMNS = (
    "role",
    "agent",
    "model",
    "calls",
    "tokens_in",
    "cached_input_tokens",
    "tokens_out",
    "cost_usd",
    "latency_s_sum",
)


def _by_agent_table(rows: list[dict[str, Any]]) -> Table:
    """Calls, tokens, cost and summed latency per (role, agent, model)."""
    table = Table(title="by role and agent")
    # Fewer, narrower columns so that the table fits 80 columns with nothing cut: role and
    # agent share one (the agent named only when it is not the role), cached input tokens
    # only when some were cached (--json has them all), headers short and wrapping at spaces.
    columns = [
        c
        for c in _BY_AGENT_COLUMNS[2:]
        if c != "cached_input_tokens" or any(row.get(c) for row in rows)
    ]
    table.add_column("role", overflow="fold")
    for column in columns:
        numeric = column != "model"
        header = _BY_AGENT_HEADERS.get(column, column.replace("_", " "))
        table.add_column(header, justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        cells = {column: _fmt(row.get(column)) for column in _BY_AGENT_COLUMNS}
        role, agent = cells["role"], cells["agent"]
        # An hf/ model by its file name: its full path is in the models table.
        cells["model"] = short_model(cells["model"])
        table.add_row(
            escape(role if agent in ("", role) else f"{role} {agent}"),
            *(escape(cells[column]) for column in columns),
        )
    return table


_BY_AGENT_HEADERS = {
    "cached_input_tokens": "cached in",
    "cost_usd": "cost $",
    "latency_s_sum": "latency s",
}


def _models_table(models: dict[str, Any]) -> Table:
    """Which model each role or agent used."""
    table = Table(title="models")
    table.add_column("role or agent")
    table.add_column("model", overflow="fold")  # the full name or path, folded, never cut
    for role, model in models.items():
        table.add_row(escape(str(role)), escape(str(model)))
    return table


def _final_scores(store: Any, run_id: str) -> list[dict[str, Any]] | None:
    """Per attribute on a point scale: n, mean, median and items per scale point of the final
    scores (None for a run without a rubric, e.g. a `judge prm` scoring run)."""
    from clinjudge.analysis import score_distributions

    data = store.get_run(run_id).get("rubric_json")
    if data is None:
        return None
    # Read here rather than through analysis.run_rubric, whose module loads scipy (1 s).
    rubric = Rubric.model_validate(json.loads(data) if isinstance(data, str) else data)
    return score_summary(score_distributions(store, run_id, rubric))


def _doclens(store: Any, run_id: str, compat: str | None) -> DocLensReport | None:
    """A DocLens run's scores (None for any other run). The DocLens analysis, and the model
    clients under it, load only for such a run or an explicit ``--doclens-compat``."""
    if compat is None and not is_claims_run(store.get_run(run_id)):
        return None
    from clinjudge.analysis import doclens_report

    return doclens_report(store, run_id, compat)


@runs_app.command("show")
def show_command(
    run_id: Annotated[str, typer.Argument(help="Run id or unique prefix.")],
    db: StoreDbOption = str(DEFAULT_DB),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    doclens_compat: DocLensCompatOption = None,
) -> None:
    """Items ok/failed, tokens, cost and latency percentiles of a run, then per role and agent,
    then each attribute's final scores (n, mean, median, items per scale point)."""
    from clinjudge.analysis import run_summary

    with open_store(db, read_only=True) as store:
        summary = run_summary(store, run_id).to_dict()
        doclens = _doclens(store, summary["run_id"], doclens_compat)
        agent = deciding_agent(summary["mode"])
        counts = run_counts(store, summary["run_id"], agent) if agent else None
        coerced = gate_coercions(store, summary["run_id"])
        summary = with_prompt_cache(store, summary)
        scores = _final_scores(store, summary["run_id"]) if doclens is None else None
        batches = provider_batch_rows(store, summary["run_id"])
        quality = quality_summary(store, summary["run_id"])
    summary["quality_flags"] = quality
    if batches:
        summary["provider_batches"] = batches
    if counts is not None:
        # One definition everywhere: a sample is an (item, sample) of the deciding agent.
        summary["samples_ok"] = counts.samples_ok
        summary["samples_failed"] = counts.samples_failed
        summary["top_errors"] = [
            {"error": f"{f.reason}: {f.first_error}", "class": f.reason, "n": f.count}
            for f in counts.failures
        ]
    if coerced:
        # Scores given where the rubric's gate says null (synthesized with abstraction 0).
        summary["gate_coerced"] = coerced
    if summary["simulated"]:
        # Imported only here: clinjudge.judges loads the model clients (about 1 s).
        from clinjudge._util.modes import SIMULATED_NOTICE

        summary["notice"] = SIMULATED_NOTICE
    if doclens is not None:
        summary["doclens"] = doclens.to_dict()
    if scores:
        summary["scores"] = scores
    if as_json:
        typer.echo(json.dumps(summary, default=str, indent=2))
        return
    table = Table(title=f"run {escape(str(summary['run_id']))}", show_header=False)
    for key, value in summary.items():
        if key == "gate_coerced":
            shown = ", ".join(f"{k} {n}" for k, n in value.items())
            table.add_row("gate coerced to null", escape(shown))
        elif key == "status":
            items, valid = summary["items"], summary.get("items_ok") or 0
            table.add_row(key, escape(status_label(str(value), items, valid)))
        elif key not in _OWN_TABLES:
            table.add_row(key, escape(_fmt(value)))
    stdout.print(table)
    stdout.print(_models_table(summary.get("models") or {}))
    if summary.get("by_agent"):
        print_fitted(stdout, _by_agent_table(summary["by_agent"]))
    if doclens is not None:
        stdout.print(doclens_table(doclens))
    if scores:
        stdout.print(scores_table(scores))
    if batches:
        print_fitted(stdout, _batches_table(batches))
    if quality["suspect_samples"] or quality["run_flags"]:
        stdout.print(_flags_table(quality))
    for error in summary["top_errors"]:
        first = " ".join(str(error["error"]).split())
        stdout.print(f"  failed: {error['n']} x {escape(first[:200])}", soft_wrap=True)
    flagged = summary.get("flagged_items") or []
    if flagged:
        stdout.print(f"{len(flagged)} item(s) with text addressing the judge (items.flags):")
    for entry in flagged[:20]:
        kinds = ", ".join(sorted({f"{f['name']} in {f['field']}" for f in entry["flags"]}))
        stdout.print(f"  {escape(entry['item_id'])}: {escape(kinds)}")


_OWN_TABLES = (
    "top_errors",
    "by_agent",
    "flagged_items",
    "doclens",
    "models",
    "scores",
    "provider_batches",
    "quality_flags",
)
"""Keys of ``runs show``'s summary printed as tables or lines of their own."""


def _flags_table(quality: dict[str, Any]) -> Table:
    """A run's suspect-judgment flags: samples per sample flag, then the run's own flags."""
    table = Table(
        title=f"suspect-judgment flags ({quality['suspect_samples']} sample(s); evidence, "
        "not filters: docs/trust.md)"
    )
    table.add_column("flag")
    table.add_column("samples", justify="right")
    table.add_column("what it means / what was seen")
    for flag, count in quality["by_flag"].items():
        table.add_row(escape(flag), str(count), escape(FLAG_MEANINGS.get(flag, "")))
    for flag in quality["run_flags"]:
        seen = f"{flag['attribute']}: {flag['detail']}"
        table.add_row(escape(flag["flag"]), "run", escape(seen))
    return table


def _batches_table(batches: list[dict[str, Any]]) -> Table:
    """A run's provider batches, one row each (ids and errors are the provider's: escaped)."""
    table = Table(title="provider batches")
    for column in ("batch", "provider id", "status", "requests", "completed", "failed"):
        table.add_column(column, justify="right" if column != "status" else "left")
    table.add_column("results in")
    table.add_column("created")
    table.add_column("why it failed")
    for b in batches:
        table.add_row(
            str(b["attempt"]),
            escape(str(b["batch_id"] or "-")),
            escape(str(b["status"])),
            str(b["request_count"]),
            str(b["completed"]),
            str(b["failed"]),
            "yes" if b["ingested"] else "no",
            f"{b['created_at']:%Y-%m-%d %H:%M}" if b["created_at"] else "-",
            escape("; ".join(str(e) for e in b["errors"])[:200]),
        )
    return table


def export_command(
    run_id: Annotated[str, typer.Argument(help="Run id or any unique part of it.")],
    out: Annotated[
        Path,
        typer.Option(
            help="Output file; its ending picks the format: .jsonl/.ndjson (JSON Lines), .json "
            "(one JSON array), .csv, .parquet/.pq."
        ),
    ],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="jsonl (JSON Lines), json (one JSON array), csv or parquet; needed only when "
            "the ending names no format, and it must agree with the ending.",
            show_default="from the file name",
        ),
    ] = None,
    db: StoreDbOption = str(DEFAULT_DB),
    table: Annotated[
        str,
        typer.Option(
            help="judgments (long: one row per item, sample, agent, attribute); wide (one row "
            "per item: each attribute's final score as a column, valid, samples failed, flags, "
            "calls, cost: for spreadsheets); transcripts (every message: item, sample, agent, "
            "round, text); "
            "DocLens runs also: claims (every claim and verdict) or doclens (pooled scores per "
            "section); prm_steps (PRM step scores of `judge prm` runs and runs with --prm); "
            "quality_flags (suspect-judgment flags of samples and of the run)."
        ),
    ] = "judgments",
    force: Annotated[
        bool, typer.Option("--force", help="Replace the output file if it exists.")
    ] = False,
    doclens_compat: DocLensCompatOption = None,
) -> None:
    """Export judgments (one row per item_id, sample, agent, attribute), discussions, DocLens
    claims or scores, or PRM steps; the file appears only once it is complete."""
    # First: a folder (or link, FIFO...) at --out is refused alike with or without --force,
    # and before its name is read for a format.
    check_output_file(out, make_folder=False)
    try:
        fmt = infer_format(out, fmt)
    except UserError as exc:
        fail(f"{exc} (--format)", EXIT_USAGE)
    if table not in TABLES:
        fail(f"unknown table {table!r}; choose one of {', '.join(TABLES)}", EXIT_USAGE)
    if out.exists() and not force:
        fail(f"{out} exists; pass --force to replace it", EXIT_USAGE)
    with open_store(db, read_only=True) as store:
        if table == DOCLENS_SCORES:
            # Imported here: the DocLens analysis loads the model clients (about 1 s).
            from clinjudge.analysis import export_doclens_scores

            count = export_doclens_scores(store, run_id, out, fmt, doclens_compat)
        else:
            count = export_run(store, run_id, out, fmt, table)
        simulated = bool(store.get_run(run_id)["simulated"])
    console.print(f"wrote {count} rows to {escape(str(out))} ({fmt})")
    if simulated:
        from clinjudge._util.modes import SIMULATED_NOTICE

        console.print(f"[bold yellow]{SIMULATED_NOTICE}[/] (column 'simulated' is true)")
