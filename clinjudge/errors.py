"""One exception hierarchy for the library.

Every exception clinjudge raises on purpose derives from :class:`ClinJudgeError`. Problems the
caller can fix (bad input files, settings, store paths) derive from :class:`UserError`, which the
``judge`` CLI reports as a one-line message with exit code 2; anything else that escapes is a
fault (a provider outage, a bug) and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["ClinJudgeError", "UserError"]


class ClinJudgeError(Exception):
    """Base of every exception clinjudge raises on purpose."""


class UserError(ClinJudgeError, ValueError):
    """Bad input or settings: the message says what to fix.

    Also a ``ValueError``, so callers that caught ``ValueError`` before the hierarchy existed
    keep working.
    """
