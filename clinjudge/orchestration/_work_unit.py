"""One sample of one item: the unit of work the runner takes and the pending-work reader
yields. Its own module so that the runner and the reader each import it without importing each
other.
"""

from __future__ import annotations

from dataclasses import dataclass

from clinjudge.rubrics import Item


@dataclass(frozen=True)
class WorkUnit:
    """One sample of one item."""

    item: Item
    sample: int
