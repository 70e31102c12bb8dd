"""What `judge run` and `judge audit` print around a run the API judges: the run id once it is
stored, how a run stopped and how to continue it, the summary, and the dry run's estimate.

The library logs and returns typed results (``RunStart``, ``RunResult``, ``Estimate``); this
module turns them into the CLI's lines and exit codes.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TextIO

import typer
from rich.markup import escape
from rich.table import Table

from clinjudge import Estimate, RunResult, RunStart
from clinjudge.cli._common import EXIT_INTERRUPTED, console, fail
from clinjudge.cli._outcome import exit_on_failures, print_next_steps, print_outcome
from clinjudge.cli._quiet import third_party_quiet
from clinjudge.judges import SIMULATED_NOTICE, TIMED_OUT, ModelConfigError
from clinjudge.orchestration import (
    CircuitBreakerOpen,
    RunConfig,
    RunWriteError,
    duration_text,
    timeout_advice,
)


def print_estimate(estimate: Estimate) -> None:
    """The dry run's table on stderr, with what its numbers leave out.

    Args:
        estimate: The API's estimate.
    """
    for u in estimate.unmatched:
        console.print(
            f"[yellow]unmatched encounter {escape(str(u['encounter_id']))}:[/] missing for "
            f"{escape(', '.join(u['missing']))} (still judged; left out of those pairs)"
        )
    table = Table(title="Dry run: nothing was sent, nothing was written")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("model", estimate.model)
    table.add_row("items", str(estimate.items))
    table.add_row("model calls (first attempts)", str(estimate.prompts))
    approximate = "" if estimate.tokens_exact else ", approximate"
    table.add_row(
        f"prompt tokens (tiktoken {estimate.encoding}{approximate})",
        f"{estimate.prompt_tokens:,}",
    )
    table.add_row("largest prompt (tokens)", f"{estimate.max_prompt_tokens_one_call:,}")
    table.add_row("completion tokens (upper bound)", f"{estimate.max_completion_tokens:,}")
    cost = "unknown price" if estimate.cost_usd is None else f"${estimate.cost_usd:,.4f}"
    table.add_row("estimated cost (upper bound)", cost)
    if estimate.cached_input_tokens is not None:  # the provider's prompt cache (#22)
        cached, total = estimate.cached_input_tokens, estimate.prompt_tokens
        share = f" ({cached / total:.0%})" if total else ""
        table.add_row("cached prompt tokens (estimate)", f"{cached:,}{share}")
        if estimate.cache_write_tokens:
            writes = f"{estimate.cache_write_tokens:,}"
            table.add_row("cache-write prompt tokens (estimate)", writes)
        if estimate.cost_with_cache_usd is not None:
            with_cache = f"${estimate.cost_with_cache_usd:,.4f}"
            table.add_row("estimated cost with prompt caching", with_cache)
    if estimate.local_seconds is not None:  # a model in this process costs time (#39)
        table.add_row("local wall time (estimate)", f"~{duration_text(estimate.local_seconds)}")
    console.print(table)
    if estimate.cached_input_tokens:
        console.print(
            "[yellow]note:[/] cached prompt tokens are an estimate: each request is assumed to "
            "find the shared prefix (system prompt, rubric; the whole prompt for repeated "
            "samples) of earlier requests in the provider's cache; concurrent first requests "
            "and idle gaps longer than the cache lives lower the real share",
            soft_wrap=True,
        )
    if estimate.tokens_note:
        console.print(f"[yellow]note:[/] {escape(estimate.tokens_note)}", soft_wrap=True)
    if estimate.note:
        console.print(f"[yellow]note:[/] {escape(estimate.note)}")
    if estimate.local_note:
        console.print(f"[yellow]note:[/] {escape(estimate.local_note)}", soft_wrap=True)
    if estimate.local_warning:
        console.print(f"[yellow]warning:[/] {escape(estimate.local_warning)}", soft_wrap=True)


def _timeout_hint(config: RunConfig) -> str:
    """Which setting to change when the judge's calls time out."""
    assert config.judge is not None
    return timeout_advice(config.judge, config.concurrency)


class RunPrinter:
    """Prints around one run: pass :meth:`start` as the API's ``on_start``, call the API inside
    :meth:`judging`, then :meth:`finish` with its result.

    Args:
        ids: Where the run id goes (stdout; stderr when stdout carries JSON).
    """

    def __init__(self, ids: TextIO | None = None) -> None:
        self._ids = ids or sys.stdout
        self.started: RunStart | None = None
        self._while_judging = contextlib.ExitStack()

    def start(self, start: RunStart) -> None:
        """The run is stored: print its id (and unmatched encounters, the simulated notice),
        then keep third-party chatter off the terminal while it is judged."""
        self.started = start
        for u in start.unmatched:
            console.print(
                f"[yellow]unmatched encounter {escape(str(u['encounter_id']))}:[/] missing for "
                f"{escape(', '.join(u['missing']))} (still judged; left out of those pairs)"
            )
        self._ids.write(start.run_id + "\n")
        self._ids.flush()
        if start.simulated:
            console.print(f"[bold yellow]{SIMULATED_NOTICE}[/]")
        # The run id went out first: stdout holds it alone.
        self._while_judging.enter_context(third_party_quiet())

    @contextlib.contextmanager
    def judging(self) -> Iterator[None]:
        """Around the API call: what stops a started run becomes its message, the command to
        continue it and the exit code (130 interrupted, 1 stopped); before the run is stored,
        errors pass through (bad settings are exit 2)."""
        try:
            with self._while_judging:
                yield
        except KeyboardInterrupt:
            if self.started is None:
                raise
            console.print(
                f"[yellow]Interrupted. Finished samples are stored; continue with:[/] "
                f"judge run --resume {escape(self.started.run_id)} --db "
                f"{escape(self.started.db)}"
            )
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except (ModelConfigError, RunWriteError, CircuitBreakerOpen) as exc:
            if self.started is None:
                raise
            # The run is already marked failed with this reason. The samples a breaker
            # stopped are not stored: its message says whether calls timed out.
            hint = ""
            if isinstance(exc, CircuitBreakerOpen) and TIMED_OUT in str(exc):
                hint = "\n" + _timeout_hint(self.started.config)
            fail(
                f"{exc}{hint}\ncontinue with: judge run --resume {self.started.run_id} --db "
                f"{self.started.db}"
            )

    def finish(
        self, result: RunResult, allow_failures: str | None = "0", *, next_steps: bool = False
    ) -> None:
        """The end of a run: nothing left, a budget stop, the summary, timed-out calls,
        warnings; exit 1 when more items failed than ``--allow-failures`` allows (None: leave
        the exit code to the caller).

        Args:
            result: The API's result.
            allow_failures: The ``--allow-failures`` text.
            next_steps: Then say where the results are and what to run next (`judge run`).
        """
        started = self.started
        assert started is not None
        if result.already_complete:
            console.print(f"run {escape(result.run_id)} is already complete: nothing left to do.")
        elif result.status == "budget_exhausted":
            budget = started.config.max_cost or 0.0
            console.print(
                f"[yellow]Budget of ${budget:.4f} reached after ${result.spent_usd:.4f}: "
                f"{result.not_started} samples not started. Continue with:[/] "
                f"judge run --resume {result.run_id} --db {escape(started.db)} [--max-cost USD]"
                "  (each invocation may spend up to its budget: the stored one, or --max-cost "
                "given with --resume)"
            )
        cost = f"${result.cost_usd:.4f}" + ("" if result.cost_known else " (some prices unknown)")
        print_outcome(result, cost)
        if result.timed_out_calls:
            console.print(
                f"[yellow]{result.timed_out_calls} model call(s) timed out:[/] "
                f"{escape(_timeout_hint(started.config))}",
                soft_wrap=True,
            )
        for warning in result.warnings:
            console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
        if started.simulated:
            console.print(f"[bold yellow]{SIMULATED_NOTICE}[/]")
        if next_steps:
            print_next_steps(result.run_id, started.db)
        if allow_failures is not None:
            exit_on_failures(result, allow_failures)
