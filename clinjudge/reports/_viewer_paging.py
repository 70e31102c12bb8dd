"""Pages of long lists: which rows a page shows."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Paging:
    """One page of a longer list.

    Args:
        page: Page number, from 1.
        per_page: Rows per page.
        total: Rows in the whole list.
    """

    page: int
    per_page: int
    total: int

    @property
    def pages(self) -> int:
        """Number of pages (at least 1)."""
        return max(1, math.ceil(self.total / self.per_page))

    @property
    def offset(self) -> int:
        """Rows before this page."""
        return (self.page - 1) * self.per_page

    @property
    def first(self) -> int:
        """1-based number of the page's first row (0 when empty)."""
        return min(self.offset + 1, self.total)

    @property
    def last(self) -> int:
        """1-based number of the page's last row."""
        return min(self.offset + self.per_page, self.total)


def clamp_page(page: int, total: int, per_page: int) -> Paging:
    """A :class:`Paging` with ``page`` brought inside the list."""
    pages = max(1, math.ceil(total / per_page))
    return Paging(min(max(1, page), pages), per_page, total)


def page_window(page: int, per_page: int) -> Callable[[int], Paging]:
    """Page ``page`` of a list once its length is known: the ``window`` the store's listings
    (:func:`clinjudge.runs.report_reads.run_items` and the like) ask for."""

    def window(total: int) -> Paging:
        return clamp_page(page, total, per_page)

    return window
