"""A module imported on first use, for modules that need a heavy library only in some paths.

``judge runs list`` and ``judge runs show`` load the store without writing or reading Arrow
tables; importing pyarrow (and numpy under it) up front cost them about a fifth of their
start-up. Type checkers see the real module (import it under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import importlib
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
