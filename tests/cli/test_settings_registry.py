"""`judge run`'s options come from one registry: the flags, their help, the defaults shown and
what reaches the API are derived from it, and `judge run --help` stays light."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from clinjudge._api import DEFAULT_POLL_SECONDS
from clinjudge.cli._app import COMMANDS
from clinjudge.cli._common import FLAGS
from clinjudge.cli._help import PANELS
from clinjudge.cli._options import (
    BATCH_POLL_SECONDS,
    PROGRESS_SECONDS_ENV,
    RUN_SETTINGS,
    SETTINGS,
    Setting,
    signature,
    with_settings,
)
from clinjudge.judges import ModelSettings
from clinjudge.judges.clients._settings import ReasoningEffort
from clinjudge.orchestration import RetryPolicy, RunConfig, run_config_from
from clinjudge.orchestration import _progress as progress
from tests.cli._helpers import invoke
from tests.factories import make_items, write_jsonl

HEAVY = ("duckdb", "autogen_core", "scipy", "litellm", "openai", "pyarrow", "numpy")
# Options that name a part of a section rather than a field (run_config_from knows them).
COMPOSITE = {"config", "role_model", "doclens", "nli", "timeout_retries"}
COMPOSITE |= {"prm", "prm_preset", "prm_url", "prm_device", "prm_section", "ray", "ray_replicas"}


def _model_default(name: str) -> object:
    for model in (RunConfig, ModelSettings, RetryPolicy):
        if name in model.model_fields:
            return model.model_fields[name].default
    raise KeyError(name)


def _as_shown(setting: Setting, default: object) -> str:
    if isinstance(default, bool):
        return setting.name.replace("_", "-") if default else "no-" + setting.name.replace("_", "-")
    return str(default)


@pytest.mark.parametrize(
    "setting",
    [s for s in RUN_SETTINGS if s.scope == "config" and s.name not in COMPOSITE],
    ids=lambda s: s.name,
)
def test_shown_defaults_are_the_models_defaults(setting: Setting) -> None:
    if setting.name in {"data", "db", "model"}:
        return  # no plain default: the config file, $CLINJUDGE_DB, $CLINJUDGE_MODEL
    default = _model_default(setting.name)
    if default is None:  # what applies instead is described ("no budget", "the provider's")
        assert setting.shown is None or not setting.shown[0].isdigit(), setting
    elif setting.name == "cache":
        assert default is False and setting.shown == "off"
    else:
        assert setting.shown == _as_shown(setting, default)


def test_every_run_setting_is_a_field_or_a_known_composite() -> None:
    fields = set(RunConfig.model_fields) | set(ModelSettings.model_fields)
    for setting in RUN_SETTINGS:
        if setting.scope == "config":
            assert setting.name in fields | COMPOSITE, setting.name
    # run_config_from takes every one of them by name (None: not given).
    run_config_from({s.name: None for s in RUN_SETTINGS if s.scope == "config"})


def test_choices_and_constants_match_the_library() -> None:
    allowed = typing.get_args(typing.get_args(SETTINGS["reasoning_effort"].type)[0])
    assert allowed == typing.get_args(ReasoningEffort)
    assert PROGRESS_SECONDS_ENV == progress.PROGRESS_SECONDS_ENV
    assert SETTINGS["poll_interval"].default == BATCH_POLL_SECONDS == DEFAULT_POLL_SECONDS


def test_the_command_is_built_from_the_registry() -> None:
    command = COMMANDS["run"].load("run")
    assert [p.name for p in command.params if p.name != "help"] == [
        s.name for s in sorted(RUN_SETTINGS, key=lambda s: _panel_rank(s.panel))
    ]
    assert list(signature(RUN_SETTINGS).parameters) == [s.name for s in RUN_SETTINGS]
    # Error messages name each setting's flag from the same table.
    assert FLAGS["max_cost"] == "--max-cost" and FLAGS["explanations"] == "--explanations"


def _panel_rank(panel: str) -> int:
    from clinjudge.cli._help import PANEL_ORDER

    return PANEL_ORDER.index(panel)


def test_a_new_setting_is_one_line_from_flag_to_value() -> None:
    got: dict[str, object] = {}
    line = Setting("max_widgets", int | None, PANELS.limits, "Widgets at most.", "3")

    @with_settings((*RUN_SETTINGS[:2], line))
    def command(**values: object) -> None:
        got.update(values)

    app = typer.Typer()
    app.command()(command)
    result = CliRunner().invoke(app, ["--max-widgets", "5", "--mode", "panel"])
    assert result.exit_code == 0, result.output
    assert got == {"rubric": None, "mode": "panel", "max_widgets": 5}
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout
    assert "--max-widgets" in shown and "Widgets at most." in shown and "Budget and" in shown


def test_run_help_imports_no_model_client_and_no_store() -> None:
    code = (
        "import json, sys\n"
        "from clinjudge.cli import main\n"
        "sys.argv = ['judge', 'run', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [*" + repr(HEAVY) + ", 'clinjudge.judges', 'clinjudge.runs']\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []
    assert "--max-cost" in done.stdout


def test_batch_with_cache_is_refused_naming_both_flags(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "none" / "x.duckdb"
    result = invoke(
        "run", "--data", str(data), "--db", str(db), "--model", "openai/gpt-4o-mini",
        "--batch", "--cache", "--dry-run",
    )  # fmt: skip
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "batch and cache do not combine" in message and "(--batch, --cache)" in message
    assert not db.parent.exists()
