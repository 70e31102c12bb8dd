"""Call deadlines under one shared timer: what ``asyncio.timeout`` does for each call, without a
timer of its own per call.

Every call of a model runs under the same timeout, so deadlines fall in the order the calls
start: the calls in flight sit in an ordered mapping and one timer, set for the oldest deadline,
cancels whatever is overdue when it fires and sets itself for the next. Starting and finishing
a call is an insertion and a deletion. ``asyncio.timeout`` instead makes an object, a timer
handle in the loop's heap and two coroutines per call, which at hundreds of calls in flight is
several microseconds of CPU on every model call.

The cancellation follows ``asyncio.timeout``: an overdue call's task is cancelled; when it
finishes, the cancellation is taken back (``Task.uncancel``), and a ``CancelledError`` becomes a
``TimeoutError`` unless someone else also cancelled the task.

A model run in this process (``hf/``) is not a remote endpoint whose silence means trouble: a
call's time is its whole batch's, which on a CPU can be minutes while every step brings a new
token (#39). Its deadlines follow the model's progress: with ``progress`` given, a call is
overdue only when the model has also made no progress (no new token, no batch begun, no load
under way) for ``delay`` seconds, so a run fails when decoding stops, not when it is slow.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol, runtime_checkable

ProgressAge = Callable[[], float | None]
"""Seconds since the model last made progress; None when that is not known (the call's own
deadline then holds)."""


@runtime_checkable
class ReportsProgress(Protocol):
    """A client whose model runs in this process and says when it last made progress."""

    def progress_age(self) -> float | None:
        """Seconds since the model last made progress (see :data:`ProgressAge`)."""


class CallDeadline:
    """One call in flight (made by :meth:`CallDeadlines.start`)."""

    __slots__ = ("cancelling", "expired", "task", "when")

    def __init__(self, task: asyncio.Task[object], when: float):
        self.task = task
        self.when = when
        self.cancelling = task.cancelling()
        self.expired = False


class CallDeadlines:
    """The deadlines of calls made on one event loop, all with the same timeout.

    Args:
        loop: The running loop the calls are made on.
        delay: Seconds each call may take (with ``progress``: seconds the model may go without
            progress while a call waits).
        progress: The model's progress (see :data:`ProgressAge`); None bounds each call by the
            wall clock alone.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, delay: float, progress: ProgressAge | None = None
    ):
        self.loop = loop
        self.delay = delay
        self.progress = progress
        self._in_flight: OrderedDict[CallDeadline, None] = OrderedDict()
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> CallDeadline:
        """A deadline ``delay`` seconds from now for the current task's call.

        Raises:
            RuntimeError: Not called from inside a task.
        """
        task = asyncio.current_task(self.loop)
        if task is None:
            raise RuntimeError("a call deadline needs a task")
        entry = CallDeadline(task, self.loop.time() + self.delay)
        self._in_flight[entry] = None
        if self._timer is None:
            self._timer = self.loop.call_at(entry.when, self._expire)
        return entry

    def finish(self, entry: CallDeadline) -> bool:
        """End a call's deadline (on every way out of the call, exactly once); True when the
        call ran past it and its ``CancelledError`` is this deadline's, to be raised as a
        ``TimeoutError``.

        Args:
            entry: What :meth:`start` returned for the call.
        """
        if not entry.expired:
            del self._in_flight[entry]
            return False
        return entry.task.uncancel() <= entry.cancelling

    def _expire(self) -> None:
        self._timer = None
        now = self.loop.time()
        # A call is due at its own deadline or ``delay`` after the model's last progress,
        # whichever is later: still in the order the calls started, as every call shares the
        # model's progress.
        stalled_until = self._stalled_until(now)
        in_flight = self._in_flight
        while in_flight:
            entry = next(iter(in_flight))
            due = max(entry.when, stalled_until)
            if due > now:
                # Later calls have later deadlines: the next one due sets the timer.
                self._timer = self.loop.call_at(due, self._expire)
                return
            del in_flight[entry]
            entry.expired = True
            entry.task.cancel()

    def _stalled_until(self, now: float) -> float:
        """``delay`` seconds after the model's last progress (minus infinity without one)."""
        age = self.progress() if self.progress is not None else None
        return -float("inf") if age is None else now - max(age, 0.0) + self.delay

    @property
    def in_flight(self) -> int:
        """Calls started and not yet finished or expired."""
        return len(self._in_flight)
