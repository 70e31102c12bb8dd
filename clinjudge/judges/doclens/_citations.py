"""Citations for DocLens: numbered source units, and output statements with their citations.

Source notes become numbered units (dialogue turns, note sentences or whole notes) that an
output cites with runs such as ``[3][4]`` (also ``[3, 4]`` and ``[3-5]``). Output text is split
into statements at sentence ends and line breaks; a citation run belongs to the sentence it
closes whether it sits before the full stop (``exam [4].``) or after it (``lobes. [0]``).
"""

from __future__ import annotations

import re
from collections.abc import Container, Sequence
from dataclasses import dataclass, field

from clinjudge.judges.doclens._settings import DocLensSettings, SourceUnits, UncitedPolicy
from clinjudge.rubrics import SourceNote

# One bracket: [3], [3, 4], [3;4], [3-5]; a run is several brackets with optional spaces.
_BRACKET = r"\[\s*\d+(?:\s*(?:[,;]|[-\u2013])\s*\d+)*\s*\]"
_BRACKET_RE = re.compile(_BRACKET)
_RUN_RE = re.compile(rf"(?:\s*{_BRACKET})+")
_MARKER_START = re.compile(r"^\s*\[(\d+)\]")
_MARKER_SPLIT = re.compile(r"\[(\d+)\]")
_MAX_RANGE = 50  # a range wider than this is a typo, not a citation run
_ABBREVIATIONS = {
    "dr", "mr", "mrs", "ms", "vs", "e.g", "i.e", "eg", "ie", "st", "approx", "fig",
    "pt", "hx", "wt", "ht", "dept", "jr", "sr", "inc",
}  # fmt: skip
_SENTENCE_END = re.compile(
    rf"(?P<end>[.!?]+[\"')\]]*)(?P<cite>(?:\s*{_BRACKET})*)(?=\s+|$)"
    rf"|(?P<run>(?:\s*{_BRACKET})+)(?=\s+[A-Z])"
)
_HEADER = re.compile(r"^[^a-z]*:?$|^[A-Za-z][A-Za-z &/-]{0,40}:$")


@dataclass(frozen=True)
class Statement:
    """One output sentence with its citations.

    Args:
        text: The sentence without citation markers.
        raw: The sentence as written.
        written: Citation numbers as written, deduplicated, in order.
        citations: Citations used for scoring (after the uncited policy and the cap).
        borrowed: True when the citations came from the next cited statement.
        every: Citation numbers as written, in order, repeats kept.
        official: The citations the official DocLens evaluator lists before its cap: the
            statement's own deduplicated in its order (``list(set(...))`` of the numbers as
            written), or else the next cited statement's as written (repeats kept). It checks
            this whole list for unknown units; see :func:`official_counted`.
    """

    text: str
    raw: str
    written: tuple[int, ...]
    citations: tuple[int, ...] = ()
    borrowed: bool = False
    every: tuple[int, ...] = ()
    official: tuple[int, ...] = ()


@dataclass
class NumberedSource:
    """Numbered source units: citation number to text."""

    units: dict[int, str] = field(default_factory=dict)

    def render(self) -> str:
        """Units as ``[n] text`` lines."""
        return "\n".join(f"[{n}] {text}" for n, text in self.units.items())


def _bracket_numbers(bracket: str) -> list[int]:
    numbers: list[int] = []
    for part in re.split(r"\s*[,;]\s*", bracket.strip()[1:-1].strip()):
        bounds = re.split(r"\s*[-\u2013]\s*", part)
        if len(bounds) == 2:
            low, high = int(bounds[0]), int(bounds[1])
            if low <= high and high - low <= _MAX_RANGE:
                numbers.extend(range(low, high + 1))
            else:
                numbers.extend((low, high))
        else:
            numbers.append(int(bounds[0]))
    return numbers


def all_citation_numbers(text: str) -> list[int]:
    """Every cited number in a text in the order written, repeats kept.

    Args:
        text: Text with citation runs.
    """
    return [n for bracket in _BRACKET_RE.findall(text) for n in _bracket_numbers(bracket)]


def citation_numbers(text: str) -> list[int]:
    """Every cited number in a text, deduplicated, in the order written.

    Args:
        text: Text with citation runs such as ``[3][4]``, ``[3, 4]`` or ``[3-5]``.
    """
    seen: dict[int, None] = {}
    for bracket in _BRACKET_RE.findall(text):
        for number in _bracket_numbers(bracket):
            seen.setdefault(number, None)
    return list(seen)


def remove_citations(text: str) -> str:
    """The text without citation brackets (other brackets stay), tidied around punctuation.

    Args:
        text: Text with citation runs.
    """
    cleaned = _RUN_RE.sub("", text)
    cleaned = re.sub(r"\s+([.,;:!?])", r"\1", cleaned)
    return re.sub(r"[ \t]{2,}", " ", cleaned).strip()


def _is_boundary(line: str, start: int, match: re.Match[str]) -> bool:
    if match.group("run") is not None:
        return True
    before = line[start : match.start()]
    word = re.search(r"([A-Za-z.]+|\d+)$", before)
    if word is None:
        return True
    token = word.group(1).lower().rstrip(".")
    if token.isdigit() and not before[: word.start()].strip():
        return False  # "1. " opening a numbered list item
    if match.group("end").startswith(".") and (token in _ABBREVIATIONS or len(token) == 1):
        return token.isdigit()
    return True


def _split_line(line: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(line):
        if not _is_boundary(line, start, match):
            continue
        piece = line[start : match.end()].strip()
        if piece:
            pieces.append(piece)
        start = match.end()
    rest = line[start:].strip()
    if rest:
        if pieces and not remove_citations(rest):
            pieces[-1] = f"{pieces[-1]} {rest}"  # a stray citation run closing the line
        else:
            pieces.append(rest)
    return pieces


def _is_header(line: str) -> bool:
    stripped = line.strip()
    return (
        bool(stripped)
        and not citation_numbers(stripped)
        and not re.search(r"[.!?]$", stripped)
        and bool(_HEADER.match(stripped))
    )


def split_statements(text: str) -> list[Statement]:
    """Split an output into statements with the citations written on each.

    Lines are split at sentence ends; section headings (a line in capitals or ending with a
    colon, with no citation) are not statements.

    Args:
        text: The generated note.
    """
    statements: list[Statement] = []
    for line in text.splitlines():
        if not line.strip() or _is_header(line):
            continue
        for piece in _split_line(line):
            clean = remove_citations(piece)
            if not clean or not re.search(r"[A-Za-z0-9]", clean):
                continue
            statements.append(
                Statement(
                    clean,
                    piece,
                    tuple(citation_numbers(piece)),
                    every=tuple(all_citation_numbers(piece)),
                )
            )
    return statements


def official_order(statement: Statement, following: Statement | None) -> tuple[int, ...]:
    """The official evaluator's citation list for a statement, before its cap.

    Args:
        statement: The statement.
        following: The next statement with citations, if any (borrowed when it has none).
    """
    if statement.written:
        # The official code deduplicates with list(set(ref)); with the numbers inserted in the
        # order written, CPython's set gives the same order here as there.
        return tuple(set(statement.every))
    return following.every if following else ()


def official_counted(
    official: Sequence[int], known: Container[int], max_citations: int
) -> tuple[list[int], bool]:
    """The citations the official evaluator stores and counts, and whether any is unknown.

    It checks the whole list for units out of range: then the statement scores 0 and the whole
    list is counted; otherwise only the first ``max_citations`` are judged and counted.

    Args:
        official: :attr:`Statement.official`.
        known: Numbers of the source units.
        max_citations: The cap.
    """
    if any(c not in known for c in official):
        return list(official), True
    return list(official[:max_citations]), False


def assign_citations(
    statements: Sequence[Statement],
    uncited: UncitedPolicy,
    max_citations: int,
    *,
    official: bool = False,
) -> list[Statement]:
    """Apply the uncited policy and the per-statement cap.

    Args:
        statements: Statements as split.
        uncited: ``borrow_next`` (DocLens) or ``zero`` (ALCE).
        max_citations: Citations kept per statement, in the order written.
        official: Keep the official evaluator's choice of citations under the cap (its order
            after deduplication) instead of the first ones written.
    """
    assigned: list[Statement] = []
    for position, statement in enumerate(statements):
        following = next((s for s in statements[position + 1 :] if s.written), None)
        listed = official_order(statement, following)
        cited, borrowed = statement.written, False
        if not cited and uncited == "borrow_next" and following is not None:
            cited, borrowed = following.written, True
        if official and cited:
            cited = tuple(dict.fromkeys(listed[:max_citations]))
        assigned.append(
            Statement(
                statement.text,
                statement.raw,
                statement.written,
                tuple(cited[:max_citations]),
                borrowed,
                statement.every,
                listed,
            )
        )
    return assigned


def output_statements(text: str, settings: DocLensSettings) -> list[Statement]:
    """Statements of an output with scoring citations, per the run's DocLens settings."""
    return assign_citations(
        split_statements(text),
        settings.uncited,
        settings.max_citations,
        official=settings.compat == "official",
    )


def _marker_units(text: str) -> dict[int, str]:
    parts = _MARKER_SPLIT.split(text)
    units: dict[int, str] = {}
    for number, body in zip(parts[1::2], parts[2::2], strict=True):
        units.setdefault(int(number), " ".join(body.split()))
    return units


def resolve_units_mode(notes: Sequence[SourceNote], mode: SourceUnits) -> SourceUnits:
    """The concrete numbering mode for ``auto``: markers if the first note starts with one."""
    if mode != "auto":
        return mode
    if notes and _MARKER_START.match(notes[0].text):
        return "markers"
    return "lines"


def source_units(notes: Sequence[SourceNote], settings: DocLensSettings) -> NumberedSource:
    """Number the source notes' units for citation.

    Args:
        notes: The item's source notes, in order.
        settings: DocLens settings (``source_units`` and ``citation_base``).
    """
    mode = resolve_units_mode(notes, settings.source_units)
    if mode == "markers":
        units: dict[int, str] = {}
        for note in notes:
            for number, text in _marker_units(note.text).items():
                units.setdefault(number, text)
        return NumberedSource(units)
    if mode == "notes":
        texts = [" ".join(n.text.split()) for n in notes]
    else:
        texts = [" ".join(line.split()) for n in notes for line in n.text.splitlines()]
        texts = [t for t in texts if t]
    base = settings.citation_base
    return NumberedSource({base + i: text for i, text in enumerate(texts)})
