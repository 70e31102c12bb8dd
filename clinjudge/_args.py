"""Checks of the public API's arguments, shared by ``_api`` and the lighter entry points
(``_ratings_api``) that must not import it: ``_api`` loads the workflows, the model clients
and the statistics (about 1 s), which `judge ratings import` does not need (#39)."""

from __future__ import annotations

import os
from pathlib import Path

from clinjudge.errors import UserError


def _wrong(name: str, expected: str, value: object) -> UserError:
    return UserError(f"{name}: expected {expected}, got {value!r}", setting=name)


def _text(name: str, value: object) -> str:
    """A non-empty string (a run id, a rubric name)."""
    if not isinstance(value, str) or not value.strip():
        raise _wrong(name, "a non-empty string", value)
    return value


def _optional_text(name: str, value: object) -> str | None:
    return None if value is None else _text(name, value)


def _path(name: str, value: object) -> str:
    """A file path given as a string or a path object."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise _wrong(name, "a path (str or pathlib.Path)", value)
    return value


def _optional_path(name: str, value: object) -> str | None:
    return None if value is None else _path(name, value)


def _whole(name: str, value: object, minimum: int) -> int:
    """An int (not a bool, not a float) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _wrong(name, f"a whole number >= {minimum}", value)
    return value


def _flag(name: str, value: object, *, optional: bool = False) -> bool | None:
    """True or False (or None when ``optional``); a string such as "yes" is refused."""
    if (value is None and optional) or isinstance(value, bool):
        return value
    raise _wrong(name, "True, False or None" if optional else "True or False", value)


def _db(db: str | Path | None) -> str:
    """The database: ``db``, else ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb.

    Args:
        db: What the caller gave (a path or None).
    """
    from clinjudge.runs import default_db

    return _optional_path("db", db) or default_db()
