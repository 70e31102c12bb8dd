"""Pydantic schema for rubrics: the data a judge is asked to fill in."""

from __future__ import annotations

import re
from enum import Enum
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

InputField = Literal["notes", "summary", "reference", "specialty"]


class ScaleKind(str, Enum):
    """How an attribute is scored."""

    likert = "likert"
    binary = "binary"
    proportion = "proportion"  # a share from 0 to 1 (DocLens metrics), computed, never asked


class Polarity(str, Enum):
    """Which direction of the scale is good."""

    higher_better = "higher_better"
    higher_worse = "higher_worse"
    neutral = "neutral"


class Provenance(BaseModel):
    """Where a rubric comes from and under which terms."""

    model_config = ConfigDict(extra="forbid")

    source: str
    licence: str
    citation: str | None = None
    notes: str | None = None


class Gate(BaseModel):
    """Makes an attribute null exactly when another attribute takes a given value."""

    model_config = ConfigDict(extra="forbid")

    attribute: str
    null_when: int


class RubricSettings(BaseModel):
    """How replies to a rubric are read.

    Args:
        gate: ``coerce`` (default): a score given for a gated attribute whose gate says null
            (``synthesized`` when ``abstraction`` is 0; the PDSQI-9 authors' own prompt asks for
            integers everywhere) is stored as null, its raw value kept and counted; ``strict``:
            such a reply is invalid and re-asked. A missing score where the gate asks for one is
            invalid either way.
    """

    model_config = ConfigDict(extra="forbid")

    gate: Literal["coerce", "strict"] = "coerce"


class Attribute(BaseModel):
    """One scored attribute of a rubric.

    Args:
        key: Wire key, the JSON key the judge must output.
        name: Display name shown to people.
        description: What the attribute measures.
        guidance: Extra notes that sharpen the description.
        scale: Likert or binary.
        min: Lowest valid score.
        max: Highest valid score.
        nullable: Whether null (not applicable) is a valid answer.
        null_meaning: What a null answer means, shown to the judge.
        anchors: Meaning of every scale point, as text.
        polarity: Which direction is good.
        gate: Ties nullability to another attribute's value.
        agreement: Whether the attribute enters agreement analysis.
        aliases: Other keys a model may use for this attribute.
    """

    model_config = ConfigDict(extra="forbid")

    key: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    name: str
    description: str
    guidance: list[str] = Field(default_factory=list)
    scale: ScaleKind
    min: int
    max: int
    nullable: bool = False
    null_meaning: str | None = None
    anchors: dict[int, str]
    polarity: Polarity = Polarity.higher_better
    gate: Gate | None = None
    agreement: bool = True
    aliases: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_scale(self) -> Attribute:
        if self.min >= self.max:
            raise ValueError(f"attribute {self.key!r}: min must be below max")
        if self.scale is ScaleKind.binary and (self.min, self.max) != (0, 1):
            raise ValueError(f"attribute {self.key!r}: a binary scale runs from 0 to 1")
        if self.scale is ScaleKind.proportion and (self.min, self.max) != (0, 1):
            raise ValueError(f"attribute {self.key!r}: a proportion runs from 0 to 1")
        expected = set(range(self.min, self.max + 1))
        if set(self.anchors) != expected:
            raise ValueError(
                f"attribute {self.key!r}: anchors must define every point "
                f"{sorted(expected)}, got {sorted(self.anchors)}"
            )
        if self.gate is not None and not self.nullable:
            raise ValueError(f"attribute {self.key!r}: a gated attribute must be nullable")
        if self.nullable and not self.null_meaning:
            raise ValueError(f"attribute {self.key!r}: a nullable attribute needs null_meaning")
        return self

    @property
    def values(self) -> range:
        """Every valid non-null score."""
        return range(self.min, self.max + 1)


class InputLabels(BaseModel):
    """Headings the judge sees above each input block; the fence tags themselves never change.

    Args:
        notes: Heading of the numbered source notes.
        summary: Name of the text under evaluation.
        reference: Heading of the gold/reference text.
    """

    model_config = ConfigDict(extra="forbid")

    notes: str = Field(default="CLINICAL NOTES", pattern=r"^[A-Z0-9][A-Z0-9 ()/&,'-]*$")
    summary: str = Field(default="CLINICAL SUMMARY", pattern=r"^[A-Z0-9][A-Z0-9 ()/&,'-]*$")
    reference: str = Field(default="REFERENCE", pattern=r"^[A-Z0-9][A-Z0-9 ()/&,'-]*$")


class Rubric(BaseModel):
    """A scoring instrument: inputs the judge needs and the attributes it must score.

    Args:
        name: Short identifier used on the command line.
        version: Version string; bump it whenever wording changes.
        title: Human-readable title.
        provenance: Source and licence.
        inputs: Item fields the rubric needs.
        task: What the judge is asked to do, in plain words.
        attributes: Scored attributes, in output order.
        labels: Uppercase headings of the input blocks (defaults suit note summaries).
        method: ``scores`` (the judge fills in the attributes) or ``claims`` (DocLens: the
            attributes are proportions computed from claim-level entailment judgments).
        settings: How replies are read (``gate: coerce | strict``).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    version: str
    title: str
    provenance: Provenance
    inputs: list[InputField]
    task: str
    attributes: list[Attribute]
    labels: InputLabels = Field(default_factory=InputLabels)
    method: Literal["scores", "claims"] = "scores"
    settings: RubricSettings = Field(default_factory=RubricSettings)

    @field_validator("attributes")
    @classmethod
    def _unique_keys(cls, attributes: list[Attribute]) -> list[Attribute]:
        if not attributes:
            raise ValueError("a rubric needs at least one attribute")
        keys = [a.key for a in attributes]
        duplicated = sorted({k for k in keys if keys.count(k) > 1})
        if duplicated:
            raise ValueError(f"duplicate attribute keys: {duplicated}")
        return attributes

    @model_validator(mode="after")
    def _check_gates_and_aliases(self) -> Rubric:
        by_key = {a.key: a for a in self.attributes}
        for attribute in self.attributes:
            gate = attribute.gate
            if gate is None:
                continue
            target = by_key.get(gate.attribute)
            if target is None:
                raise ValueError(
                    f"attribute {attribute.key!r}: gate names unknown {gate.attribute!r}"
                )
            if gate.null_when not in target.values:
                raise ValueError(
                    f"attribute {attribute.key!r}: gate value {gate.null_when} is outside "
                    f"{gate.attribute!r}'s scale"
                )
        seen: dict[str, str] = {}
        for attribute in self.attributes:
            for alias in alias_forms(attribute):
                if seen.setdefault(alias, attribute.key) != attribute.key:
                    raise ValueError(f"alias {alias!r} is claimed by two attributes")
        return self

    @property
    def keys(self) -> list[str]:
        """Wire keys in output order."""
        return [a.key for a in self.attributes]

    def attribute(self, key: str) -> Attribute:
        """Look up an attribute by wire key."""
        for attribute in self.attributes:
            if attribute.key == key:
                return attribute
        raise KeyError(key)

    def gate_violation(self, values: dict[str, int | None]) -> str | None:
        """Describe how a complete set of values breaks a gate, or None when it does not."""
        for attribute in self.attributes:
            gate = attribute.gate
            if gate is None:
                continue
            gate_value = values.get(gate.attribute)
            value = values.get(attribute.key)
            if gate_value == gate.null_when and value is not None:
                return (
                    f"{attribute.key} must be null when {gate.attribute} is {gate.null_when}, "
                    f"got {value}"
                )
            if gate_value != gate.null_when and value is None:
                return (
                    f"{attribute.key} may be null only when {gate.attribute} is "
                    f"{gate.null_when}, but {gate.attribute} is {gate_value}"
                )
        return None


_NON_WORD = re.compile(r"[\W_]+")


@lru_cache(maxsize=4096)
def normalise_key(text: str) -> str:
    """Fold a key or display name to lowercase words joined by underscores."""
    return _NON_WORD.sub("_", text.lower()).strip("_")


def alias_forms(attribute: Attribute) -> set[str]:
    """All normalised spellings under which a model may report an attribute."""
    forms = {attribute.key, normalise_key(attribute.name)}
    forms.update(normalise_key(alias) for alias in attribute.aliases)
    return forms
