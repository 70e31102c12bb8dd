"""A small async micro-batcher: requests that arrive together share one batched call.

The in-process model (``hf/``) runs one ``generate`` per batch in a single worker thread: the
requests in flight at that moment (the run's concurrent items, a panel's members) are decoded
together, which on a GPU costs little more than one of them. A batch starts when ``window_s``
has passed since its oldest request arrived, or at once when ``max_batch`` requests wait; while
a batch runs, the next one gathers. Nothing here imports torch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT")


@dataclass
class Pending(Generic[RequestT, ResultT]):
    """A request waiting for its batch.

    Args:
        request: What was asked.
        future: Where its result goes.
        group: Requests of different groups never share a batch.
        arrived: ``time.monotonic()`` at submission.
    """

    request: RequestT
    future: asyncio.Future[ResultT]
    group: Hashable
    arrived: float = field(default_factory=time.monotonic)


class MicroBatcher(Generic[RequestT, ResultT]):
    """Collects requests into batches and runs each batch with ``run`` in ``executor``.

    Args:
        run: Runs one batch (in the executor's thread); returns, per request in order, its result
            or the exception that request failed with.
        executor: Where batches run; one worker thread runs them one at a time.
        max_batch: Most requests in one batch.
        window_s: How long a batch's first request waits for others to join it.
        group: Key of a request; only requests with equal keys share a batch.
        before_batch: Awaited before each batch is taken (e.g. until the model is loaded, so
            requests that arrive during the load share the first batch).
        on_cancel: Called with a request whose caller stopped waiting (e.g. a timeout), so a
            running batch can stop working on it.
    """

    def __init__(
        self,
        run: Callable[[list[RequestT]], list[ResultT | BaseException]],
        executor: Executor,
        *,
        max_batch: int,
        window_s: float,
        group: Callable[[RequestT], Hashable] = lambda _: None,
        before_batch: Callable[[], Awaitable[None]] | None = None,
        on_cancel: Callable[[RequestT], None] | None = None,
    ):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._run = run
        self._executor = executor
        self.max_batch = max_batch
        self.window_s = window_s
        self._group = group
        self._before_batch = before_batch
        self._on_cancel = on_cancel
        self._pending: list[Pending[RequestT, ResultT]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._arrival = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.batch_sizes: list[int] = []
        """Size of every batch run so far (for tests and benchmarks)."""

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # A new event loop (a new run, asyncio.run in a test): nothing of the old one carries.
            self._loop = loop
            self._pending = []
            self._arrival = asyncio.Event()
            self._task = None
        return loop

    async def submit(self, request: RequestT) -> ResultT:
        """Queue a request and wait for its result.

        Args:
            request: The request.

        Raises:
            BaseException: Whatever its batch raised for it.
        """
        loop = self._bind()
        entry: Pending[RequestT, ResultT] = Pending(
            request, loop.create_future(), self._group(request)
        )
        self._pending.append(entry)
        self._arrival.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain())
        try:
            return await entry.future
        except asyncio.CancelledError:
            if entry in self._pending:
                self._pending.remove(entry)
            elif self._on_cancel is not None:
                self._on_cancel(request)
            raise

    async def _drain(self) -> None:
        while self._pending:
            if not await self._prepared():
                return
            slot = await self._slot()
            await self._gather()
            batch = self._take()
            if not batch:
                continue
            self.batch_sizes.append(len(batch))
            await self._dispatch(batch, slot)

    async def _prepared(self) -> bool:
        """Run the before-batch hook; False when it raised (every waiting request gets it)."""
        if self._before_batch is None:
            return True
        try:
            await self._before_batch()
        except Exception as exc:  # noqa: BLE001 - every waiting request gets it
            self._fail(self._pending, exc)
            self._pending = []
            return False
        return True

    async def _slot(self) -> object:
        """Where the next batch will run, awaited before it is gathered (here: this process's
        one executor thread, always ready)."""
        return None

    async def _dispatch(self, batch: list[Pending[RequestT, ResultT]], slot: object) -> None:
        """Run a batch and settle its requests (here: in the executor, one batch at a time)."""
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(
                self._executor, self._run, [entry.request for entry in batch]
            )
        except Exception as exc:  # noqa: BLE001 - the whole batch failed
            self._fail(batch, exc)
            return
        self._settle(batch, results)

    @staticmethod
    def _settle(
        batch: list[Pending[RequestT, ResultT]], results: Sequence[ResultT | BaseException]
    ) -> None:
        """Answer each waiting request of a batch with its result (or its error)."""
        for entry, result in zip(batch, results, strict=True):
            if entry.future.done():
                continue
            if isinstance(result, BaseException):
                entry.future.set_exception(result)
            else:
                entry.future.set_result(result)

    async def _gather(self) -> None:
        """Wait until the oldest request's window has passed or a batch is full."""
        while self._pending and len(self._pending) < self.max_batch:
            left = self.window_s - (time.monotonic() - self._pending[0].arrived)
            if left <= 0:
                return
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), left)
            except TimeoutError:
                return

    def _take(self) -> list[Pending[RequestT, ResultT]]:
        """The next batch: the oldest request and the next ones of its group, in order."""
        self._pending = [entry for entry in self._pending if not entry.future.done()]
        if not self._pending:
            return []
        group = self._pending[0].group
        batch = [entry for entry in self._pending if entry.group == group][: self.max_batch]
        taken = {id(entry) for entry in batch}
        self._pending = [entry for entry in self._pending if id(entry) not in taken]
        return batch

    @staticmethod
    def _fail(entries: list[Pending[RequestT, ResultT]], exc: BaseException) -> None:
        for entry in entries:
            if not entry.future.done():
                entry.future.set_exception(exc)
