"""Pydantic schema for personas: the judges that sit on a panel or in a MagenticOne team."""

from __future__ import annotations

import hashlib
import json
import keyword
import re
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

# AutoGen needs participant names that are Python identifiers; OpenAI's message `name` field
# (which AutoGen fills from the agent name) allows at most 64 characters.
NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
NAME_MAX_LENGTH = 64
# Names AutoGen or the chat API already use for other speakers.
RESERVED_NAMES = frozenset({"user", "assistant", "system", "tool", "orchestrator"})
_JSON_WORD = re.compile(r"\bJSON\b", re.IGNORECASE)


class Stance(str, Enum):
    """How a persona leans when it scores."""

    neutral = "neutral"
    lenient = "lenient"
    strict = "strict"
    moderator = "moderator"


class Role(str, Enum):
    """What a persona does in a team."""

    member = "member"
    moderator = "moderator"


class Persona(BaseModel):
    """One judge persona.

    Args:
        name: AutoGen agent name: a lowercase Python identifier such as
            ``analytical_perfectionist``. Unique across every persona a run uses.
        display_name: Name shown to people.
        description: One line that tells the MagenticOne orchestrator what this persona
            contributes; the orchestrator reads it when it picks the next speaker.
        system_message: The persona's instructions. It must tell the persona to end every
            reply with the rubric JSON object.
        stance: How the persona leans when scoring.
        role: ``member`` (default) or ``moderator``.
    """

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(pattern=NAME_PATTERN, max_length=NAME_MAX_LENGTH)
    display_name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    system_message: str = Field(min_length=1)
    stance: Stance
    role: Role = Role.member

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        if keyword.iskeyword(name) or keyword.issoftkeyword(name):
            raise ValueError(f"{name!r} is a Python keyword; AutoGen needs a plain identifier")
        if name in RESERVED_NAMES:
            raise ValueError(
                f"{name!r} is reserved for another speaker; reserved names: "
                f"{', '.join(sorted(RESERVED_NAMES))}"
            )
        return name

    @field_validator("description")
    @classmethod
    def _one_line(cls, description: str) -> str:
        if "\n" in description or "\r" in description:
            raise ValueError("the description must be a single line")
        return description

    @field_validator("system_message")
    @classmethod
    def _asks_for_json(cls, system_message: str) -> str:
        if not _JSON_WORD.search(system_message):
            raise ValueError(
                "the system message must tell the persona to end every reply with one JSON "
                "object holding its score for every rubric key (it never mentions JSON)"
            )
        return system_message

    @property
    def is_moderator(self) -> bool:
        """Whether this persona moderates its team."""
        return self.role is Role.moderator

    def team_line(self) -> str:
        """The line AutoGen's orchestrator sees for this participant: ``name: description``."""
        return f"{self.name}: {self.description}"

    def agent_kwargs(self) -> dict[str, str]:
        """Keyword arguments for ``autogen_agentchat.agents.AssistantAgent`` (no model client)."""
        return {
            "name": self.name,
            "description": self.description,
            "system_message": self.system_message,
        }

    def fingerprint(self) -> str:
        """Short SHA-256 of the persona's content, for recording which wording a run used."""
        return _digest(self.model_dump(mode="json"))


class PersonaSet(BaseModel):
    """A named group of personas that judge together.

    Args:
        name: Short identifier used on the command line.
        version: Version string; bump it whenever wording changes.
        description: What the set is for.
        source: Where the set's design comes from.
        personas: The personas, in speaking order; names must be unique.
        moderator: Name of the persona that moderates, or None. When left out and exactly one
            persona has role ``moderator``, that persona is the moderator.
    """

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    version: str = "1.0.0"
    description: str
    source: str | None = None
    personas: list[Persona]
    moderator: str | None = Field(default=None, validate_default=True)

    @field_validator("personas")
    @classmethod
    def _unique_names(cls, personas: list[Persona]) -> list[Persona]:
        if not personas:
            raise ValueError("a persona set needs at least one persona")
        names = [p.name for p in personas]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"duplicate persona names: {duplicated}")
        return personas

    @field_validator("moderator")
    @classmethod
    def _check_moderator(cls, moderator: str | None, info: ValidationInfo) -> str | None:
        personas: list[Persona] | None = info.data.get("personas")
        if personas is None:  # the personas field already failed; its error says why
            return moderator
        flagged = [p.name for p in personas if p.is_moderator]
        if moderator is None:
            if len(flagged) > 1:
                raise ValueError(f"several personas have role moderator: {flagged}; keep one")
            return flagged[0] if flagged else None
        names = [p.name for p in personas]
        if moderator not in names:
            raise ValueError(
                f"moderator {moderator!r} is not a persona of this set; personas: {names}"
            )
        others = [n for n in flagged if n != moderator]
        if others:
            raise ValueError(
                f"moderator is {moderator!r} but {others} also have role moderator; keep one"
            )
        if moderator not in flagged:
            raise ValueError(
                f"persona {moderator!r} is named moderator, so set its role to moderator"
            )
        return moderator

    @property
    def names(self) -> list[str]:
        """Persona names in speaking order."""
        return [p.name for p in self.personas]

    @property
    def members(self) -> list[Persona]:
        """Personas other than the moderator."""
        return [p for p in self.personas if p.name != self.moderator]

    def persona(self, name: str) -> Persona:
        """Look up a persona by name."""
        for persona in self.personas:
            if persona.name == name:
                return persona
        raise KeyError(name)

    def moderator_persona(self) -> Persona | None:
        """The moderating persona, or None."""
        return None if self.moderator is None else self.persona(self.moderator)

    def team_description(self) -> str:
        """One ``name: description`` line per persona, as AutoGen's orchestrator sees the team."""
        return "\n".join(p.team_line() for p in self.personas)

    def fingerprint(self) -> str:
        """Short SHA-256 of the set's content, for recording which wording a run used."""
        return _digest(self.model_dump(mode="json"))


def _digest(data: Any) -> str:
    canonical = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
