"""Timestamps as the run store keeps them."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    """Current UTC time."""
    return datetime.now(UTC)
