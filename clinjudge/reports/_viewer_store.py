"""Read-only access to the run store for the viewer.

DuckDB locks a file for as long as any connection to it is open: while a reader holds it, no
other process can open it for writing. A viewer querying the database itself for every page
therefore kept `judge run` and `judge runs rename` from starting while a large run was browsed
(a page of a 50,000-item run keeps the file open for 100-200 ms, so a browser clicking through
pages held it most of the time). The live viewer reads a private copy instead
(:class:`SnapshotReader`): the database is locked only while it is copied, once after each
change, and never while a page is built. A page that needs a fresh copy while a writer holds the
file waits briefly, then gets :class:`DatabaseBusy` and asks the browser to retry.

The static export reads the database directly (:func:`read_store`): it runs once, not beside a
writer.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from clinjudge._util.offline import connect_duckdb
from clinjudge.errors import ClinJudgeError
from clinjudge.runs import RunStore, StoreError
from clinjudge.runs.report_reads import checkpoint_copy

if TYPE_CHECKING:
    import duckdb

T = TypeVar("T")
log = logging.getLogger(__name__)

_BUSY_PHRASES = ("in use by another process", "Could not set lock", "Conflicting lock")


class DatabaseBusy(ClinJudgeError, RuntimeError):
    """Another process (a running `judge run`) holds the database for writing."""


class DatabaseMissing(ClinJudgeError, RuntimeError):
    """The database file does not exist or cannot be read."""


class CopyFailed(ClinJudgeError, RuntimeError):
    """The viewer's private copy of the database cannot be written (a full disk, say)."""


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
        self._lock = threading.Lock()  # the live viewer builds pages in several threads

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The cached value for ``key``, computing and storing it when absent."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = compute()  # outside the lock: a bootstrap must not hold up other pages
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value


Version = tuple[int, int, int, int]
_SNAPSHOT_PREFIX = ".clinjudge-view-"
_SNAPSHOT_DIR = re.compile(re.escape(_SNAPSHOT_PREFIX) + r"(\d+)-")


def _wal(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def _unlink(path: Path) -> None:
    """Delete a copy and its log, if there."""
    for name in (path, _wal(path)):
        with contextlib.suppress(OSError):
            name.unlink()


def _remove_stale_folders(parent: Path) -> None:
    """Delete copies left by viewers that were killed (their process is gone)."""
    if os.name != "posix":  # os.kill(pid, 0) would end the process on Windows
        return
    with contextlib.suppress(OSError):
        for folder in parent.glob(_SNAPSHOT_PREFIX + "*"):
            match = _SNAPSHOT_DIR.match(folder.name)
            if not match or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
            try:
                os.kill(int(match.group(1)), 0)
            except ProcessLookupError:
                shutil.rmtree(folder, ignore_errors=True)
            except OSError:  # alive, but another user's: not ours to judge
                continue


@dataclass(eq=False)
class _Copy:
    """One copy of the database and the version of the file it was taken from."""

    file: Path
    version: Version
    keeper: duckdb.DuckDBPyConnection
    users: int = 0
    retired: bool = False

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self.keeper.close()
        _unlink(self.file)


class SnapshotReader:
    """Pages read a private copy of the database, copied again whenever the file changes.

    The copy is taken while a read-only connection holds the database (so no writer can change
    it half-way through) and lives in an owner-only folder next to the database (or, where that
    folder is not writable, in the system's temporary folder); :meth:`close` deletes it, and a
    later viewer deletes copies left by one that was killed. One connection to the copy stays
    open, so pages share DuckDB's cache and open the copy in microseconds. If no copy can be
    written (a full disk), pages read the database directly, as the export does.

    Args:
        path: The DuckDB file.
        busy_wait_s: How long a page waits for a writer to let go of a changed file before
            :class:`DatabaseBusy`.
        folder: Where to keep the copies (default: next to the database).
    """

    def __init__(self, path: Path, *, busy_wait_s: float = 1.5, folder: Path | None = None):
        self.path = Path(path)
        self.busy_wait_s = busy_wait_s
        self._parent = folder
        self._folder: Path | None = None
        self._current: _Copy | None = None
        self._count = itertools.count(1)
        self._lock = threading.Lock()  # guards _current and the users counts
        self._refreshing = threading.Lock()  # one copy at a time
        self._busy: float | None = None  # when a copy last gave up waiting for a writer
        self._direct = False
        self._closed = False
        self._cleanup: weakref.finalize | None = None

    @contextmanager
    def reading(self) -> Iterator[tuple[RunStore, Version]]:
        """The store to build one page from, and the database version it holds.

        Raises:
            DatabaseBusy: The file changed and a writer still holds it.
            DatabaseMissing: No such database, or it cannot be opened.
        """
        copy = None if self._direct else self._acquire()
        if copy is None:
            with read_store(self.path) as store:
                yield store, file_version(self.path)
            return
        try:
            # The keeper holds the copy open, so this connection shares its DuckDB instance.
            with read_store(copy.file) as store:
                yield store, copy.version
        finally:
            self._release(copy)

    def close(self) -> None:
        """Delete the copies (pages still being built finish first on their own copy)."""
        with self._lock:
            self._closed = True
            current, self._current = self._current, None
            if current is not None:
                current.retired = True
                if current.users == 0:
                    current.discard()
        if self._cleanup is not None:
            self._cleanup()

    def _acquire(self) -> _Copy | None:
        """The current copy, copied again if the file changed (None: no copy can be made)."""
        with self._lock:
            copy = self._current
            if copy is not None and copy.version == file_version(self.path):
                copy.users += 1
                return copy
        with self._refreshing:
            with self._lock:  # another page may have copied the file meanwhile
                copy = self._current
                if copy is not None and copy.version == file_version(self.path):
                    copy.users += 1
                    return copy
            try:
                fresh = self._refresh()
            except CopyFailed as exc:
                log.warning("judge view: %s; reading the database directly instead", exc)
                self._direct = True
                return None
            with self._lock:
                if self._closed:
                    fresh.discard()
                    raise DatabaseMissing("the viewer is stopping")
                old, self._current = self._current, fresh
                if old is not None:
                    old.retired = True
                    if old.users == 0:
                        old.discard()
                fresh.users += 1
                return fresh

    def _release(self, copy: _Copy) -> None:
        with self._lock:
            copy.users -= 1
            if copy.retired and copy.users == 0:
                copy.discard()

    def _refresh(self) -> _Copy:
        """A new copy, waiting up to ``busy_wait_s`` for a writer to let go of the file."""
        now = time.monotonic()
        # Pages queued behind a copy that just waited in vain try once, not wait again.
        recently = self._busy is not None and now - self._busy < self.busy_wait_s
        deadline = now + (0.0 if recently else self.busy_wait_s)
        while True:
            try:
                copy = self._copy()
            except DatabaseBusy:
                if time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                self._busy = time.monotonic()
                raise
            self._busy = None
            return copy

    def _copy(self) -> _Copy:
        """Copy the database under a read lock.

        Raises:
            DatabaseBusy: A writer holds the file (or wrote it while it was being copied).
            DatabaseMissing: No such database, or it cannot be opened.
            CopyFailed: The copy cannot be written or opened.
        """
        import duckdb

        with read_store(self.path):  # a read lock: no writer changes the files meanwhile
            folder = self._snapshot_folder()
            target = folder / f"copy-{next(self._count)}.duckdb"
            version = file_version(self.path)
            try:
                has_wal = _wal(self.path).exists()
                if has_wal:  # a writer that died left its last changes in the log
                    shutil.copyfile(_wal(self.path), _wal(target))
                # The database last: closing a descriptor of a file drops every POSIX lock this
                # process holds on it, DuckDB's read lock included, so nothing may follow.
                shutil.copyfile(self.path, target)
            except OSError as exc:  # a full disk, say
                _unlink(target)
                raise CopyFailed(f"cannot copy {self.path} to {folder}: {exc}") from exc
        if file_version(self.path) != version:  # never expected: the lock keeps writers out
            _unlink(target)
            raise DatabaseBusy(f"{self.path}: written while being copied")
        try:
            os.chmod(target, 0o600)
            if has_wal:  # fold the log into the copy once, not on every page
                checkpoint_copy(target)
            keeper = connect_duckdb(str(target), read_only=True)
        except (OSError, duckdb.Error) as exc:
            _unlink(target)
            raise CopyFailed(f"cannot open the copy of {self.path}: {exc}") from exc
        return _Copy(target, version, keeper)

    def _snapshot_folder(self) -> Path:
        if self._folder is not None:
            return self._folder
        prefix = f"{_SNAPSHOT_PREFIX}{os.getpid()}-"
        parents = [self._parent] if self._parent else [self.path.absolute().parent, None]
        for parent in parents:
            try:
                _remove_stale_folders(parent or Path(tempfile.gettempdir()))
                # mkdtemp makes the folder owner-only (0700): the copy holds clinical text.
                self._folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
                break
            except OSError:  # a folder the viewer may read but not write
                continue
        if self._folder is None:
            raise CopyFailed(f"no folder to keep a copy of {self.path} in")
        # At interpreter exit too, for a viewer that was never closed (tests, Ctrl-C).
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._folder, ignore_errors=True)
        return self._folder
