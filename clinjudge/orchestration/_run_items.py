"""The items of a prepared run, read when they are needed instead of held (#27).

A prepared run keeps what is small per item (ids and positions); the items themselves are read
again, a chunk at a time, from the input file (before the run is stored: run creation, dry
runs) or from the run store (a stored run). Only a chunk is held at a time, so a run's memory
does not grow with its number of items.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import overload

from clinjudge.inputs import InputError, in_file_order, iter_audit_items, iter_items
from clinjudge.rubrics import Item, Rubric
from clinjudge.runs import RunStore, StagedItemRows
from clinjudge.runs.orchestration_reads import StoredItemReader, run_item_keys

ITEM_CHUNK = 256
"""Items read (and written) at a time."""


class RunItems(Sequence[Item]):
    """A run's items in position order, read on demand; ``ids`` and ``positions`` are held.

    Iterating reads them ``ITEM_CHUNK`` at a time; indexing reads up to the item (meant for a
    look at one item, not for walking them).
    """

    ids: list[str]
    positions: list[int]

    def __len__(self) -> int:
        return len(self.ids)

    def chunks(self, size: int = ITEM_CHUNK) -> Iterator[list[Item]]:
        """The items in lists of at most ``size``, in position order."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[Item]:
        for chunk in self.chunks():
            yield from chunk

    @overload
    def __getitem__(self, index: int) -> Item: ...

    @overload
    def __getitem__(self, index: slice) -> list[Item]: ...

    def __getitem__(self, index: int | slice) -> Item | list[Item]:
        if isinstance(index, slice):
            wanted = set(range(len(self))[index])
            picked = [item for k, item in enumerate(self) if k in wanted]
            return picked if (index.step or 1) > 0 else picked[::-1]
        count = len(self)
        if not -count <= index < count:
            raise IndexError("item index out of range")
        index %= count
        for k, item in enumerate(self):
            if k == index:
                return item
        raise IndexError("item index out of range")  # pragma: no cover - the ids say it exists

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RunItems | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class FileItems(RunItems):
    """Items at some positions of an input file that was checked whole (``prepare_run``).

    Reading validates every record again and compares the ids with those of the check: a file
    changed since then raises :class:`InputError` instead of giving other items.

    Args:
        path: The input file.
        rubric: The run's rubric.
        ids: The selected items' ids, in order.
        positions: Their positions among the file's items (increasing).
        staged: The selected items' rows, built during the check (``prepare_run``): run
            creation writes them instead of reading the file again.
        stamp: The file's size and modification time when it was checked (default: now).
    """

    def __init__(
        self,
        path: str | Path,
        rubric: Rubric,
        ids: list[str],
        positions: list[int],
        *,
        staged: StagedItemRows | None = None,
        stamp: tuple[int, int] | None = None,
    ):
        self.path = Path(path)
        self.rubric = rubric
        self.ids = ids
        self.positions = positions
        self.staged = staged
        self._stamp = stamp if stamp is not None else file_stamp(self.path)

    def check_unchanged(self) -> None:
        """Raise :class:`InputError` when the file's size or time differ from the check's."""
        if file_stamp(self.path) != self._stamp:
            raise self._changed()

    def _changed(self) -> InputError:
        return _changed_file(self.path)

    def chunks(self, size: int = ITEM_CHUNK) -> Iterator[list[Item]]:
        self.check_unchanged()
        problems: list[str] = []
        stream = iter_items(self.path, self.rubric, problems)
        yield from _selected_chunks(
            stream, problems, self.ids, self.positions, size, lambda _: self._changed()
        )


_AUDIT_CHANGED = "the file changed since its items were checked; start the audit again"


class AuditFileItems(RunItems):
    """A vendor audit's items at some positions of its vendor files, checked whole
    (``prepare_audit``) and read again as :func:`iter_audit_items` gives them, a chunk at a
    time; vendor files changed since the check raise :class:`InputError`.

    Args:
        paths: The vendor files.
        rubric: The audit's rubric.
        ids: The selected items' stored ids (``vendor::encounter``), in order.
        positions: Their positions among the files' items, in file order (increasing).
        stamps: Each file's size and modification time when it was checked (default: now).
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        rubric: Rubric,
        ids: list[str],
        positions: list[int],
        *,
        stamps: Sequence[tuple[int, int] | None] | None = None,
    ):
        self.paths = [Path(p) for p in paths]
        self.rubric = rubric
        self.ids = ids
        self.positions = positions
        self._stamps = list(stamps) if stamps is not None else [file_stamp(p) for p in paths]

    def check_unchanged(self) -> None:
        """Raise :class:`InputError` when a file's size or time differ from the check's."""
        for path, stamp in zip(self.paths, self._stamps, strict=True):
            if file_stamp(path) != stamp:
                raise InputError([f"{path}: {_AUDIT_CHANGED}"])

    def chunks(self, size: int = ITEM_CHUNK) -> Iterator[list[Item]]:
        self.check_unchanged()
        problems: list[str] = []
        stream = iter_audit_items(self.paths, self.rubric, problems)
        yield from _selected_chunks(stream, problems, self.ids, self.positions, size, self._changed)

    def _changed(self, where: str | None) -> InputError:
        if where is None:  # fewer items than checked, in some file
            files = ", ".join(map(str, self.paths))
            return InputError([f"{files}: fewer items than when they were checked; start again"])
        return InputError([f"{where}: not the record checked there: {_AUDIT_CHANGED}"])


def _changed_file(path: Path) -> InputError:
    return InputError(
        [f"{path}: the file changed since its items were checked; start the run again"]
    )


def _selected_chunks(
    stream: Generator[tuple[str, Item], None, None],
    problems: list[str],
    ids: list[str],
    positions: list[int],
    size: int,
    changed: Callable[[str | None], InputError],
) -> Iterator[list[Item]]:
    """The items at ``positions`` of a checked item stream, ``size`` at a time; ``changed``'s
    error (given the location of the record that differs, None when items are missing) when
    they are not those of the check, the stream's problems as an :class:`InputError`."""
    chunk: list[Item] = []
    k = 0
    with contextlib.closing(stream):
        for position, (where, item) in enumerate(stream):
            if problems:
                raise InputError(in_file_order(problems))
            if k == len(ids):
                break
            if position != positions[k]:
                continue
            if item.id != ids[k]:
                raise changed(where)
            chunk.append(item)
            k += 1
            if len(chunk) >= size:
                yield chunk
                chunk = []
    if problems:
        raise InputError(in_file_order(problems))
    if k < len(ids):
        raise changed(None)
    if chunk:
        yield chunk


class ListItems(RunItems):
    """Items held in a list (callers that built their own items).

    Args:
        items: The items.
        positions: Their positions in the dataset (default: 0, 1, ...).
    """

    def __init__(self, items: Sequence[Item], positions: Sequence[int] | None = None):
        self.items = list(items)
        self.ids = [item.id for item in self.items]
        self.positions = list(positions) if positions is not None else list(range(len(items)))

    def chunks(self, size: int = ITEM_CHUNK) -> Iterator[list[Item]]:
        for start in range(0, len(self.items), size):
            yield self.items[start : start + size]

    def __getitem__(self, index: int | slice) -> Item | list[Item]:  # type: ignore[override]
        return self.items[index]


class StoredItems(RunItems):
    """A stored run's items, read from the run store.

    Args:
        store: The run store (open while the items are read).
        run_id: Full run id.
    """

    def __init__(self, store: RunStore, run_id: str):
        self.store = store
        self.run_id = run_id
        self.ids, self.positions = run_item_keys(store, run_id)

    def chunks(self, size: int = ITEM_CHUNK) -> Iterator[list[Item]]:
        with StoredItemReader(self.store, self.run_id) as reader:
            for start in range(0, len(self.ids), size):
                last = self.positions[min(start + size, len(self.positions)) - 1]
                yield reader.read(self.positions[start], size, last)


def run_items(items: Sequence[Item]) -> RunItems:
    """``items`` as :class:`RunItems` (a list is wrapped, not copied item by item).

    Args:
        items: A run's items.
    """
    return items if isinstance(items, RunItems) else ListItems(items)


def file_stamp(path: str | Path) -> tuple[int, int] | None:
    """A file's size and modification time (None: it cannot be read)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns
