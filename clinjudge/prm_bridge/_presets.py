"""PRM input formats as data: where the step marker goes, which label tokens are read, how.

A format says how a chain of steps becomes one model input and where its step scores are read:

* every step is rendered as ``step_format`` followed by its *marker*: the step tag (or the token
  for the step's kind) and then the ``placeholder`` slot, if any;
* the score of a step is read at the last token of its marker, shifted by ``read_offset``
  (PRM-Clinic reads at the kind token, the position before the placeholder, so -1);
* P('+') is a softmax over the two label logits (``pair``) or over the whole vocabulary
  (``vocab``).

The presets reproduce the conventions of the released code of each model family (token strings,
templates and system prompts are facts of those checkpoints' training data; changing them takes
the model out of distribution). See ``docs/prm.md`` and ``research/prm.md``.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from clinjudge.errors import UserError, validation_problems

StepKind = Literal[
    "step", "problem", "sentence", "problem_completeness", "note_completeness", "end_of_note"
]
STEP_KINDS: tuple[str, ...] = (
    "step",
    "problem",
    "sentence",
    "problem_completeness",
    "note_completeness",
    "end_of_note",
)


class PRMFormatError(UserError):
    """A PRM format (preset, override or file) is invalid."""


class PRMFormat(BaseModel):
    """How chains are rendered for one PRM family and where their scores are read.

    Args:
        name: Preset or custom name.
        step_tag: Marker after each step (e.g. ``" ки"``), for kinds without a kind token.
        kind_tokens: Marker per step kind (PRM-Clinic's reserved type tokens).
        placeholder: Label slot appended after the tag or kind token.
        special_tokens: Strings that must each be one token of the tokenizer.
        plus: Token string meaning a correct step.
        minus: Token string meaning an erroneous step.
        label_lookup: How ``plus``/``minus`` become ids: ``first`` or ``last`` id of encoding the
            string without special tokens, or ``token`` (a vocabulary entry by name).
        plus_id: Explicit id of the correct label (overrides ``plus``).
        minus_id: Explicit id of the erroneous label (overrides ``minus``).
        softmax: ``pair`` (two label logits) or ``vocab`` (full vocabulary).
        read_offset: Position of the score relative to the marker's last token.
        template: ``chat`` (the tokenizer's chat template) or ``raw`` text.
        system_prompt: System turn of chat formats.
        system_prompt_documents: System turn used instead when documents are given.
        prompt: The user turn (chat) or the whole text (raw); fields ``{documents}``,
            ``{question}`` and ``{solution}``.
        step_format: One step's text; fields ``{n}`` (1-based) and ``{text}``.
        joiner: Between rendered steps.
        newlines_to_spaces: Replace newlines inside steps (Med-PRM's solutions have none).
        document_format: One retrieved document; fields ``{n}`` and ``{text}``.
        document_budget: Most tokens of documents kept (whole documents, in order, +1 per
            document); None keeps all.
        add_special_tokens: Tokenize the rendered text with the tokenizer's BOS.
        max_length: Most tokens per input; None means the model's limit.
        truncation: Over ``max_length``: ``error`` (the candidate fails), ``context`` (cut the
            question/dialogue from its start), ``steps`` (drop the last steps).
        segmenter: Default segmentation of free text: ``medprm`` (Med-PRM's own split, steps
            kept as written), ``chain`` (``Step n:`` or lines, steps rebuilt by
            ``step_format``), ``note`` (assessment-and-plan problems and sentences) or
            ``lines``.
        section: The part of a note to score: ``all``, ``assessment_plan`` (the
            assessment-and-plan sections; a note without headings is taken whole) or a heading
            name; a note without that section is an input error.
        vllm_plus_index: Column of P('+') in rows returned by a vLLM pooling server.
        aggregate: Default candidate-level score for best-of-n.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = "custom"
    step_tag: str = ""
    kind_tokens: dict[StepKind, str] = Field(default_factory=dict)
    placeholder: str = ""
    special_tokens: list[str] = Field(default_factory=list)
    plus: str = "+"
    minus: str = "-"
    label_lookup: Literal["first", "last", "token"] = "first"
    plus_id: int | None = None
    minus_id: int | None = None
    softmax: Literal["pair", "vocab"] = "pair"
    read_offset: int = Field(default=0, le=0)
    template: Literal["chat", "raw"] = "raw"
    system_prompt: str = ""
    system_prompt_documents: str | None = None
    prompt: str = "{documents}{question}{solution}"
    step_format: str = "{text}"
    joiner: str = " "
    newlines_to_spaces: bool = False
    document_format: str = "{text}\n\n"
    document_budget: int | None = Field(default=None, ge=0)
    add_special_tokens: bool = True
    max_length: int | None = Field(default=None, gt=0)
    truncation: Literal["error", "context", "steps"] = "context"
    segmenter: Literal["medprm", "chain", "note", "lines"] = "chain"
    section: str = Field(default="all", min_length=1)
    vllm_plus_index: int = Field(default=0, ge=0)
    aggregate: Literal[
        "product", "min", "last", "mean", "geomean", "median", "max", "sum", "threshold"
    ] = "min"

    @model_validator(mode="after")
    def _check(self) -> PRMFormat:
        if not self.step_tag and not self.kind_tokens and not self.placeholder:
            raise ValueError("a format needs a step_tag, kind_tokens or a placeholder")
        if self.prompt.count("{solution}") != 1:
            raise ValueError("prompt must contain {solution} exactly once")
        for field in ("prompt", "step_format", "document_format"):
            _check_fields(field, getattr(self, field))
        return self

    def marker(self, kind: str) -> str:
        """The marker written after a step of this kind."""
        return self.kind_tokens.get(kind, self.step_tag) + self.placeholder  # type: ignore[call-overload]


_ALLOWED_FIELDS = {
    "prompt": {"documents", "question", "solution"},
    "step_format": {"n", "text"},
    "document_format": {"n", "text"},
}


def _check_fields(field: str, template: str) -> None:
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from exc
    unknown = names - _ALLOWED_FIELDS[field]
    if unknown:
        raise ValueError(f"{field}: unknown field(s) {sorted(unknown)}")


_MEDPRM_SYSTEM = (
    "You are an evaluator assessing the logicality and validity of the reasoning in each step "
    "of the given explanation. In order to support the evaluation, the question and the "
    "explanation are provided. If the reasoning contains errors, output - after that step. "
    "If the reasoning in a step is logical and valid, output + after that step."
)
_MEDPRM_SYSTEM_DOCS = (
    "You are an evaluator assessing the logicality and validity of the reasoning in each step "
    "of the given explanation. In order to support the evaluation, the relevant documents, the "
    "question, and the explanation are provided sequentially. If the reasoning contains errors, "
    "output - after that step. If the reasoning in a step is logical and valid, output + after "
    "that step. "
)
_CLINIC_PROMPT = (
    "You are a physician writing a clinical note based on a dialogue with the patient. Only "
    'write the "ASSESSMENT AND PLAN" part of the notes. Only include information contained in '
    "the dialogue.\n###DIALOGUE:\n{question}\n###CLINICAL NOTE-ASSESSMENT AND PLAN: \n"
    "{solution}"
)


def _reserved(n: int) -> str:
    return f"<|reserved_special_token_{n}|>"


PRESETS: dict[str, dict[str, Any]] = {
    # Med-PRM (dmis-lab/llama-3.1-medprm-reward-v1.0): " ки" added as a special token, labels
    # " +"/" -", softmax over the pair at the tag, chat template, documents first (3072 tokens).
    "medprm": {
        "name": "medprm",
        "step_tag": " ки",
        "special_tokens": [" ки"],
        "plus": " +",
        "minus": " -",
        "label_lookup": "first",
        "softmax": "pair",
        "template": "chat",
        "system_prompt": _MEDPRM_SYSTEM,
        "system_prompt_documents": _MEDPRM_SYSTEM_DOCS,
        "prompt": "{documents}Question: {question}\n\nExplanation: {solution}",
        "step_format": "Step {n}: {text}",
        "joiner": " ",
        "newlines_to_spaces": True,
        "document_format": "Document {n}: {text}\n\n",
        "document_budget": 3072,
        "max_length": None,
        "segmenter": "medprm",
    },
    # PRM-Clinic (hanyin88/prm-clinic): Llama-3 reserved tokens as step-kind markers and label
    # slot; P('+') is the full-vocabulary softmax at the kind token; raw text with BOS.
    "prm-clinic": {
        "name": "prm-clinic",
        "kind_tokens": {
            "problem": _reserved(1),
            "sentence": _reserved(2),
            "step": _reserved(2),
            "problem_completeness": _reserved(3),
            "note_completeness": _reserved(4),
            "end_of_note": _reserved(5),
        },
        "placeholder": _reserved(6),
        "special_tokens": [_reserved(n) for n in range(1, 9)],
        "plus": _reserved(7),
        "minus": _reserved(8),
        "label_lookup": "token",
        "softmax": "vocab",
        "read_offset": -1,
        "template": "raw",
        "prompt": _CLINIC_PROMPT,
        "step_format": "{text}",
        "joiner": "",
        "segmenter": "note",
        "section": "assessment_plan",  # trained on assessment-and-plan notes only
        "aggregate": "product",
    },
    # Math-Shepherd (peiyi9979/math-shepherd-mistral-7b-prm): the vocabulary's own "ки" piece,
    # labels "+"/"-", softmax over the pair, "{question} Step n: ... ки\n" raw text.
    "math-shepherd": {
        "name": "math-shepherd",
        "step_tag": " ки",
        "plus": "+",
        "minus": "-",
        "label_lookup": "last",
        "softmax": "pair",
        "template": "raw",
        "prompt": "{question} {solution}",
        "step_format": "Step {n}: {text}",
        "joiner": "\n",
        "segmenter": "chain",
    },
    # Anything else: set step_tag, plus/minus, softmax and template yourself.
    "custom": {
        "name": "custom",
        "step_tag": " ки",
        "prompt": "{documents}{question}\n\n{solution}",
    },
}


def preset_names() -> list[str]:
    """Names of the built-in presets."""
    return list(PRESETS)


def _parse_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as a dict; values are JSON when they parse, else strings.

    Args:
        pairs: Items such as ``step_tag=" ки"`` or ``read_offset=-1``.
    """
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise PRMFormatError(f"override {pair!r}: expected KEY=VALUE")
        overrides[key.strip()] = _parse_value(value)
    return overrides


def load_format_file(path: str | Path) -> dict[str, Any]:
    """Format fields from a YAML or JSON file (a mapping)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PRMFormatError(f"{path}: cannot read format file: {exc}") from exc
    if not isinstance(data, dict):
        raise PRMFormatError(f"{path}: a format file must hold a mapping of fields")
    return data


def make_format(preset: str = "medprm", overrides: dict[str, Any] | None = None) -> PRMFormat:
    """A preset with fields replaced.

    Args:
        preset: One of :data:`PRESETS`.
        overrides: Fields to replace (from ``--set`` or a format file).

    Raises:
        PRMFormatError: Unknown preset or invalid fields (each named).
    """
    if preset not in PRESETS:
        raise PRMFormatError(f"unknown PRM preset {preset!r}; choose from {', '.join(PRESETS)}")
    fields = {**PRESETS[preset], **(overrides or {})}
    try:
        return PRMFormat.model_validate(fields)
    except ValidationError as exc:
        problems = validation_problems(exc, top="(format)")
        raise PRMFormatError(f"PRM format {preset!r}: " + "; ".join(problems)) from exc
