"""Find and load personas: the built-in sets shipped as package data, or a user's file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from clinjudge._util.datafile import parse_data_mapping, read_data_text
from clinjudge.errors import UserError, validation_problems
from clinjudge.personas._schema import Persona, PersonaSet

_SUFFIXES = (".yaml", ".yml", ".json")


class PersonaError(UserError):
    """A persona file could not be read, does not match the schema, or a name is unknown."""


def _builtin_dir() -> resources.abc.Traversable:
    return resources.files("clinjudge.personas") / "data"


def builtin_persona_sets() -> list[str]:
    """Names of the persona sets shipped with clinjudge."""
    return sorted(
        entry.name.rsplit(".", 1)[0]
        for entry in _builtin_dir().iterdir()
        if entry.name.endswith(_SUFFIXES)
    )


def _where(loc: tuple[Any, ...], data: Any) -> str:
    """Dotted field path; a list index into ``personas`` also names the persona."""
    where = ".".join(str(part) for part in loc) or "(top level)"
    if len(loc) >= 2 and loc[0] == "personas" and isinstance(loc[1], int):
        personas = data.get("personas") if isinstance(data, dict) else None
        if isinstance(personas, list) and loc[1] < len(personas):
            entry = personas[loc[1]]
            name = entry.get("name") if isinstance(entry, dict) else None
            if isinstance(name, str) and name:
                where += f" (persona {name!r})"
    return where


def _format_validation_error(source: str, what: str, error: ValidationError, data: Any) -> str:
    lines = [f"{source}: not a valid {what}"]
    lines += [
        f"  {line}" for line in validation_problems(error, locate=lambda loc: _where(loc, data))
    ]
    return "\n".join(lines)


def parse_persona_text(text: str, source: str) -> PersonaSet:
    """Parse YAML or JSON persona text and validate it.

    The text holds either a persona set (a mapping with a ``personas`` list) or a single
    persona; a single persona becomes a set of one, named after it.

    Args:
        text: File contents.
        source: Name used in error messages (a path or a built-in file name).
    """
    data = parse_data_mapping(
        text,
        source,
        PersonaError,
        "a persona file (a persona set with a `personas` list, or a single persona)",
    )
    if "personas" in data:
        try:
            return PersonaSet.model_validate(data)
        except ValidationError as exc:
            raise PersonaError(_format_validation_error(source, "persona set", exc, data)) from exc
    try:
        persona = Persona.model_validate(data)
    except ValidationError as exc:
        raise PersonaError(_format_validation_error(source, "persona", exc, data)) from exc
    return PersonaSet(name=persona.name, description=persona.description, personas=[persona])


def load_persona_file(path: str | Path) -> PersonaSet:
    """Load and validate a persona set (or a single persona) from a YAML or JSON file.

    Args:
        path: The file to read.
    """
    return parse_persona_text(read_data_text(path, PersonaError), str(path))


def _load_builtin(name: str) -> PersonaSet:
    for suffix in _SUFFIXES:
        entry = _builtin_dir() / f"{name}{suffix}"
        if entry.is_file():
            return parse_persona_text(entry.read_text(encoding="utf-8"), entry.name)
    raise PersonaError(f"unknown built-in persona set {name!r}")  # pragma: no cover


def _looks_like_path(text: str) -> bool:
    path = Path(text)
    return path.suffix.lower() in _SUFFIXES or path.exists()


def load_persona_set(name_or_path: str | Path) -> PersonaSet:
    """Load a built-in persona set by name, or a persona file by path.

    Args:
        name_or_path: A built-in set such as ``practice`` or ``scoring``, or a YAML/JSON file.
    """
    text = str(name_or_path)
    if isinstance(name_or_path, str) and text in builtin_persona_sets():
        return _load_builtin(text)
    if isinstance(name_or_path, Path) or _looks_like_path(text):
        return load_persona_file(name_or_path)
    raise PersonaError(
        f"unknown persona set {text!r}; built-in sets: {', '.join(builtin_persona_sets())}, "
        "or give a file path"
    )


def builtin_personas() -> dict[str, Persona]:
    """Every built-in persona by name, across all built-in sets (names are unique)."""
    found: dict[str, Persona] = {}
    owner: dict[str, str] = {}
    for set_name in builtin_persona_sets():
        for persona in _load_builtin(set_name).personas:
            if persona.name in found:  # pragma: no cover - guarded by the tests
                raise PersonaError(
                    f"built-in persona {persona.name!r} appears in both "
                    f"{owner[persona.name]!r} and {set_name!r}"
                )
            found[persona.name] = persona
            owner[persona.name] = set_name
    return found


def _unknown(name: str) -> PersonaError:
    personas = ", ".join(sorted(builtin_personas()))
    sets = ", ".join(builtin_persona_sets())
    return PersonaError(
        f"unknown persona {name!r}; built-in personas: {personas}; built-in sets: {sets}; "
        "or give a file path"
    )


def get_persona(name: str) -> Persona:
    """Look up one built-in persona by name.

    Args:
        name: A persona name such as ``high_scorer``.
    """
    persona = builtin_personas().get(name)
    if persona is None:
        raise _unknown(name)
    return persona


def resolve_personas(spec: str | Path) -> PersonaSet:
    """Turn a command-line persona spec into a persona set.

    Args:
        spec: A built-in set name (``scoring``), a persona file path, a single built-in persona
            name, or a comma list of built-in persona names (``high_scorer,low_scorer``). A
            comma list becomes a set named ``custom``; its moderator is the listed persona with
            role moderator, if any.
    """
    if isinstance(spec, Path):
        return load_persona_file(spec)
    text = spec.strip()
    if not text:
        raise PersonaError("empty persona spec; give a set name, a file path or persona names")
    if text in builtin_persona_sets():
        return _load_builtin(text)
    if "," not in text and _looks_like_path(text):
        return load_persona_file(text)
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise PersonaError(f"no persona names in {spec!r}")
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise PersonaError(f"persona spec {spec!r} names {duplicated} more than once")
    known = builtin_personas()
    for name in names:
        if name not in known:
            raise _unknown(name)
    chosen = [known[name] for name in names]
    if len(chosen) == 1:
        persona = chosen[0]
        return PersonaSet(name=persona.name, description=persona.description, personas=chosen)
    try:
        return PersonaSet(
            name="custom",
            description=f"Personas chosen by name: {', '.join(names)}",
            personas=chosen,
        )
    except ValidationError as exc:
        raise PersonaError(_format_validation_error(repr(spec), "persona list", exc, {})) from exc


def load_personas(spec: str | Path) -> list[Persona]:
    """Personas for a command-line spec, in order; see :func:`resolve_personas`."""
    return list(resolve_personas(spec).personas)
