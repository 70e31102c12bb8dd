"""Progress of a run that people can read anywhere.

On a terminal: a bar with done/total, elapsed time and ETA, and under it ok/failed, samples per
minute, tokens, cost and the model calls in flight (two lines: whole on 80 columns).
Elsewhere (nohup, CI logs, notebooks): the same numbers as one plain line every ``interval``
seconds (the caller's ``progress_every``; when none is given, ``$CLINJUDGE_PROGRESS_SECONDS``,
else 30), on a timer, so a run whose calls take minutes still
says what it is waiting for (calls in flight and the oldest call's age), and once more at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

PROGRESS_SECONDS_ENV = "CLINJUDGE_PROGRESS_SECONDS"
DEFAULT_PROGRESS_SECONDS = 30.0
TERMINAL_TICK_SECONDS = 1.0
"""How often the bar's calls-in-flight field is refreshed on a terminal."""
MIN_TICK_SECONDS = 1.0
"""Shortest wait of the timer off a terminal (``--progress-every 0`` prints per sample, and
at most one timer line a second while nothing finishes)."""

CallsInFlight = Callable[[], tuple[int, float | None]]
"""Model calls in flight now: (how many, age in seconds of the oldest; None when none)."""


def progress_interval() -> float:
    """Seconds between progress lines off a terminal when the caller gives none:
    ``$CLINJUDGE_PROGRESS_SECONDS`` (a user's fallback, documented in the README) or 30."""
    raw = os.environ.get(PROGRESS_SECONDS_ENV, "").strip()
    try:
        return max(float(raw), 0.0) if raw else DEFAULT_PROGRESS_SECONDS
    except ValueError:
        return DEFAULT_PROGRESS_SECONDS


@dataclass
class ProgressState:
    """The numbers shown: samples done of total, outcomes, tokens and dollars so far."""

    total: int
    done: int = 0
    ok: int = 0
    failed: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    requests_per_minute: float | None = None
    """Model requests per minute so far (every attempt, members' included), when known."""
    in_flight: int = 0
    """Model calls sent and not answered yet."""
    oldest_call_s: float | None = None
    """Age in seconds of the oldest call in flight."""


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def progress_line(state: ProgressState, elapsed: float) -> str:
    """One plain line: done/total, ok/failed, rate, elapsed, ETA, tokens, cost, calls in flight.

    Args:
        state: The numbers so far.
        elapsed: Seconds since the run started.
    """
    share = f" ({100 * state.done / state.total:.0f}%)" if state.total else ""
    rate = state.done / elapsed * 60 if elapsed > 0 and state.done else None
    if state.done >= state.total:
        eta = "0s"
    elif rate:
        eta = _duration((state.total - state.done) / rate * 60)
    else:
        eta = "unknown"
    rate_text = "-" if rate is None else f"{rate:,.1f}"
    rpm = state.requests_per_minute
    requests = "" if rpm is None else f" ({rpm:,.0f} req/min)"
    return (
        f"progress: {state.done}/{state.total} samples{share}, ok {state.ok}, failed "
        f"{state.failed}, {rate_text} samples/min{requests}, elapsed {_duration(elapsed)}, "
        f"ETA {eta}, tokens {state.tokens:,}, cost ${state.cost_usd:.4f}{_flight_text(state, ', ')}"
    )


def _flight_text(state: ProgressState, lead: str = "") -> str:
    """``3 calls in flight (oldest 2m05s)``; empty when none is."""
    if not state.in_flight:
        return ""
    calls = "call" if state.in_flight == 1 else "calls"
    oldest = "" if state.oldest_call_s is None else f" (oldest {_duration(state.oldest_call_s)})"
    return f"{lead}{state.in_flight} {calls} in flight{oldest}"


class _TwoLineProgress(Progress):
    """The bar on two lines: the bar, done/total, elapsed and ETA (74 columns at most), then
    the outcomes, rates, tokens, cost and calls in flight as words that wrap. One line of
    eleven columns was cut to "…" on an 80-column terminal, bar and times first."""

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        for task in self.tasks:
            yield _stats_text(task.fields)


def _stats_text(fields: dict[str, Any]) -> Text:
    """The bar's second line: ``ok 3 failed 0 · 2.5 samples/min (9 req/min) · 1,234 tok ·
    $0.0012 · 2 calls in flight (oldest 5s)``; rich wraps it at its spaces, never cuts it.

    Args:
        fields: The bar task's fields (see :meth:`RunProgress.start`).
    """
    text = Text.assemble(
        "ok ",
        (str(fields["ok"]), "green"),
        " failed ",
        (str(fields["failed"]), "red"),
        f" · {fields['rate']} samples/min ({fields['rpm']} req/min)"
        f" · {fields['tokens']:,} tok · ${fields['cost']:.4f}",
    )
    if fields["flight"]:
        text.append(f" · {fields['flight']}")
    return text


class RunProgress:
    """Shows a run's progress on a terminal bar or as periodic plain lines.

    Started inside a running event loop, a timer prints the plain line every ``interval``
    seconds even while no sample finishes (a slow endpoint), with the calls in flight.

    Args:
        console: Where progress goes (stderr).
        total: Samples to do.
        interval: Seconds between plain lines; default :func:`progress_interval`.
        clock: Time source (tests inject one).
        calls: Model calls in flight now (count, oldest age); shown when given.
    """

    def __init__(
        self,
        console: Console,
        total: int,
        *,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        calls: CallsInFlight | None = None,
    ) -> None:
        self.console = console
        self.state = ProgressState(total)
        self.interval = progress_interval() if interval is None else interval
        self._clock = clock
        self._calls = calls
        self._started = clock()
        self._last_line = self._started
        self._printed: tuple[int, int] | None = None
        """(done, in flight) of the last plain line, so the end is not printed twice."""
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._timer: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Draw the bar (terminal) or print the first line."""
        self._started = self._last_line = self._clock()
        if self.console.is_terminal:
            self._bar = _TwoLineProgress(
                TextColumn("[bold]judging"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
                # Library chatter on stdout must not land above the bar (it goes to debug logs).
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._task = self._bar.add_task(
                "judging",
                total=self.state.total,
                ok=0,
                failed=0,
                rate="-",
                rpm="-",
                tokens=0,
                cost=0.0,
                flight="",
            )
            self._bar.start()
        else:
            self._print_line()
        with contextlib.suppress(RuntimeError):  # no running loop: lines per sample only
            self._timer = asyncio.get_running_loop().create_task(self._tick_forever())

    async def _tick_forever(self) -> None:
        """Refresh the bar's calls in flight, or print the plain line when it is due."""
        while True:
            if self._bar is not None:
                wait = TERMINAL_TICK_SECONDS
            else:
                wait = max(self._last_line + self.interval - self._clock(), MIN_TICK_SECONDS)
            await asyncio.sleep(wait)
            self.tick()

    def tick(self) -> None:
        """Show the numbers now: the bar's calls in flight, or a plain line when one is due."""
        now = self._clock()
        self._read_calls()
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, flight=_flight_text(self.state))
        elif now - self._last_line >= self.interval:
            self._print_line(now)

    def _read_calls(self) -> None:
        if self._calls is not None:
            self.state.in_flight, self.state.oldest_call_s = self._calls()

    def advance(
        self, ok: bool, tokens: int, cost_usd: float, requests_per_minute: float | None = None
    ) -> None:
        """Count one finished sample.

        Args:
            ok: Whether it ended with a valid judgment.
            tokens: Prompt and completion tokens of its calls.
            cost_usd: Its cost.
            requests_per_minute: Model requests per minute achieved so far, when known.
        """
        state = self.state
        state.requests_per_minute = requests_per_minute
        state.done += 1
        state.ok += int(ok)
        state.failed += int(not ok)
        state.tokens += tokens
        state.cost_usd += cost_usd
        now = self._clock()
        self._read_calls()
        if self._bar is not None and self._task is not None:
            elapsed = now - self._started
            rate = state.done / elapsed * 60 if elapsed > 0 else None
            self._bar.update(
                self._task,
                completed=state.done,
                ok=state.ok,
                failed=state.failed,
                rate="-" if rate is None else f"{rate:,.1f}",
                rpm="-" if requests_per_minute is None else f"{requests_per_minute:,.0f}",
                tokens=state.tokens,
                cost=state.cost_usd,
                flight=_flight_text(state),
            )
        elif now - self._last_line >= self.interval:
            self._print_line(now)

    def stop(self) -> None:
        """Stop the timer; finish the bar, or print the last line unless it was just printed."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
            return
        self._read_calls()
        if self._printed != (self.state.done, self.state.in_flight):
            self._print_line()

    def _print_line(self, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        self._last_line = now
        self._printed = (self.state.done, self.state.in_flight)
        self.console.print(
            progress_line(self.state, now - self._started), highlight=False, soft_wrap=True
        )
