"""The record a judge grades: source notes, the AI output, and context."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class SourceNote(BaseModel):
    """One source note; ``id`` defaults to its 1-based position."""

    model_config = ConfigDict(extra="forbid")

    id: str
    text: str = Field(min_length=1)


class Item(BaseModel):
    """One thing to judge.

    Args:
        id: Unique id within a run.
        notes: Source notes, in the order the summary cites them.
        summary: The AI-written text under evaluation.
        specialty: Specialty of the clinician the summary is for.
        reference: Optional gold/reference text.
        vendor: Optional name of the system that wrote the summary.
        meta: Free-form extra fields, kept with the item.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    notes: list[SourceNote] = Field(default_factory=list)
    summary: str = Field(min_length=1)
    specialty: str | None = None
    reference: str | None = None
    vendor: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    @field_validator("notes", mode="before")
    @classmethod
    def _notes_from_strings(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        for note in value:
            if isinstance(note, str) or (
                isinstance(note, dict) and isinstance(note.get("id"), int)
            ):
                break
        else:
            return value  # nothing to convert (notes read back from a store, for every sample)
        notes = []
        for position, note in enumerate(value, start=1):
            if isinstance(note, str):
                notes.append({"id": str(position), "text": note})
            elif isinstance(note, dict) and isinstance(note.get("id"), int):
                notes.append({**note, "id": str(note["id"])})
            else:
                notes.append(note)
        return notes
