"""Reading the YAML/JSON data files that define rubrics and personas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_data_text(path: str | Path, error: type[Exception]) -> str:
    """The text of a data file, or ``error`` naming the file when it cannot be read.

    Args:
        path: The file.
        error: Exception class to raise.
    """
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from exc


def parse_data_mapping(
    text: str, source: str, error: type[Exception], shape: str
) -> dict[str, Any]:
    """Parse YAML (or JSON when ``source`` ends in .json) that must hold a mapping.

    Args:
        text: File contents.
        source: Name used in error messages.
        error: Exception class to raise.
        shape: What the mapping should be, for the message (e.g. "a rubric file").
    """
    if source.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise error(f"{source}: cannot parse: {exc}") from exc
    else:
        # Only a YAML file pays for the parser (#39: the read-only commands read the rubric
        # stored with the run, as JSON).
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise error(f"{source}: cannot parse: {exc}") from exc
    if not isinstance(data, dict):
        raise error(f"{source}: {shape} must hold a mapping at the top level")
    return data
