"""What a test needs from the machine: an optional package, the `judge` script.

A missing requirement skips only the tests that use it (never a whole module at import time),
and under CI (``CI=true``) it fails them instead: CI installs everything, so a skip there would
hide a broken install.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

WITHOUT_PRM_EXTRA = """
import sys

class _BlockPrmExtra:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "tokenizers"):
            raise ImportError(f"blocked {name}")
        return None

sys.meta_path.insert(0, _BlockPrmExtra())
"""
"""Python source that makes torch, transformers and tokenizers unimportable, as on a machine
without the ``prm`` extra; run it first in a subprocess (``python -c``)."""


def in_ci() -> bool:
    """Whether the tests run under CI (``CI=true``), where nothing may be skipped."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def missing(reason: str) -> None:
    """Skip the current test, or fail it under CI.

    Args:
        reason: What is missing and how to get it.
    """
    if in_ci():
        pytest.fail(f"{reason} (CI=true: required, not skipped)", pytrace=False)
    pytest.skip(reason)


class _Missing(ModuleType):
    """Stands in for a package that is not installed; using it skips (or fails) the test."""

    def __init__(self, name: str, error: Exception):
        super().__init__(name)
        self._error = error

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        missing(f"{self.__name__} is not installed ({self._error}); pip install -e '.[dev,prm]'")


def optional_module(name: str) -> ModuleType:
    """Import ``name``, or return a stand-in whose first use skips the test that uses it.

    Args:
        name: Dotted module name, e.g. ``pingouin`` or ``statsmodels.stats.inter_rater``.
    """
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        return _Missing(name, exc)


def require_module(name: str) -> ModuleType:
    """Import ``name`` inside a test, skipping (failing under CI) when it is missing.

    Args:
        name: Dotted module name.
    """
    module = optional_module(name)
    if isinstance(module, _Missing):
        missing(f"{name} is not installed; pip install -e '.[dev,prm]'")
    return module


def require_judge_script(path: str | Path) -> str:
    """The ``judge`` console script's path, skipping (failing under CI) when it is absent.

    Args:
        path: Where the script should be (next to the test's Python).
    """
    if not Path(path).exists():
        missing(f"the judge console script is missing at {path}; pip install -e .")
    return str(path)
