"""Find and load rubrics: the built-in ones shipped as package data, or a user's file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from clinjudge._util.datafile import parse_data_mapping, read_data_text
from clinjudge.errors import UserError, validation_problems
from clinjudge.rubrics._schema import Rubric


class RubricError(UserError):
    """A rubric file could not be read or does not match the schema."""


def _builtin_dir() -> resources.abc.Traversable:
    return resources.files("clinjudge.rubrics") / "data"


def builtin_rubric_names() -> list[str]:
    """Names of the rubrics shipped with clinjudge."""
    names = []
    for entry in _builtin_dir().iterdir():
        if entry.name.endswith((".yaml", ".yml", ".json")):
            names.append(entry.name.rsplit(".", 1)[0])
    return sorted(names)


def _format_validation_error(source: str, error: ValidationError) -> str:
    problems = validation_problems(error)
    return "\n".join([f"{source}: not a valid rubric", *(f"  {p}" for p in problems)])


def parse_rubric_text(text: str, source: str) -> Rubric:
    """Parse YAML or JSON rubric text and validate it.

    Args:
        text: File contents.
        source: Name used in error messages (a path or a built-in name).
    """
    data = parse_data_mapping(text, source, RubricError, "a rubric file")
    try:
        return Rubric.model_validate(data)
    except ValidationError as exc:
        raise RubricError(_format_validation_error(source, exc)) from exc


def load_rubric_file(path: str | Path) -> Rubric:
    """Load and validate a rubric from a YAML or JSON file.

    Args:
        path: The file to read.
    """
    return parse_rubric_text(read_data_text(path, RubricError), str(path))


def load_rubric(name_or_path: str) -> Rubric:
    """Load a built-in rubric by name, or a rubric file by path.

    Args:
        name_or_path: A built-in name such as ``pdsqi9`` or a path to a YAML/JSON file.
    """
    if name_or_path in builtin_rubric_names():
        for suffix in (".yaml", ".yml", ".json"):
            entry = _builtin_dir() / f"{name_or_path}{suffix}"
            if entry.is_file():
                return parse_rubric_text(entry.read_text(encoding="utf-8"), entry.name)
    path = Path(name_or_path)
    if path.suffix.lower() in {".yaml", ".yml", ".json"} or path.exists():
        return load_rubric_file(path)
    known = ", ".join(builtin_rubric_names())
    raise RubricError(
        f"unknown rubric {name_or_path!r}; built-in rubrics: {known}, or give a file path"
    )
