"""Read PRM input files: one candidate per record, errors naming file, line and field.

A record is ``{id, candidate?, text | steps | note, question?, documents?, labels?,
error_types?}``:

* ``text``: free text, split by the segmenter (``medprm``, ``chain``, ``note`` or ``lines``);
* ``steps``: pre-segmented steps, each a string or ``{text, kind?, label?, error_type?}``;
* ``note``: an A&P note in the clinical-note PRM's JSON schema (``Problems`` ...). A record
  that *is* such a note (``Problems``, ``Dialogue``, ``Case_id``) is read as one as well.

``question`` (also ``dialogue`` or ``context``) is the text the PRM reads before the steps.
A record with a ``documents`` field (even an empty list) is scored in document-grounded mode.
Labels are 1 (correct) or 0 (erroneous); ``+``/``-`` and true/false are accepted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from clinjudge.inputs import InputError, read_records, validate_records
from clinjudge.prm_bridge._presets import StepKind
from clinjudge.prm_bridge._sections import ALL, SectionError, select_sections
from clinjudge.prm_bridge._segment import (
    Chain,
    Step,
    label_value,
    segment_note,
    split_chain,
    split_lines,
    split_medprm,
    steps_from_note_json,
    strip_step_prefix,
)

Segmenter = Literal["medprm", "chain", "note", "lines"]
SEGMENTERS: tuple[str, ...] = ("medprm", "chain", "note", "lines")


class StepInput(BaseModel):
    """One pre-segmented step."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    kind: StepKind = "step"
    label: int | None = None
    error_type: str | None = None

    @field_validator("label", mode="before")
    @classmethod
    def _label(cls, value: Any) -> Any:
        return label_value(value)


_JSON_CELLS = {"steps", "documents", "labels", "error_types", "note", "meta", "Problems"}


def _json_cell(value: Any) -> Any:
    """A list or object given as JSON text (a CSV cell) becomes that list or object."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _as_text(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


class PRMRecord(BaseModel):
    """One input record (one candidate)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str = Field(min_length=1)
    candidate: str | None = None
    text: str | None = None
    steps: list[str | StepInput] | None = None
    note: dict[str, Any] | None = None
    question: str = Field(
        default="", validation_alias=AliasChoices("question", "dialogue", "context")
    )
    documents: list[str] | None = None
    labels: list[int | None] | None = None
    error_types: list[str | None] | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _note_record(cls, data: Any) -> Any:
        """Decode JSON cells (CSV, Parquet); accept a record of the clinical-note PRM's own
        files as it is."""
        if isinstance(data, dict):
            data = {k: _json_cell(v) if k in _JSON_CELLS else v for k, v in data.items()}
        if not isinstance(data, dict) or "Problems" not in data or "note" in data:
            return data
        note = dict(data)
        out: dict[str, Any] = {"note": note}
        case = note.get("Case_id", note.get("Case_no"))
        out["id"] = data.get("id", case)
        if "Sample_no" in note:
            out["candidate"] = note["Sample_no"]
        if "Dialogue" in note:
            out["question"] = note["Dialogue"]
        return out

    @field_validator("id", "candidate", mode="before")
    @classmethod
    def _text_ids(cls, value: Any) -> Any:
        return _as_text(value)

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [label_value(v) for v in value]
        return value

    @model_validator(mode="after")
    def _one_source(self) -> PRMRecord:
        given = [f for f in ("text", "steps", "note") if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of text, steps or note")
        return self


def _section_text(text: str, section: str) -> str:
    """The lines of the chosen sections (headings left out), for segmenters other than note."""
    if section == ALL:
        return text
    return "\n".join(line for part in select_sections(text, section) for line in part.lines)


def _steps_of(record: PRMRecord, segmenter: Segmenter, section: str) -> tuple[str, list[Step]]:
    """(preamble, steps) of a record."""
    if record.note is not None:
        return "", steps_from_note_json(record.note)
    if record.steps is not None:
        steps = []
        for raw in record.steps:
            item = StepInput(text=raw) if isinstance(raw, str) else raw
            text = strip_step_prefix(item.text) if item.kind == "step" else item.text.strip()
            steps.append(Step(**{**item.model_dump(), "text": text}))
        return "", steps
    assert record.text is not None
    if segmenter == "note":
        return segment_note(record.text, section)
    text = _section_text(record.text, section)
    if segmenter == "medprm":
        return split_medprm(text)
    if segmenter == "lines":
        return "", [Step(text=strip_step_prefix(t)) for t in split_lines(text)]
    preamble, texts = split_chain(text)
    return preamble, [Step(text=t) for t in texts]


def _apply_labels(where: str, record: PRMRecord, steps: list[Step], problems: list[str]) -> None:
    for field in ("labels", "error_types"):
        values = getattr(record, field)
        if values is None:
            continue
        if len(values) != len(steps):
            problems.append(
                f"{where}: field {field}: {len(values)} values for {len(steps)} steps "
                f"(kinds: {', '.join(s.kind for s in steps)})"
            )
            return
        for step, value in zip(steps, values, strict=True):
            setattr(step, "label" if field == "labels" else "error_type", value)


def record_chain(
    where: str,
    record: PRMRecord,
    segmenter: Segmenter,
    position: int,
    problems: list[str],
    section: str = ALL,
) -> Chain | None:
    """The chain of one validated record, or None (with problems recorded)."""
    try:
        preamble, steps = _steps_of(record, segmenter, section)
    except SectionError as exc:
        problems.append(f"{where}: field text: {exc}")
        return None
    except ValueError as exc:
        problems.append(f"{where}: field note: {exc}")
        return None
    if not steps:
        problems.append(f"{where}: field text: no steps found")
        return None
    _apply_labels(where, record, steps, problems)
    return Chain(
        id=record.id,
        candidate=record.candidate or str(position),
        steps=steps,
        preamble=preamble,
        question=record.question,
        documents=record.documents or [],
        rag=True if record.documents is not None else None,
    )


def load_chains(
    path: str | Path,
    segmenter: Segmenter = "chain",
    *,
    need_labels: bool = False,
    section: str = ALL,
) -> list[Chain]:
    """Read and validate every candidate of a JSONL/CSV/Parquet file.

    Args:
        path: The input file.
        segmenter: How ``text`` fields are split into steps.
        need_labels: Every record must carry at least one step label (``judge prm eval``).
        section: Which part of each ``text`` is scored (``all``, ``assessment_plan`` or a
            heading name); a record without it is an error.

    Raises:
        InputError: Every problem found (file, line or row, field); nothing is returned then.
    """
    records = read_records(path)
    if not records:
        raise InputError([f"{path}: no records"])
    problems: list[str] = []
    validated = validate_records(records, PRMRecord, problems)
    chains: list[Chain] = []
    seen: dict[tuple[str, str], str] = {}
    counts: dict[str, int] = {}
    for where, record in validated:
        counts[record.id] = counts.get(record.id, 0) + 1
        chain = record_chain(where, record, segmenter, counts[record.id], problems, section)
        if chain is None:
            continue
        key = (chain.id, chain.candidate)
        if key in seen:
            problems.append(
                f"{where}: field candidate: duplicate candidate {chain.candidate!r} of id "
                f"{chain.id!r} (first at {seen[key]})"
            )
        seen.setdefault(key, where)
        if need_labels and all(s.label is None for s in chain.steps):
            problems.append(f"{where}: field labels: no step labels (1 correct, 0 error)")
        chains.append(chain)
    if problems:
        raise InputError(problems)
    return chains


def chain_from_text(
    item_id: str,
    text: str,
    segmenter: Segmenter,
    *,
    candidate: str = "1",
    question: str = "",
    documents: list[str] | None = None,
    section: str = ALL,
) -> Chain:
    """A chain from free text (the judged item's summary, for instance).

    Args:
        item_id: The item's id.
        text: The text to segment.
        segmenter: How to split it.
        candidate: Candidate name.
        question: Text the PRM reads first.
        documents: Retrieved documents; given (even empty) means document-grounded mode.
        section: Which part of the text is scored.

    Raises:
        ValueError: No steps were found.
    """
    record = PRMRecord(
        id=item_id, candidate=candidate, text=text, question=question, documents=documents
    )
    problems: list[str] = []
    chain = record_chain(item_id, record, segmenter, 1, problems, section)
    if chain is None:
        raise ValueError("; ".join(problems))
    return chain
