"""See through disguised fence tags: compatibility forms, invisible characters, homoglyphs.

A model reads ``＜/CLINICAL_SUMMARY＞``, ``</CLINI\u200bCAL_SUMMARY>`` or a tag spelled with
Cyrillic ``С`` much as it reads the real tag. Matching runs on a *skeleton* of the text: one
character per character (so a match position is a position in the original), each NFKC-folded
where that gives one character, homoglyphs of ASCII letters and of ``<`` and ``/`` mapped to
them, and invisible characters (format controls, combining marks) mapped to ``IGNORED``,
which patterns let through between letters. The skeleton is built with ``str.translate``
(linear, in C) and only for non-ASCII text.
"""

from __future__ import annotations

import re
import unicodedata

IGNORED = "\x00"
"""Stands for an invisible character in the skeleton; patterns skip it with ``\\x00*``."""

# Letters that render like ASCII ones (Cyrillic, Greek), and look-alikes of < and / that NFKC
# leaves alone. Fullwidth and mathematical forms are covered by NFKC itself.
_HOMOGLYPHS = {
    **dict(zip("АВЕЅІЈКМНОРСТХУ", "ABESIJKMHOPCTXY", strict=True)),
    **dict(zip("аеѕіјорсхуԁһԛԝ", "aesijopcxydhqw", strict=True)),
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX", strict=True)),
    **dict(zip("οϲνι", "ocvi", strict=True)),
    **dict.fromkeys("‹〈〈⟨˂ᐸ❮⧼", "<"),
    **dict.fromkeys("∕⁄⧸⟋", "/"),
    **dict.fromkeys("⧵∖⟍", "\\"),
}
_INVISIBLE_CATEGORIES = {"Cf", "Mn", "Me"}
_EXTRA_INVISIBLE = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u180e"}


class _Skeleton(dict[int, str]):
    """``str.translate`` table filled on demand (a code point is looked at once)."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        if char in _HOMOGLYPHS:
            mapped = _HOMOGLYPHS[char]
        elif unicodedata.category(char) in _INVISIBLE_CATEGORIES or char in _EXTRA_INVISIBLE:
            mapped = IGNORED
        else:
            folded = unicodedata.normalize("NFKC", char)
            mapped = _HOMOGLYPHS.get(folded, folded) if len(folded) == 1 else char
        self[code] = mapped
        return mapped


_TABLE = _Skeleton()


def skeleton(text: str) -> str:
    """The text with look-alikes folded, one character for each character of ``text``.

    Args:
        text: Untrusted text.
    """
    if text.isascii():
        return text.replace(IGNORED, " ") if IGNORED in text else text
    return text.translate(_TABLE)


def spelled(name: str) -> str:
    """A pattern for ``name`` that lets invisible characters sit between its letters."""
    return (re.escape(IGNORED) + "*").join(re.escape(c) for c in name)


def visible(text: str) -> str:
    """NFKC-normalised text without invisible characters, for matching words (not tags).

    Args:
        text: Untrusted text.
    """
    if text.isascii():
        return text
    return skeleton(unicodedata.normalize("NFKC", text)).replace(IGNORED, "")
