"""Personas for judge panels: practice styles, scoring stances and a moderator (SPEC §4).

Built-in sets ship as YAML package data (``practice`` and ``scoring``, after Table 7 of the
LLM-as-a-judge study, in our own words); users add their own from YAML or JSON files.
"""

from clinjudge.personas._registry import (
    PersonaError,
    builtin_persona_sets,
    builtin_personas,
    load_persona_file,
    load_persona_set,
    load_personas,
    resolve_personas,
)
from clinjudge.personas._schema import Persona, PersonaSet

__all__ = [
    "Persona",
    "PersonaError",
    "PersonaSet",
    "builtin_persona_sets",
    "builtin_personas",
    "load_persona_file",
    "load_persona_set",
    "load_personas",
    "resolve_personas",
]
