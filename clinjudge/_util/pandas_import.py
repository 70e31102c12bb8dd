"""pandas is optional: two ways clinjudge meets it through pyarrow.

pyarrow looks for pandas the first time it converts Python data (a list, a numpy array, a
scalar in a compute call), in its Cython layer and again in its C++ layer, and imports all of
pandas to do so: about 0.15 s of the start-up of `judge agree`, `compare`, `report` and
`ratings import` (#39), which build their Arrow tables from DuckDB rows and Python lists only.
Inside :func:`without_pandas` the import fails at once, so pyarrow takes its no-pandas path.
pyarrow then keeps "no pandas" for the process (``Table.to_pandas()`` still works: it imports
pandas again when asked by name), so use it only around commands that never build Arrow data
from pandas objects, never in the library API.

Where pandas is not installed, ``Run.judgments().to_pandas()`` (an Arrow table of the API)
ended in pyarrow's bare "No module named 'pandas'". :func:`explain_missing_pandas` makes that
error say how to install it, as the result objects' ``to_pandas()`` does, while the tables stay
plain ``pyarrow.Table`` objects.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from types import ModuleType

PANDAS_NEEDED = "to_pandas() needs pandas: pip install pandas (or pip install 'clinjudge[pandas]')"
"""The start of every "pandas is missing" message."""


def _is_pandas(name: str) -> bool:
    return name == "pandas" or name.startswith("pandas.")


class _NoPandas:
    """A meta-path finder that makes ``import pandas`` fail at once."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if _is_pandas(name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


class _PandasMissing:
    """The last meta-path finder: asked only when no other finder found pandas (it is not
    installed), it fails the import with :data:`PANDAS_NEEDED` in the message."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if _is_pandas(name):
            message = f"No module named {name!r}. {PANDAS_NEEDED}; the Arrow table works without it"
            raise ModuleNotFoundError(message, name=name)
        return None


@contextmanager
def without_pandas() -> Iterator[None]:
    """Within the block, ``import pandas`` fails unless pandas is already imported.

    pyarrow (the only library of these commands that looks for pandas) then converts without
    it; nothing of clinjudge's commands needs pandas.
    """
    if "pandas" in sys.modules:  # already paid for: pyarrow may as well use it
        yield
        return
    blocker = _NoPandas()
    sys.meta_path.insert(0, blocker)
    try:
        yield
    finally:
        sys.meta_path.remove(blocker)


def explain_missing_pandas() -> None:
    """Make a failed ``import pandas`` (pandas not installed) say how to install it.

    Idempotent. Found pandas imports as usual: the finder is the last one asked. Being a
    ``ModuleNotFoundError`` for ``pandas``, the error is still caught wherever a library
    tries pandas and goes on without it.
    """
    if not any(isinstance(finder, _PandasMissing) for finder in sys.meta_path):
        sys.meta_path.append(_PandasMissing())
