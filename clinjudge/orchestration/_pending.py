"""The samples a stored run still needs, with their items read from the store a chunk at a time
as the runner takes them (#27): what is held per item is its id and position.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from clinjudge.orchestration._run_items import ITEM_CHUNK
from clinjudge.orchestration._work_unit import WorkUnit
from clinjudge.rubrics import Item
from clinjudge.runs import RunStore
from clinjudge.runs.orchestration_reads import StoredItemReader, run_item_keys, stored_samples


class PendingWork:
    """A run's missing samples, sample by sample, each in position order (the order
    :func:`missing_work` lists them in).

    Args:
        store: The run store (the run and its items are stored).
        run_id: Full run id.
        samples: Samples per item.
        agent: The deciding agent, whose stored samples count as done.
        chunk: Items read from the store at a time.
    """

    def __init__(
        self, store: RunStore, run_id: str, samples: int, agent: str, chunk: int = ITEM_CHUNK
    ):
        self.store = store
        self.run_id = run_id
        self.chunk = chunk
        self.ids, self.positions = run_item_keys(store, run_id)
        self._readers: set[StoredItemReader] = set()
        done = stored_samples(store, run_id, agent)
        # (sample, index) of every missing sample: two small ints, no item.
        self._pending = [
            (sample, k)
            for sample in range(1, samples + 1)
            for k, item_id in enumerate(self.ids)
            if (item_id, sample) not in done
        ]

    def __len__(self) -> int:
        return len(self._pending)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def item_ids(self) -> set[str]:
        """The ids of the items with a missing sample."""
        return {self.ids[k] for _, k in self._pending}

    def __iter__(self) -> Iterator[WorkUnit]:
        """The missing samples; items are read ``chunk`` at a time, only the current chunk held."""
        with StoredItemReader(self.store, self.run_id) as reader:
            self._readers.add(reader)
            try:
                first, held = -1, list[Item]()
                for sample, k in self._pending:
                    if not first <= k < first + len(held):
                        last = self.positions[min(k + self.chunk, len(self.positions)) - 1]
                        first, held = k, reader.read(self.positions[k], self.chunk, last)
                    yield WorkUnit(held[k - first], sample)
            finally:
                self._readers.discard(reader)

    def close(self) -> None:
        """Close the connections of readings not finished (a run that stopped early): an open
        one would keep the database open after the store is closed."""
        while self._readers:
            self._readers.pop().close()

    def queue(self) -> asyncio.Queue[WorkUnit]:
        """A queue the runner's workers take these samples from, read as they are taken."""
        return _PendingQueue(self)


class _PendingQueue(asyncio.Queue[WorkUnit]):
    """An ``asyncio.Queue`` whose units come from :class:`PendingWork` as workers take them
    (only ``get_nowait`` and ``qsize``, what the runner's workers use)."""

    def __init__(self, work: PendingWork):
        super().__init__()
        self._units = iter(work)
        self._left = len(work)

    def get_nowait(self) -> WorkUnit:
        try:
            unit = next(self._units)
        except StopIteration:
            raise asyncio.QueueEmpty from None
        self._left -= 1
        if not self._left:
            self.close_reader()
        return unit

    def qsize(self) -> int:
        return self._left

    def empty(self) -> bool:
        return not self._left

    def close_reader(self) -> None:
        """Close the item reader's connection (the run ended or was stopped)."""
        close = getattr(self._units, "close", None)
        if close is not None:
            close()
