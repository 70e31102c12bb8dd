"""A module imported on first use, for modules that need a heavy library only in some paths.

``judge runs list`` and ``judge runs show`` load the store without writing or reading Arrow
tables; importing pyarrow (and numpy under it) up front cost them about a fifth of their
start-up. Type checkers see the real module (import it under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


class LazyModule:
    """Stands for a module and imports it when an attribute is first read.

    Args:
        name: The module's import name (``pyarrow``).
    """

    def __init__(self, name: str) -> None:
        self._lazy_name = name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(importlib.import_module(self._lazy_name), attr)
        # Kept on the instance: later reads find it without calling __getattr__ again.
        setattr(self, attr, value)
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self._lazy_name!r}>"


def lazy_exports(
    package: str, table: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562) for names whose private modules load on first read.

    Args:
        package: The package's import name (``clinjudge.prm_bridge``).
        table: Each lazily exported name to its module within the package (``_vllm``).
        namespace: The package's ``globals()``: a loaded name is kept there, so later reads
            do not come back here.
    """

    def load(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return load
