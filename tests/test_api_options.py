"""The API's run options are declared (``Unpack`` of a ``TypedDict``) and stay in step with what
the settings code accepts at run time."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import pytest

import clinjudge
from clinjudge.judges.clients import ModelSettings
from clinjudge.orchestration import RunConfig
from clinjudge.orchestration._run_settings import _SPECIAL


def test_run_options_name_every_setting_run_config_from_takes() -> None:
    # `data` is the functions' own first parameter, never an option.
    accepted = (set(RunConfig.model_fields) | set(ModelSettings.model_fields) | _SPECIAL) - {"data"}
    declared = set(clinjudge.RunOptions.__optional_keys__)
    assert declared == accepted, (
        f"declared but not accepted: {sorted(declared - accepted)}; "
        f"accepted but not declared: {sorted(accepted - declared)}"
    )
    assert clinjudge.RunOptions.__required_keys__ == frozenset()
    assert set(clinjudge.ProbeOptions.__optional_keys__) == declared | {"perturber"}


@pytest.mark.parametrize(
    ("function", "options"),
    [
        (clinjudge.evaluate, "RunOptions"),
        (clinjudge.evaluate_async, "RunOptions"),
        (clinjudge.estimate, "RunOptions"),
        (clinjudge.audit, "RunOptions"),
        (clinjudge.audit_async, "RunOptions"),
        (clinjudge.estimate_audit, "RunOptions"),
        (clinjudge.probe, "ProbeOptions"),
        (clinjudge.probe_async, "ProbeOptions"),
        (clinjudge.estimate_probe, "ProbeOptions"),
        (clinjudge.score_prm, "PRMOptions"),
        (clinjudge.best_of_n_prm, "PRMOptions"),
        (clinjudge.evaluate_prm, "PRMOptions"),
    ],
)
def test_keyword_options_are_typed(function: Callable[..., Any], options: str) -> None:
    # What a type checker reads: **options: Unpack[<the TypedDict>].
    hint = typing.get_type_hints(function)["options"]
    assert typing.get_origin(hint) is typing.Unpack
    assert typing.get_args(hint) == (getattr(clinjudge, options),)


def test_an_unknown_option_keeps_its_run_time_message(tmp_path) -> None:
    with pytest.raises(clinjudge.UserError, match="unknown setting 'rubrc'"):
        clinjudge.estimate(tmp_path / "items.jsonl", rubrc="pdsqi9")  # type: ignore[call-arg]
