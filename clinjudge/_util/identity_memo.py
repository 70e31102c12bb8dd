"""Values worked out once per object, for objects that never change after they are made.

Rubrics and reply schemas are built through validation and never edited afterwards (a change
makes a new object), so the object's identity is a cheap, exact key. Each entry holds its
object, so an id is never reused while the entry lives; a full memo starts over.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class IdentityMemo(Generic[V]):
    """A bounded memo keyed by an object's identity and a few plain arguments.

    Args:
        size: Entries kept before the memo is emptied.
    """

    def __init__(self, size: int = 64) -> None:
        self._entries: dict[tuple[int, Hashable], tuple[object, V]] = {}
        self._size = size

    def get(self, owner: object, extra: Hashable, compute: Callable[[], V]) -> V:
        """The value for ``(owner, extra)``, computed on the first request.

        Args:
            owner: The object the value comes from (compared by identity).
            extra: Further plain arguments the value depends on.
            compute: Works the value out.
        """
        key = (id(owner), extra)
        known = self._entries.get(key)
        if known is not None and known[0] is owner:
            return known[1]
        value = compute()
        if len(self._entries) >= self._size:
            self._entries.clear()
        self._entries[key] = (owner, value)
        return value
