"""One BLAS thread for the read commands' numpy.

numpy's OpenBLAS starts a pool of threads as it loads, one per core, that spin a while after
each call: CPU that `judge agree`, `compare`, `report` and `audit plan` paid on every start
(about 0.1 s of CPU on 2 cores, #39) for matrices too small to share out. The agreement
bootstraps already run BLAS on one thread (``analysis._stats``: more threads made them slower).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

OPENBLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"


@contextmanager
def single_blas_thread() -> Iterator[None]:
    """Within the block, numpy loads with one OpenBLAS thread, unless numpy is loaded already
    or the user chose a number (``OPENBLAS_NUM_THREADS``). The variable is read once, as
    OpenBLAS loads; it is removed again afterwards, so nothing started later inherits it."""
    if "numpy" in sys.modules or OPENBLAS_THREADS_ENV in os.environ:
        yield
        return
    os.environ[OPENBLAS_THREADS_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(OPENBLAS_THREADS_ENV, None)
