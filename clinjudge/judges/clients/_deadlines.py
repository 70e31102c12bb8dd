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
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict


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
        delay: Seconds each call may take.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float):
        self.loop = loop
        self.delay = delay
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
        in_flight = self._in_flight
        while in_flight:
            entry = next(iter(in_flight))
            if entry.when > now:
                # Later calls have later deadlines: the next one due sets the timer.
                self._timer = self.loop.call_at(entry.when, self._expire)
                return
            del in_flight[entry]
            entry.expired = True
            entry.task.cancel()

    @property
    def in_flight(self) -> int:
        """Calls started and not yet finished or expired."""
        return len(self._in_flight)
