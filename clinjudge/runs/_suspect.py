"""Cheap, explainable checks of a judge's reasons: text that cannot be evidence of reading.

Each check looks at one reason (an attribute's explanation or a sample's overall rationale)
and says why it is suspect, or None. They are rules, not models: each names what it saw, so a
person can check the flag against the reason itself. None guesses at sentiment ("accurate and
detailed" beside a 1 is not flagged: reading praise needs a model we would then have to trust).
"""

from __future__ import annotations

import re
from collections import Counter

MIN_REASON_WORDS = 3
"""A reason of fewer words says nothing about the note ("ok", "Good.")."""

REPEAT_MIN_TOKENS = 8
"""Repetition is judged on reasons of at least this many tokens (shorter ones are too few to
tell a pattern from a short sentence)."""

DISTINCT_TOKEN_FLOOR = 0.3
"""A reason whose distinct tokens are under this share of its tokens is mostly repeats
(``1. 1. 1. 1.``); ordinary prose of that length sits well above 0.5."""

REPEATED_TRIGRAM_SHARE = 0.5
"""A reason in which this share of its word trigrams repeat an earlier one loops on a phrase
(prose repeats almost none)."""

ECHO_SHINGLE = 8
"""Words in a row that, found verbatim in the rubric's own text, make a reason a copy of it."""

_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORD = re.compile(r"[a-z0-9]+")
_FORMAT_TALK = re.compile(
    r"\b(json|schema|keys?|object|fields?|output format|the format|curly|brackets?)\b", re.I
)
_STATED_SCORE = re.compile(
    r"\b(?:score[sd]?|rat(?:e|ed|ing)|grade[sd]?|give|gave|assign(?:ed)?)\b"
    r"(?:\s+(?:it|this|of|is|as|at|a|an|to|the|summary|=|:))*\s*[:=]?\s*(\d)\b(?:\s*/\s*(\d))?"
    r"|\b(\d)\s*/\s*(\d)\b",
    re.I,
)
_STIGMA_WORD = re.compile(
    r"\b(?:stigma\w*|pejorative|judgmental|biased|derogatory|labell?ing)\b", re.I
)
_PRESENCE = re.compile(r"\b(?:contains?|uses?|used|includes?|has|present|found|detected)\b", re.I)
_CLAUSE = re.compile(r"[.;!?]|\bbut\b|\bhowever\b", re.I)
_CONTENT_WORDS = re.compile(r"\b(summary|note|notes|patient|diagnos\w*|medication\w*)\b", re.I)
_NEGATION = re.compile(r"\b(?:no|not|none|without|absent|free of|nothing)\b", re.I)


def words(text: str) -> list[str]:
    """The lower-case words of a text."""
    return _WORD.findall(text.lower())


def degenerate(reason: str) -> str | None:
    """Why a reason is mostly repeated tokens or one repeated phrase, or None.

    Args:
        reason: One reason as the judge wrote it.
    """
    tokens = _TOKEN.findall(reason.lower())
    if len(tokens) < REPEAT_MIN_TOKENS:
        return None
    distinct = len(set(tokens)) / len(tokens)
    if distinct < DISTINCT_TOKEN_FLOOR:
        return f"mostly repeated tokens ({len(set(tokens))} distinct of {len(tokens)})"
    said = words(reason)
    trigrams = list(zip(said, said[1:], said[2:], strict=False))
    if len(trigrams) >= REPEAT_MIN_TOKENS:
        repeats = 1 - len(set(trigrams)) / len(trigrams)
        if repeats >= REPEATED_TRIGRAM_SHARE:
            phrase, count = Counter(trigrams).most_common(1)[0]
            return f"loops on a phrase ('{' '.join(phrase)}' {count} times)"
    return None


def too_short(reason: str) -> str | None:
    """Why a reason is too short to say anything about the note, or None."""
    count = len(words(reason))
    return f"{count} word(s)" if count < MIN_REASON_WORDS else None


def template_echo(reason: str, rubric_shingles: set[tuple[str, ...]]) -> str | None:
    """Why a reason restates the rubric or the reply format instead of the note, or None.

    Args:
        reason: One reason.
        rubric_shingles: Every run of :data:`ECHO_SHINGLE` words of the rubric's own text
            (:func:`shingles`).
    """
    said = words(reason)
    if said and _FORMAT_TALK.search(reason) and not _mentions_content(reason):
        return "talks about the reply's format, not the note"
    for shingle in shingles(said):
        if shingle in rubric_shingles:
            return f"copies the rubric: '{' '.join(shingle)}'"
    return None


def _mentions_content(reason: str) -> bool:
    """Whether a reason about JSON still speaks of the summary or notes."""
    return bool(_CONTENT_WORDS.search(reason))


def shingles(said: list[str]) -> set[tuple[str, ...]]:
    """Every run of :data:`ECHO_SHINGLE` consecutive words."""
    size = ECHO_SHINGLE
    return {tuple(said[i : i + size]) for i in range(len(said) - size + 1)}


def stated_score_conflict(reason: str, value: float | None, low: int, high: int) -> str | None:
    """Why an attribute's reason states a score other than the one given, or None.

    Only a number on the attribute's scale, said as a score (``score: 4``, ``rated 4``, ``4/5``),
    counts; a reason that states two different scores is left alone (it may compare).

    Args:
        reason: The attribute's own explanation.
        value: The score given.
        low: The scale's lowest point.
        high: The scale's highest point.
    """
    if value is None:
        return None
    stated = set()
    for match in _STATED_SCORE.finditer(reason):
        number, out_of = (match.group(1), match.group(2)) if match.group(1) else match.group(3, 4)
        if out_of is not None and int(out_of) != high:
            continue
        if low <= int(number) <= high:
            stated.add(int(number))
    if len(stated) == 1 and int(value) not in stated:
        return f"the reason states {stated.pop()}, the score is {int(value)}"
    return None


def stigma_conflict(reason: str, value: float | None) -> str | None:
    """Why a stigmatizing-language key contradicts its own reason, or None: set (1) while
    every clause of the reason that speaks of stigma denies it, or clear (0) while a clause
    affirms it (a presence word and no negation).

    Args:
        reason: The key's explanation.
        value: 1 (present) or 0 (absent).
    """
    clauses = [c for c in _CLAUSE.split(reason) if _STIGMA_WORD.search(c)]
    if not clauses:
        return None
    denied = [bool(_NEGATION.search(c)) for c in clauses]
    if value == 1 and all(denied):
        return "set to present, the reason says there is none"
    affirmed = any(not d and _PRESENCE.search(c) for c, d in zip(clauses, denied, strict=True))
    if value == 0 and affirmed:
        return "set to absent, the reason says there is some"
    return None


def normal_reason(reason: str) -> str:
    """A reason folded for comparison across items (case, spacing and punctuation)."""
    return " ".join(words(reason))
