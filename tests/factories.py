"""Builders of test data shared by the suites (importable; fixtures live in conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

from clinjudge.rubrics import Item


def make_items(count: int, prefix: str = "item") -> list[Item]:
    """Small synthetic items (no clinical content needed for plumbing tests).

    Args:
        count: How many items.
        prefix: Item ids are ``{prefix}-0000``, ``{prefix}-0001``, ...
    """
    return [
        Item(
            id=f"{prefix}-{n:04d}",
            notes=[f"Visit {k}: synthetic note {k} for patient {n}." for k in (1, 2, 3)],
            summary=f"Synthetic summary {n} [Note 1] [Note 3].",
            specialty="Primary Care",
        )
        for n in range(count)
    ]


def write_jsonl(path: Path, items: list[Item]) -> Path:
    """Write items as JSONL and return the path.

    Args:
        path: The file to write.
        items: The items.
    """
    path.write_text("".join(json.dumps(i.model_dump(exclude_none=True)) + "\n" for i in items))
    return path
