"""Providers by name: the built-in ones register themselves on import, others arrive through
the ``clinjudge.providers`` entry point group, and any other name goes through litellm."""

from __future__ import annotations

import importlib.metadata
import logging
from typing import TypeVar

from clinjudge.judges.clients._settings import ModelConfigError, ModelSettings
from clinjudge.judges.clients.providers._contract import Provider

ENTRY_POINT_GROUP = "clinjudge.providers"
"""Entry point group of third-party providers: ``<name> = <module>:<Provider subclass>``."""

log = logging.getLogger(__name__)

P = TypeVar("P", bound=Provider)

_PROVIDERS: dict[str, Provider] = {}
_FALLBACK: list[Provider] = []
_LOADED: set[str] = set()
"""Entry point names already tried (each is loaded at most once per process)."""


def register_provider(provider: P, *, fallback: bool = False) -> P:
    """Serve every name in ``provider.names`` with ``provider``.

    Args:
        provider: The provider.
        fallback: Also serve every name no provider claims (litellm's role).

    Returns:
        The provider, so that a module can keep it under a name.

    Raises:
        ValueError: It has no names, or a name is already served by another provider.
    """
    if not provider.names:
        raise ValueError(f"{type(provider).__name__} names no model prefix")
    for name in provider.names:
        held = _PROVIDERS.get(name)
        if held is not None and type(held) is not type(provider):
            raise ValueError(f"provider {name!r} is already served by {type(held).__name__}")
    _PROVIDERS.update(dict.fromkeys(provider.names, provider))
    if fallback:
        _FALLBACK[:] = [provider]
    return provider


def provider_names() -> list[str]:
    """The names of the providers registered so far (entry points load on first use)."""
    return sorted(_PROVIDERS)


def provider_named(name: str) -> Provider:
    """The provider serving model prefix ``name``.

    Args:
        name: The part of a model before the first slash (any case).

    Raises:
        ModelConfigError: An entry point named ``name`` fails to load or is no provider.
    """
    name = name.lower()
    found = _PROVIDERS.get(name)
    if found is not None:
        return found
    if name not in _LOADED:
        _LOADED.add(name)
        found = _from_entry_point(name)
        if found is not None:
            return found
    if not _FALLBACK:
        raise ModelConfigError(f"no provider serves {name}/ models")
    return _FALLBACK[0]


def provider_for(settings: ModelSettings) -> Provider:
    """The provider of a model (what its prefix names, litellm for unknown names).

    Args:
        settings: The model's settings.
    """
    # The registry is consulted on every call of a run: the table first, nothing else.
    return _PROVIDERS.get(settings.provider) or provider_named(settings.provider)


def _from_entry_point(name: str) -> Provider | None:
    """The provider an installed package offers under ``name``, registered on the way."""
    # Read only for a name no built-in provider serves: scanning the installed packages'
    # metadata costs start-up time that most runs need not pay.
    points = [p for p in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if p.name == name]
    if not points:
        return None
    try:
        loaded = points[0].load()
    except Exception as exc:  # noqa: BLE001 - any import failure of a plugin is a config error
        raise ModelConfigError(
            f"provider {name}: entry point {points[0].value} failed to load: {exc}"
        ) from exc
    provider = loaded() if isinstance(loaded, type) else loaded
    if not isinstance(provider, Provider):
        raise ModelConfigError(
            f"provider {name}: entry point {points[0].value} is no clinjudge Provider"
        )
    if provider.names:
        register_provider(provider)
    # The entry point's name is the prefix users write: it is served whatever the class says.
    _PROVIDERS[name] = provider
    log.debug("provider %s loaded from entry point %s", name, points[0].value)
    return provider
