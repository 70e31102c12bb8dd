"""How a run ended: the summary lines and the exit code rule of `judge run` and `judge audit`.

Exit code rule: 1 when any item ends without a valid final judgment (all its samples failed, or
it was never finished), unless ``--allow-failures`` allows that many: ``N`` items, or ``P%`` of
the run's items (rounded down).
"""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from clinjudge.cli._common import EXIT_USAGE, console, fail

if TYPE_CHECKING:  # the API loads with the run, never for `judge runs list`
    from clinjudge import RunResult

_DETAIL_CHARS = 200


def parse_allow_failures(spec: str) -> tuple[int | None, float | None]:
    """``N`` or ``P%`` as (count, percent); exits with a usage error otherwise.

    Args:
        spec: The flag's text.
    """
    text = spec.strip()
    try:
        if text.endswith("%"):
            percent = float(text[:-1])
            if not 0 <= percent <= 100:
                raise ValueError
            return None, percent
        count = int(text)
        if count < 0:
            raise ValueError
        return count, None
    except ValueError:
        fail(f"--allow-failures {spec!r}: expected a count N >= 0 or a percentage P%", EXIT_USAGE)


def allowed_failures(spec: str, items: int) -> int:
    """How many items may fail under ``--allow-failures``.

    Args:
        spec: The flag's text.
        items: Items in the run.
    """
    count, percent = parse_allow_failures(spec)
    if count is not None:
        return count
    assert percent is not None
    return math.floor(items * percent / 100 + 1e-9)


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _DETAIL_CHARS else flat[: _DETAIL_CHARS - 1] + "…"


def print_outcome(counts: RunResult, cost: str) -> None:
    """The end-of-run summary on stderr: samples, items, calls, cost, first reason per class.

    Args:
        counts: The run's result.
        cost: Cost text of the run.
    """
    # A reply from the response cache is no model call: counted apart, so that "0 model calls"
    # tells a user the provider was not asked at all.
    cached = counts.cached_calls
    calls = f"{counts.calls - cached} model calls"
    if cached:
        calls += f", {cached} replies from the response cache"
    console.print(
        f"run {escape(counts.run_id)}: {counts.samples_ok} samples ok, "
        f"{counts.samples_failed} failed of {counts.samples_expected}; {counts.items_ok} of "
        f"{counts.items} items with a valid final judgment; {calls}; cost {cost}",
        soft_wrap=True,
    )
    for failure in counts.failures[:8]:
        console.print(
            f"  failed: {failure.count} x {escape(failure.reason)} (first: "
            f"{escape(_one_line(failure.first_error))})",
            soft_wrap=True,
        )
    print_flags(counts)


def print_flags(counts: RunResult) -> None:
    """The run's suspect-judgment flags under its summary (nothing when there are none).

    Args:
        counts: The run's result.
    """
    if counts.suspect_samples:
        why = ", ".join(f"{flag} {n}" for flag, n in counts.flag_counts.items())
        console.print(
            f"  [yellow]suspect: {counts.suspect_samples} sample(s) flagged[/] ({escape(why)}); "
            "flags are evidence, not filters (--drop-suspect leaves them out): `judge runs "
            f"show {escape(counts.run_id)}`, docs/trust.md",
            soft_wrap=True,
        )
    for flag in counts.run_flags:
        console.print(
            f"  [yellow]run flag: {escape(flag.flag)}[/] {escape(flag.attribute)}: "
            f"{escape(_one_line(flag.detail))}",
            soft_wrap=True,
        )


def print_next_steps(run_id: str, db: str) -> None:
    """Where a finished run's results are and what to run next, on stderr (stdout holds the
    run id alone). The commands run as the user can run them: ``judge``, or its path when it
    is not on PATH; ``--db`` only when the store is not the default one.

    Args:
        run_id: The run's id.
        db: The store the run is in.
    """
    from pathlib import Path

    from clinjudge.cli._common import default_db, judge_command

    judge = judge_command()
    here = Path(db).absolute()
    at = "" if here == Path(default_db()).absolute() else f" --db {shlex.quote(str(db))}"
    console.print(f"results: run {escape(run_id)} in {escape(str(here))}", soft_wrap=True)
    console.print(
        "next: the summary (runs show), every judgment in a local web viewer (view), a file "
        "(export; --table wide: one row per item):",
        highlight=False,
    )
    for command in (
        f"runs show {run_id}{at}",
        f"view{at}",
        f"export {run_id} --out scores.csv{at}",
    ):
        # One line each, as it is to be copied (soft_wrap: rich does not break it).
        console.print(f"  {escape(judge)} {escape(command)}", soft_wrap=True, highlight=False)


def exit_on_failures(counts: RunResult, spec: str) -> None:
    """Exit 1 when more items failed than ``--allow-failures`` allows.

    Args:
        counts: The run's result.
        spec: The ``--allow-failures`` text.
    """
    failing = counts.items_without_valid_final
    allowed = allowed_failures(spec, counts.items)
    if failing > allowed:
        console.print(
            f"[bold red]{failing} of {counts.items} item(s) ended without a valid final "
            f"judgment[/] (allowed: {allowed}; see --allow-failures): exit code 1",
            soft_wrap=True,
        )
        raise typer.Exit(1)
