"""Split text into PRM steps: reasoning chains and assessment-and-plan (A&P) notes.

Chains follow Med-PRM: ``Step n:`` (optionally ``## Step n:``) starts a step and text before the
first one is an untagged preamble; without such markers every non-empty line is a step. The
``medprm`` segmenter is Med-PRM's own split: each step keeps its text as written (its own
``Step n:`` label, spacing and number; empty steps stay), and text without markers is one step.

Notes follow the clinical-note PRM's step scheme: every problem description is a step, every
sentence under it is a step, then a problem-completeness step; after the last problem a
note-completeness step and an end-of-note step (the last three have no text of their own).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from clinjudge.prm_bridge._presets import StepKind
from clinjudge.prm_bridge._sections import ALL, Section, select_sections


class Step(BaseModel):
    """One step of a chain.

    Args:
        text: The step's text (empty for completeness and end-of-note steps).
        kind: What the step is (``step`` for reasoning chains).
        label: Gold label, 1 correct and 0 erroneous, when known.
        error_type: Gold error type of an erroneous step, when known.
        raw: The step's text exactly as it is to be rendered, its own ``Step n:`` label
            included (the ``medprm`` segmenter); formats use it instead of ``step_format``.
    """

    text: str = ""
    kind: StepKind = "step"
    label: int | None = Field(default=None, ge=0, le=1)
    error_type: str | None = None
    raw: str | None = None


class Chain(BaseModel):
    """One candidate to score: its steps and the context the PRM reads first.

    Args:
        id: Input id; candidates with the same id compete in best-of-n.
        candidate: Candidate name within the id.
        steps: The steps, in order.
        preamble: Text before the first step, rendered without a tag.
        question: The question (Med-PRM) or the dialogue (PRM-Clinic).
        documents: Retrieved documents (Med-PRM), in order.
        rag: Document-grounded mode (Med-PRM's RAG system prompt) even when no document is
            kept; None means: when there are documents.
    """

    id: str
    candidate: str = "1"
    steps: list[Step]
    preamble: str = ""
    question: str = ""
    documents: list[str] = Field(default_factory=list)
    rag: bool | None = None

    @property
    def grounded(self) -> bool:
        """Whether the chain is scored in document-grounded (RAG) mode."""
        return self.rag if self.rag is not None else bool(self.documents)


_STEP_MARK = re.compile(r"(?:## )?Step \d+:")
_STEP_PREFIX = re.compile(r"^\s*(?:#+\s*)?Step \d+:\s*")


def strip_step_prefix(text: str) -> str:
    """Remove a leading ``Step n:`` (formats add their own numbering)."""
    return _STEP_PREFIX.sub("", text, count=1).strip()


def split_lines(text: str) -> list[str]:
    """Every non-empty line, stripped."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def split_chain(text: str) -> tuple[str, list[str]]:
    """(preamble, steps) of a reasoning chain.

    Args:
        text: ``Step 1: ... Step 2: ...`` text, or one step per line.
    """
    marks = list(_STEP_MARK.finditer(text))
    if not marks:
        return "", split_lines(text)
    preamble = text[: marks[0].start()].strip()
    steps = []
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        end = following.start() if following else len(text)
        steps.append(text[mark.end() : end].strip())
    return preamble, [s for s in steps if s]


def split_medprm(text: str) -> tuple[str, list[Step]]:
    """(preamble, steps) exactly as Med-PRM prepares a solution before tagging it.

    Newlines become spaces; each step runs from its ``(## )?Step n:`` marker to the next,
    stripped, with every ``"## "`` removed, and is kept in ``raw`` as it will be rendered (its
    own label, spacing and number; empty steps stay). Text before the first marker is the
    untagged preamble; text without markers is one step, as written.

    Args:
        text: The solution.
    """
    flat = text.replace("\n", " ")
    marks = list(_STEP_MARK.finditer(flat))
    if not marks:
        whole = flat.strip()
        return "", ([Step(text=whole, raw=whole)] if whole else [])
    steps = []
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        chunk = flat[mark.start() : following.start() if following else len(flat)]
        raw = chunk.strip().replace("## ", "")
        steps.append(Step(text=strip_step_prefix(raw), raw=raw))
    return flat[: marks[0].start()].strip(), steps


# -- A&P notes -------------------------------------------------------------------------------

_NUMBERED = re.compile(
    r"^\s*(?:#+\s*\d+\s*[.):]?|(?:problem\s*)?#?\s*\d+\s*[.):])\s*(?P<rest>\S.*)$", re.I
)
_HASH = re.compile(r"^\s*#+\s*(?P<rest>[^#\s\d].*)$")  # "# Fatigue": a problem
# Labelled lines that are problems of their own, never part of the problem above them.
_LABELLED = re.compile(
    r"^\s*(?:[-*\u2022]\s*)?(?P<head>(?:follow[- ]?up(?: instructions)?|patient agreements?"
    r"|disposition|return precautions)\s*:)\s*(?P<rest>.*)$",
    re.I,
)
_LABEL_ONLY = re.compile(r"^\s*(assessment|plan)\s*:\s*$", re.I)
_BULLET = re.compile(r"^\s*(?:[-*\u2022\u00b7\u2013\u25e6]|\d+[.)](?=\s))\s+")
_ABBREVIATIONS = {
    "dr", "mr", "mrs", "ms", "vs", "etc", "approx", "no", "st", "jr", "sr", "e.g", "i.e", "p.o",
    "b.i.d", "t.i.d", "q.i.d", "q.d", "h.s", "p.r.n", "fig", "pt", "hx", "dx", "rx", "tx",
}  # fmt: skip
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Sentences of a paragraph; abbreviations, initials and decimals do not end a sentence."""
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        before = text[start : match.start()].rstrip("\"')]")
        word = before.rsplit(None, 1)[-1] if before.split() else ""
        stem = word.rstrip(".!?").lower()
        if word.endswith(".") and (stem in _ABBREVIATIONS or (len(stem) == 1 and stem.isalpha())):
            continue
        sentences.append(text[start : match.start()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def _header(line: str) -> tuple[str, str] | None:
    """(problem description, rest of the line) when the line starts a problem."""
    labelled = _LABELLED.match(line)
    if labelled:
        return labelled.group("head").strip(), labelled.group("rest").strip()
    numbered = _NUMBERED.match(line) or _HASH.match(line)
    rest = numbered.group("rest").strip() if numbered else ""
    if not numbered:
        stripped = line.strip()
        if stripped.endswith(":") and len(stripped) <= 80 and not _LABEL_ONLY.match(stripped):
            return stripped, ""
        return None
    head, sep, body = rest.partition(":")
    if sep and body.strip() and not _LABEL_ONLY.match(head + ":"):
        return head.strip() + ":", body.strip()
    return rest, ""


def _titled_problem(line: str, following: list[str]) -> tuple[str, str] | None:
    """A short title line ending in a full stop, followed by bullets, starts a problem: the
    layout of ambient-scribe notes ("Depression." then "• Medical Reasoning: ...")."""
    title = line.strip()
    if _BULLET.match(line) or not title.endswith(".") or len(title.split()) > 8:
        return None
    if not following or not _BULLET.match(following[0]):
        return None
    return title, ""


def _body_sentences(lines: list[str]) -> list[str]:
    """Sentence steps of a problem's lines; a bare ``Assessment:``/``Plan:`` joins the next."""
    sentences: list[str] = []
    pending = ""
    for line in lines:
        if _LABEL_ONLY.match(line):
            pending = (pending + " " + line.strip()).strip()
            continue
        for sentence in split_sentences(_BULLET.sub("", line).strip()):
            sentences.append(f"{pending} {sentence}".strip() if pending else sentence)
            pending = ""
    if pending:
        sentences.append(pending)
    return sentences


def note_steps(problems: list[tuple[str, list[str]]]) -> list[Step]:
    """Steps of (problem description, sentences) pairs in the clinical-note scheme."""
    steps: list[Step] = []
    for head, sentences in problems:
        if head:
            steps.append(Step(text=head, kind="problem"))
        steps.extend(Step(text=s, kind="sentence") for s in sentences)
        steps.append(Step(kind="problem_completeness"))
    steps.append(Step(kind="note_completeness"))
    steps.append(Step(kind="end_of_note"))
    return steps


def _diagnosis(line: str) -> tuple[str, str] | None:
    """A short line (or bullet) of an ASSESSMENT/IMPRESSION section: a problem title."""
    text = _BULLET.sub("", line).strip()
    if not text or text.endswith(":") or len(text.split()) > _DIAGNOSIS_WORDS:
        return None
    return text, ""


_DIAGNOSIS_WORDS = 12


def _title_key(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


class _Problems:
    """Problems as they are found: (description, lines), an intro before the first problem."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, list[str]]] = []
        self.current: list[str] | None = None
        self.intro: list[str] = []
        self.preamble = ""

    def start(self, head: str, rest: str = "", *, clinical: bool = True) -> None:
        """Open a problem; ``clinical`` False for untitled and labelled ones (``Follow up:``),
        which do not turn the text before them into the preamble."""
        self._flush_intro(clinical and bool(head))
        self.current = [rest] if rest else []
        self.problems.append((head, self.current))

    def resume(self, title: str) -> bool:
        """Continue an earlier problem with this title (PLAN repeating ASSESSMENT's problems)."""
        key = _title_key(title)
        for head, lines in self.problems:
            if head and _title_key(head) == key:
                self.current = lines
                return True
        return False

    def add(self, line: str) -> None:
        if self.current is None:
            self.intro.append(line)
        else:
            self.current.append(line)

    def block(self, lines: list[str]) -> None:
        """An untitled problem of its own (a section that is not assessment and plan)."""
        self.close()
        if lines:
            self._flush_intro(False)
            self.problems.append(("", list(lines)))

    def close(self) -> None:
        self.current = None

    def _flush_intro(self, titled: bool) -> None:
        if not self.intro:
            return
        if titled and not self.problems:  # the opening summary: read by the model, not scored
            self.preamble = "\n".join(line.strip() for line in self.intro)
        else:  # text that is not a summary before titled problems: a problem of its own
            self.problems.append(("", self.intro))
        self.intro = []

    def finish(self) -> tuple[str, list[tuple[str, list[str]]]]:
        if self.intro:  # no problem followed: the text is one problem
            self.problems.append(("", self.intro))
            self.intro = []
        found = [(head, _body_sentences(lines)) for head, lines in self.problems]
        return self.preamble, [(h, b) for h, b in found if h or b]


def _assessment_plan_lines(problems: _Problems, section: Section) -> None:
    kind = section.kind
    lines = [line for line in section.lines if line.strip()]
    if kind == "instructions":
        problems.start("", clinical=False)
    for index, line in enumerate(lines):
        labelled = _LABELLED.match(line)
        if labelled:
            head, rest = labelled.group("head").strip(), labelled.group("rest").strip()
            problems.start(head, rest, clinical=False)
            continue
        if kind == "instructions":
            problems.add(line)
            continue
        if kind != "assessment" and problems.resume(_BULLET.sub("", line)):
            continue
        found = _header(line) or _titled_problem(line, lines[index + 1 : index + 2])
        if found is None and kind == "assessment":
            found = _diagnosis(line)
        if found is None:
            problems.add(line)
        else:
            problems.start(*found)


def segment_note(text: str, section: str = ALL) -> tuple[str, list[Step]]:
    """(preamble, steps) of a free-text note in the clinical-note step scheme.

    Section headings (``ASSESSMENT``, ``PLAN``, ``A/P``, ``IMPRESSION AND PLAN``, ``HPI:`` ...)
    are never steps. In assessment-and-plan sections problems start at numbered lines (``1.``,
    ``#2``, ``Problem 3:``), at short lines ending in a colon, at short titles ending in a full
    stop with bullets below, at labelled lines (``Follow up:``, ``Patient Agreements:``), at the
    short lines of a separate ``ASSESSMENT``/``IMPRESSION`` section (the diagnoses), and a
    ``PLAN`` line repeating one of those diagnoses continues that problem. An
    ``INSTRUCTIONS``/``FOLLOW UP`` section is a problem without a description. Text before the
    first problem is the untagged preamble; without any problem it is one problem. With
    ``section="all"`` every other section is a problem without a description.

    Args:
        text: The note.
        section: ``all``, ``assessment_plan`` or a heading name.

    Raises:
        SectionError: The section is not in the text.
    """
    sections = select_sections(text, section)
    headed = any(s.heading for s in sections)
    problems = _Problems()
    for part in sections:
        if part.kind == "other" or (part.kind == "none" and headed):
            problems.block([line for line in part.lines if line.strip()])
        else:
            _assessment_plan_lines(problems, part)
    preamble, found = problems.finish()
    return preamble, note_steps(found)


def split_note(text: str) -> list[Step]:
    """Steps of a free-text note (all sections; see :func:`segment_note`, which also returns
    the preamble).

    Args:
        text: The note.
    """
    return segment_note(text, ALL)[1]


# -- the clinical-note JSON schema ----------------------------------------------------------------

_LABELS = {"+": 1, "-": 0}


def label_value(value: Any) -> int | None:
    """A gold label as 1/0: accepts 1/0, true/false and ``+``/``-``; None when absent."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) and value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip() in _LABELS:
        return _LABELS[value.strip()]
    if isinstance(value, str) and value.strip() in ("0", "1"):
        return int(value.strip())
    raise ValueError(f"label {value!r} is not 1/0, true/false or +/-")


def _error_types(note: dict[str, Any]) -> dict[tuple[str, str, str | None], str]:
    """(level, problem no, step no) -> error type, from the error files' swap records."""
    found: dict[tuple[str, str, str | None], str] = {}
    for swap in note.get("Swapped_info") or []:
        if not isinstance(swap, dict) or not swap.get("Error_type"):
            continue
        level = str(swap.get("Error_level", "Step")).lower()
        step_no = swap.get("Step_no")
        key = (level, str(swap.get("Problem_no")), None if level == "problem" else str(step_no))
        found[key] = str(swap["Error_type"])
    for removed in note.get("Removed_info") or []:
        if not isinstance(removed, dict):
            continue
        change = str(removed.get("Change_type", "Incompleteness"))
        if change.lower().startswith("step"):
            found[("problem_completeness", str(removed.get("Problem_no")), None)] = change
        else:
            found[("note_completeness", "", None)] = change
    return found


def steps_from_note_json(note: dict[str, Any]) -> list[Step]:
    """Steps (with labels, when scored) of a note in the clinical-note PRM's JSON schema.

    Args:
        note: ``{"Problems": [{"Problem", "Problem_score", "Steps": [{"Step", "Step_score"}],
            "Problem_completeness_score"}], "Note_completeness_score"}``; error files'
            ``Swapped_info``/``Removed_info`` give error types.

    Raises:
        ValueError: The structure does not match the schema.
    """
    problems = note.get("Problems")
    if not isinstance(problems, list):
        raise ValueError("Problems must be a list")
    types = _error_types(note)
    note_label = note.get("Note_completeness_score")
    steps: list[Step] = []
    for p_index, problem in enumerate(problems, start=1):
        if not isinstance(problem, dict):
            raise ValueError(f"Problems[{p_index - 1}] must be an object")
        if "Problem" not in problem and "Note_completeness_score" in problem:
            note_label = problem["Note_completeness_score"]  # the schema's example puts it here
            continue
        p_no = str(problem.get("Problem_no", p_index))
        steps.append(
            Step(
                text=str(problem.get("Problem", "")),
                kind="problem",
                label=label_value(problem.get("Problem_score")),
                error_type=types.get(("problem", p_no, None)),
            )
        )
        for s_index, item in enumerate(problem.get("Steps") or [], start=1):
            if not isinstance(item, dict) or "Step" not in item:
                raise ValueError(f"Problems[{p_index - 1}].Steps[{s_index - 1}] needs a Step")
            s_no = str(item.get("Step_no", s_index))
            steps.append(
                Step(
                    text=str(item["Step"]),
                    kind="sentence",
                    label=label_value(item.get("Step_score")),
                    error_type=types.get(("step", p_no, s_no)),
                )
            )
        steps.append(
            Step(
                kind="problem_completeness",
                label=label_value(problem.get("Problem_completeness_score")),
                error_type=types.get(("problem_completeness", p_no, None)),
            )
        )
    steps.append(
        Step(
            kind="note_completeness",
            label=label_value(note_label),
            error_type=types.get(("note_completeness", "", None)),
        )
    )
    for step in steps:
        if step.error_type and step.label is None:
            step.label = 0
    known = [s.label for s in steps if s.label is not None]
    # The end-of-note label is "-" whenever any other step is wrong (the scheme's rule).
    steps.append(Step(kind="end_of_note", label=(int(all(known)) if known else None)))
    return steps
