"""One place that turns a config file, explicit options and the environment into a RunConfig.

The CLI and the Python API both call :func:`run_config_from`; every default is defined once, on
:class:`RunConfig` and :class:`ModelSettings`, except the judge model, whose default comes from
``$CLINJUDGE_MODEL`` and else the simulated ``mock/judge`` provider (logged, never silent).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

import yaml
from pydantic import BaseModel

from clinjudge.judges import ModelSettings
from clinjudge.judges.clients import provider_named
from clinjudge.judges.workflows import registered_modes
from clinjudge.orchestration._config import ConfigError, RunConfig, build_config, load_config_file

logger = logging.getLogger(__name__)

DEFAULT_MODEL_ENV = "CLINJUDGE_MODEL"
FALLBACK_MODEL = "mock/judge"

# Options that name a part of a nested section rather than a RunConfig or ModelSettings field.
_PRM_OPTIONS = {
    "prm": "model",
    "prm_preset": "preset",
    "prm_url": "url",
    "prm_device": "device",
    "prm_section": "section",
}
# Options that put a model on Ray: the PRM (``--prm``) and every hf/ judge model.
_RAY_OPTIONS = ("ray", "ray_replicas")
# Settings only one mode reads, by mode: {key in the mode's nested section: RunConfig field}.
# Flat names (``panel_aggregate``, ``rounds``...) and nested sections (``panel: {aggregate:
# mean}``, ``magentic: {rounds: 2}``) set the same fields; either given in another mode is an
# error, so a setting never goes silently unused.
MODE_SECTIONS: dict[str, dict[str, str]] = {
    "panel": {"aggregate": "panel_aggregate"},
    "magentic": {
        "rounds": "rounds",
        "max_turns": "max_turns",
        "max_stalls": "max_stalls",
        "blind_first_round": "blind_first_round",
        "planning": "planning",
    },
}
# RunConfig field -> (its mode, its key in the mode's section).
_MODE_FIELDS = {f: (mode, key) for mode, keys in MODE_SECTIONS.items() for key, f in keys.items()}
# Options that set one key of the ``retry`` section: {option: key}.
_RETRY_OPTIONS = {"timeout_retries": "timeout_retries"}
_SPECIAL = {
    "config",
    "role_model",
    "doclens",
    "nli",
    *_PRM_OPTIONS,
    *_RAY_OPTIONS,
    *MODE_SECTIONS,
    *_RETRY_OPTIONS,
}


def default_model() -> str:
    """The judge model when none is given: ``$CLINJUDGE_MODEL``, else ``mock/judge``."""
    return os.environ.get(DEFAULT_MODEL_ENV) or FALLBACK_MODEL


def doclens_settings(
    settings: Mapping[str, Any], nli: str | None, pairs: Iterable[str] | Mapping[str, Any]
) -> dict[str, Any]:
    """The ``doclens`` section with ``KEY=VALUE`` pairs and an NLI model on top.

    Args:
        settings: The config file's ``doclens`` section.
        nli: An NLI checkpoint replacing the LLM for entailment, if given.
        pairs: ``KEY=VALUE`` texts (values are YAML scalars: 1 is a number, false a boolean),
            or a mapping of settings.
    """
    merged = dict(settings)
    if isinstance(pairs, Mapping):
        merged.update(pairs)
        pairs = ()
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"doclens setting {pair!r}: expected KEY=VALUE, e.g. citation_base=1")
        merged[key.strip()] = yaml.safe_load(value.strip()) if value.strip() else None
    if nli is not None:
        merged["nli_model"] = nli
    return merged


def retry_settings(settings: Any, options: Mapping[str, Any]) -> Any:
    """The ``retry`` section with explicit options (``timeout_retries``) on top.

    Args:
        settings: The ``retry`` value given so far (a mapping, a RetryPolicy, or None).
        options: Retry keys to values (None: not given).
    """
    given = {k: v for k, v in options.items() if v is not None}
    if not given:
        return settings
    if isinstance(settings, BaseModel):
        settings = settings.model_dump()
    return {**dict(settings or {}), **given}


def prm_settings(settings: Any, options: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``prm`` section (a mapping, or just the model) with explicit options on top.

    Args:
        settings: The config file's ``prm`` value.
        options: ``model``, ``preset``, ``url``, ``device``, ``section`` (None: not given).
    """
    merged = {"model": settings} if isinstance(settings, str) else dict(settings or {})
    merged.update({k: v for k, v in options.items() if v is not None})
    if merged and "model" not in merged:
        raise ConfigError("PRM settings (preset, url, device, section, ray) need a PRM model "
                          "(prm)")  # fmt: skip
    return merged or None


def _on_ray(settings: Mapping[str, Any]) -> bool:
    # Only in-process models (the hf/ judge) run as Ray replicas with --ray.
    return provider_named(str(settings.get("model", "")).split("/", 1)[0]).in_process


def place_ray(
    ray: Mapping[str, Any],
    prm: dict[str, Any] | None,
    judge: dict[str, Any],
    roles: dict[str, Any],
) -> None:
    """Put ``--ray`` and ``--ray-replicas`` where they apply: the PRM (``--prm``) and every
    ``hf/`` model of the run (the judge's, the roles'); in place.

    Args:
        ray: ``ray`` and ``ray_replicas`` given as options (None: not given).
        prm: The ``prm`` section (None: no PRM).
        judge: The judge's model settings.
        roles: Model settings per agent or role.

    Raises:
        ConfigError: No PRM and no ``hf/`` model: nothing there runs on Ray.
    """
    given = {k: v for k, v in ray.items() if v is not None}
    if not given:
        return
    local = [s for s in (judge, *roles.values()) if isinstance(s, dict) and _on_ray(s)]
    if prm is None and not local:
        raise ConfigError(f"--ray runs --prm scoring and hf/ judge models on Ray, and this "
                          f"run has neither (judge model {judge.get('model')}); API judges "
                          "scale with --shard instead")  # fmt: skip
    if prm is not None:
        prm.update(given)
    for target in local:
        # --ray-replicas alone sizes what already runs on Ray (e.g. the file's judge.ray).
        if "ray" in given or target.get("ray") is not None:
            target.update(given)


def role_models(
    roles: Mapping[str, Any], pairs: Iterable[str], judge: Mapping[str, Any]
) -> dict[str, Any]:
    """Merge ``AGENT=provider/model`` pairs into the roles section.

    A pair gives the agent the judge's settings with another model (and the judge's base URL
    only when the provider is the same).

    Args:
        roles: The config file's ``roles`` section.
        pairs: ``AGENT=provider/model`` texts.
        judge: The judge's settings.
    """
    merged = dict(roles)
    for pair in pairs:
        agent, sep, model = pair.partition("=")
        if not sep or not agent.strip() or not model.strip():
            raise ConfigError(f"role model {pair!r}: expected AGENT=provider/model")
        settings = {**judge, **dict(merged.get(agent.strip()) or {}), "model": model.strip()}
        if model.split("/", 1)[0] != str(judge.get("model", "")).split("/", 1)[0]:
            settings.pop("base_url", None)
        if not _on_ray(settings):  # the judge's Ray settings are for hf/ models only
            settings.pop("ray", None)
            settings.pop("ray_replicas", None)
        merged[agent.strip()] = settings
    return merged


def _flatten_sections(settings: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Mode-specific settings given in one place (a file or the options), flat and nested
    sections merged into RunConfig fields; the same field given both ways is an error.

    Args:
        settings: Flat fields and ``panel``/``magentic`` sections (None values: not given).
        where: What the settings came from, for messages.
    """
    given: dict[str, Any] = {}
    for mode, keys in MODE_SECTIONS.items():
        section = settings.get(mode)
        if section is None:
            continue
        if not isinstance(section, Mapping):
            raise ConfigError(
                f"{where}: {mode} must be a section of {mode}-mode settings "
                f"({', '.join(keys)}), not {type(section).__name__}"
            )
        for key, value in section.items():
            if key not in keys:
                raise ConfigError(
                    f"{where}: unknown setting {mode}.{key}; {mode} settings are {', '.join(keys)}"
                )
            if value is not None:
                given[keys[key]] = value
    for field in given:
        if settings.get(field) is not None:
            mode, key = _MODE_FIELDS[field]
            raise ConfigError(f"{where}: {field} and {mode}.{key} are the same setting; give one")
    return given


def _check_mode_settings(mode: str, given: Mapping[str, str]) -> None:
    """Reject settings of another mode given explicitly (defaults are never checked).

    Args:
        mode: The run's mode.
        given: Each RunConfig field given explicitly, with what it came from (for messages).
    """
    if mode not in registered_modes():
        return  # validation names the unknown mode and the registered ones
    for field, where in given.items():
        owner, key = _MODE_FIELDS.get(field, (mode, ""))
        if owner != mode:
            raise ConfigError(
                f"{where}: {field} ({owner}.{key}) applies to {owner} mode only, but the mode is "
                f"{mode!r}; drop it or set mode to {owner}"
            )


def _split_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Explicit options as (top-level settings, judge model settings); None means not given."""
    top_fields = set(RunConfig.model_fields)
    judge_fields = set(ModelSettings.model_fields) - top_fields
    top: dict[str, Any] = {}
    judge: dict[str, Any] = {}
    for name, value in options.items():
        if name in _SPECIAL or value is None:
            continue
        if name in top_fields:
            top[name] = str(value) if isinstance(value, PurePath) else value
        elif name in judge_fields:
            judge[name] = value
        else:
            raise ConfigError(
                f"unknown setting {name!r}; run settings are {', '.join(sorted(top_fields))}; "
                f"judge model settings are {', '.join(sorted(judge_fields))}"
            )
    return top, judge


def run_config_from(options: Mapping[str, Any], *, source: str | None = None) -> RunConfig:
    """Build and validate a run's settings: config file, then explicit options, then defaults.

    Args:
        options: Settings by name, as ``judge run``'s options are named (``rubric``, ``mode``,
            ``data``, ``model``, ``samples``, ``role_model``, ``doclens``, ``prm``,
            ``timeout_retries``...); None means not given. ``config`` names a YAML file read
            first. Mode-specific settings go flat (``panel_aggregate``, ``rounds``) or nested
            (``panel={"aggregate": "mean"}``, ``magentic={"rounds": 2}``); given for another
            mode, they are an error.
        source: What the settings came from, for messages (default: the config file or
            "settings").
    """
    config_path = options.get("config")
    file_settings = load_config_file(config_path) if config_path else {}
    file_name = str(config_path)
    file_modal = _flatten_sections(file_settings, file_name)
    file_settings = {k: v for k, v in file_settings.items() if k not in MODE_SECTIONS}
    file_settings.update(file_modal)
    top, judge = _split_options(options)
    options_name = source if source and not config_path else "options"
    top.update(_flatten_sections(options, options_name))
    merged = {**file_settings, **top}
    # Present in a file or not None in the options: given explicitly.
    where = {**dict.fromkeys(file_settings, file_name), **dict.fromkeys(top, options_name)}
    mode = str(merged.get("mode", RunConfig.model_fields["mode"].default))
    _check_mode_settings(mode, where)
    judge_settings = {**dict(merged.get("judge") or {}), **judge}
    if "model" not in judge_settings:
        judge_settings["model"] = default_model()
        if judge_settings["model"] == FALLBACK_MODEL:
            logger.warning(
                "no judge model given (model, judge.model or $%s): using the simulated %s "
                "provider; its scores are not judgments",
                DEFAULT_MODEL_ENV,
                FALLBACK_MODEL,
            )
    merged["judge"] = judge_settings
    merged["doclens"] = doclens_settings(
        merged.get("doclens") or {}, options.get("nli"), options.get("doclens") or ()
    )
    merged["prm"] = prm_settings(
        merged.get("prm"), {key: options.get(name) for name, key in _PRM_OPTIONS.items()}
    )
    merged["roles"] = role_models(
        merged.get("roles") or {}, options.get("role_model") or (), judge_settings
    )
    place_ray({name: options.get(name) for name in _RAY_OPTIONS}, merged["prm"],
              judge_settings, merged["roles"])  # fmt: skip
    retry = retry_settings(
        merged.get("retry"), {key: options.get(name) for name, key in _RETRY_OPTIONS.items()}
    )
    if retry is not None:
        merged["retry"] = retry
    return build_config(source or str(config_path or "settings"), merged)
