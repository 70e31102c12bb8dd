"""Personas for judge panels (practice styles, scoring stances, moderator).

Filled in by the panel work (SPEC §4); nothing here yet.
"""

__all__: list[str] = []
