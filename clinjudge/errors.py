"""One exception hierarchy for the library.

Every exception clinjudge raises on purpose derives from :class:`ClinJudgeError`. Problems the
caller can fix (bad input files, settings, store paths) derive from :class:`UserError`, which the
``judge`` CLI reports as its message alone (one line per problem) with exit code 2; anything
else that escapes is a fault (a provider outage, a bug) and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pydantic stays unimported here: `judge --version` imports this module
    from pydantic import ValidationError

__all__ = ["ClinJudgeError", "UserError", "validation_problems"]


class ClinJudgeError(Exception):
    """Base of every exception clinjudge raises on purpose."""


class UserError(ClinJudgeError, ValueError):
    """Bad input or settings: the message says what to fix.

    Also a ``ValueError``, so callers that caught ``ValueError`` before the hierarchy existed
    keep working.

    Args:
        *args: The message.
        setting: The setting to change, when one is (``data``, ``judge.model``,
            ``table=prm_steps``); the CLI names its flag.
    """

    def __init__(self, *args: object, setting: str | None = None) -> None:
        super().__init__(*args)
        self.setting = setting


def validation_problems(
    error: ValidationError,
    *,
    top: str = "(top level)",
    locate: Callable[[tuple[Any, ...]], str] | None = None,
) -> list[str]:
    """One ``field WHERE: MESSAGE`` line per problem pydantic found, for error messages.

    Args:
        error: pydantic's error.
        top: What to call the place of a problem with the whole value (an empty location).
        locate: Names a location (default: its parts joined by dots).
    """
    lines = []
    for problem in error.errors():
        loc = tuple(problem["loc"])
        where = locate(loc) if locate else ".".join(str(part) for part in loc)
        # Our validators raise ValueError; pydantic's "Value error, " prefix says nothing.
        message = str(problem["msg"]).removeprefix("Value error, ")
        lines.append(f"field {where or top}: {message}")
    return lines
