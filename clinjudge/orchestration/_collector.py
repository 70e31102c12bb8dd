"""Fewer garbage-collector passes while samples are judged."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

RUN_GEN0_THRESHOLD = 50_000
"""The youngest generation's threshold while a run is in flight (CPython's default is 700).

A sample allocates a few hundred container objects that live for the length of a model call
(messages, request and reply dicts, rows), so with hundreds of calls in flight every pass over
the youngest generation finds tens of thousands of live objects and moves them on, and the
older generations' passes walk them again. Measured on the 100 ms benchmark (``gc.callbacks``,
the collecting thread's CPU): 0.17 s per 4,000 judgments at concurrency 32 and 0.44 s at 256
with the default, 0.01-0.04 s at this threshold. Garbage cycles (rare on the hot path: a
failed call's traceback) wait at most this many allocations longer."""

_active = 0
_restore: tuple[tuple[int, int, int], tuple[int, int, int]] | None = None
"""(thresholds found by the first run in, thresholds it set), while runs are in flight."""


@contextlib.contextmanager
def relaxed_collection() -> Iterator[None]:
    """Raise the youngest generation's threshold to :data:`RUN_GEN0_THRESHOLD` inside the block
    (never lower it, never enable a disabled collector); the thresholds found on entry come
    back when the last such block ends, unless someone else set others meanwhile.

    Runs may overlap (several in one event loop): the first one in raises the threshold and
    the last one out restores it.
    """
    global _active, _restore
    if _active == 0:
        found = gc.get_threshold()
        first, second, third = found
        if 0 < first < RUN_GEN0_THRESHOLD:
            wanted = (RUN_GEN0_THRESHOLD, second, third)
            gc.set_threshold(*wanted)
            _restore = (found, wanted)
    _active += 1
    try:
        yield
    finally:
        _active -= 1
        if _active == 0 and _restore is not None:
            found, wanted = _restore
            _restore = None
            if gc.get_threshold() == wanted:
                gc.set_threshold(*found)
