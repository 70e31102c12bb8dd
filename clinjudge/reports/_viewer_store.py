"""Read-only access to the run store for the viewer: one short-lived connection per page.

The viewer never keeps the database open between pages: DuckDB lets one process write a file
at a time and a reader's lock would stop a `judge run` from starting. A page that finds the
file locked by a writer gets :class:`DatabaseBusy` and asks the browser to retry.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from clinjudge.errors import ClinJudgeError
from clinjudge.runs import RunStore, StoreError

T = TypeVar("T")

_BUSY_PHRASES = ("in use by another process", "Could not set lock", "Conflicting lock")


class DatabaseBusy(ClinJudgeError, RuntimeError):
    """Another process (a running `judge run`) holds the database for writing."""


class DatabaseMissing(ClinJudgeError, RuntimeError):
    """The database file does not exist or cannot be read."""


@contextmanager
def read_store(path: Path) -> Iterator[RunStore]:
    """Open the run store read-only for one page.

    Args:
        path: The DuckDB file.

    Raises:
        DatabaseBusy: A writer holds the file; try again shortly.
        DatabaseMissing: No such database, or it cannot be opened.
    """
    try:
        store = RunStore(path, read_only=True)
    except StoreError as exc:
        text = str(exc)
        if any(phrase in text for phrase in _BUSY_PHRASES):
            raise DatabaseBusy(text) from exc
        raise DatabaseMissing(text) from exc
    try:
        yield store
    finally:
        store.close()


def file_version(path: Path) -> tuple[int, int, int, int]:
    """Modification times and sizes of the database and its WAL: a key that changes whenever
    the database is written (a writer that died leaves its changes in the WAL)."""
    stamps: list[int] = []
    for candidate in (path, path.with_name(path.name + ".wal")):
        try:
            info = os.stat(candidate)
            stamps += [info.st_mtime_ns, info.st_size]
        except OSError:
            stamps += [0, 0]
    return (stamps[0], stamps[1], stamps[2], stamps[3])


class ResultCache:
    """Small LRU cache for expensive analyses (bootstraps) keyed by the database's version.

    Args:
        size: Entries kept.
    """

    def __init__(self, size: int = 32):
        self.size = size
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The cached value for ``key``, computing and storing it when absent."""
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        value = compute()
        self._entries[key] = value
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value
