"""Section headings of clinical notes, and the section a PRM scores (``section`` setting).

A heading is a line of its own: a known section name written in capitals (``PLAN``, ``HPI:``,
``# ASSESSMENT``), a combined assessment-and-plan title in any case (``A/P``, ``Assessment and
Plan:``, ``IMPRESSION AND PLAN``), a known name after a Markdown ``#``, or any other short line in
capitals outside an assessment-and-plan section (inside one, ``HYPERTENSION:`` is a problem).
Mixed-case ``Assessment:`` and ``Plan:`` are labels inside a problem, not headings.

``assessment_plan`` selects every assessment/impression/plan/instructions section; a note
without any heading is taken as a whole (an A&P note on its own).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clinjudge.errors import UserError

ALL = "all"
ASSESSMENT_PLAN = "assessment_plan"

_COMBINED = {
    "assessment and plan", "assessment & plan", "assessment/plan", "a/p", "a&p", "a / p",
    "impression and plan", "impression & plan", "impression/plan", "assessment and recommendations",
}  # fmt: skip
_ASSESSMENT = {"assessment", "impression", "diagnosis", "diagnoses", "assessment/impression"}
_PLAN = {"plan", "plan of care", "treatment plan", "recommendations", "medical decision making"}
_INSTRUCTIONS = {
    "instructions", "patient instructions", "discharge instructions", "follow up", "follow-up",
    "followup", "disposition", "return precautions",
}  # fmt: skip
_OTHER = {
    "chief complaint", "cc", "hpi", "history of present illness", "history", "interval history",
    "subjective", "objective", "review of systems", "ros", "physical exam", "physical examination",
    "exam", "examination", "vitals", "vital signs", "results", "labs", "laboratory", "imaging",
    "medications", "current medications", "allergies", "past medical history", "pmh",
    "past surgical history", "surgical history", "past history", "social history",
    "family history", "medical history", "problem list", "procedure", "procedures",
}  # fmt: skip
AP_FAMILY = _COMBINED | _ASSESSMENT | _PLAN | _INSTRUCTIONS
_KNOWN = AP_FAMILY | _OTHER
_CAPITALS = re.compile(r"[A-Z][A-Z0-9 &/,()'.-]*[A-Z)]|[A-Z]{2}")


class SectionError(UserError):
    """The requested section is not in the text."""


@dataclass
class Section:
    """A heading and the lines under it (``heading`` None for text before the first one)."""

    heading: str | None
    lines: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """The heading folded for comparison (lowercase, single spaces)."""
        return section_key(self.heading or "")

    @property
    def kind(self) -> str:
        """``combined``, ``assessment``, ``plan``, ``instructions``, ``other`` or ``none``."""
        key = self.key
        for kind, names in (
            ("combined", _COMBINED),
            ("assessment", _ASSESSMENT),
            ("plan", _PLAN),
            ("instructions", _INSTRUCTIONS),
        ):
            if key in names:
                return kind
        return "other" if self.heading else "none"


def section_key(name: str) -> str:
    """A heading or section name folded: lowercase, ``_`` as space, no ``#`` or colon."""
    name = name.strip().lstrip("#").strip().rstrip(":").strip().replace("_", " ")
    return " ".join(name.lower().split())


def heading_of(line: str, in_assessment_plan: bool = False) -> str | None:
    """The heading a line is (as written, without ``#`` and colon), or None.

    Args:
        line: One line of the note.
        in_assessment_plan: Whether the line lies in an assessment-and-plan section (where an
            unknown line in capitals is a problem title, not a heading).
    """
    stripped = line.strip()
    markdown = stripped.startswith("#")
    core = stripped.lstrip("#").strip()
    if core.endswith(":"):
        core = core[:-1].rstrip()
    if not core or len(core) > 60 or core.endswith("."):
        return None
    key = section_key(core)
    if key in _COMBINED or (markdown and key in _KNOWN and not re.match(r"\d", key)):
        return core
    if not _CAPITALS.fullmatch(core) or len(core.split()) > 6:
        return None
    if key in _KNOWN or not in_assessment_plan:
        return core
    return None


def split_sections(text: str) -> list[Section]:
    """The text's sections in order; the first has no heading (possibly no lines either)."""
    sections = [Section(None)]
    inside = False
    for line in text.splitlines():
        heading = heading_of(line, inside)
        if heading is None:
            sections[-1].lines.append(line)
            continue
        sections.append(Section(heading))
        inside = section_key(heading) in AP_FAMILY
    return sections


def _has_text(section: Section) -> bool:
    return any(line.strip() for line in section.lines)


def select_sections(text: str, section: str = ALL) -> list[Section]:
    """The sections a PRM scores.

    Args:
        text: The note.
        section: ``all``, ``assessment_plan`` or a heading name (any case; ``_`` for spaces).

    Raises:
        SectionError: The section is not in the text (the headings found are named).
    """
    sections = split_sections(text)
    headed = [s for s in sections if s.heading]
    if section == ALL:
        return [s for s in sections if s.heading or _has_text(s)]
    if section == ASSESSMENT_PLAN:
        if not headed:
            return sections  # no headings at all: an assessment-and-plan note on its own
        chosen = [s for s in headed if s.key in AP_FAMILY]
        wanted = "assessment-and-plan section (ASSESSMENT AND PLAN, A/P, IMPRESSION AND PLAN, "
        wanted += "ASSESSMENT, PLAN, ...)"
    else:
        chosen = [s for s in headed if s.key == section_key(section)]
        wanted = f"section headed {section!r}"
    if not chosen:
        seen = ", ".join(dict.fromkeys(s.heading or "" for s in headed)) or "none"
        raise SectionError(f"no {wanted} in the text; headings found: {seen}")
    return chosen
