"""`--help` that answers: defaults shown, panels, no `<bool>` labels, lazy imports."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from clinjudge.cli._app import COMMANDS
from clinjudge.runs import RunStore
from tests.cli._helpers import invoke

HEAVY = ("duckdb", "autogen_core", "scipy", "litellm", "openai", "pyarrow", "numpy")


def _help(*args: str) -> str:
    result = invoke(*args, "--help")
    assert result.exit_code == 0, result.stderr
    return " ".join(result.stdout.replace("│", " ").split())


@pytest.mark.parametrize(
    ("option", "default"),
    [
        ("--samples", "1"),
        ("--mode", "single"),
        ("--concurrency", "8"),
        ("--rubric", "pdsqi9"),
        ("--max-repairs", "1"),
        ("--temperature", "0.01"),
        ("--personas", "scoring"),
        ("--allow-failures", "0"),
        ("--progress-every", "30"),
    ],
)
def test_run_help_shows_defaults(option: str, default: str) -> None:
    text = _help("run")
    text = text[text.index("╭─ Data") :]  # the option list, not the description above it
    after = text[text.index(option + " ") :]
    nxt = after.find(" --", len(option))
    assert f"[default: {default}]" in after[: nxt if nxt > 0 else None]


def test_run_help_has_panels_and_no_stray_labels() -> None:
    text = _help("run")
    panels = [
        "Data",
        "Model",
        "Sampling",
        "Panel / magentic",
        "DocLens",
        "PRM",
        "Budget and limits",
        "Output",
    ]
    positions = [text.index(f"╭─ {p} ─") for p in panels]
    assert positions == sorted(positions)
    assert "<bool>" not in text
    assert "[default: (" not in text
    assert "$CLINJUDGE_DB" in text and "runs/clinjudge.duckdb" in text


def _all_command_paths() -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = [()]
    for name, lazy in COMMANDS.items():
        command = lazy.load(name)
        paths.append((name,))
        paths.extend((name, sub) for sub in getattr(command, "commands", {}))
    return paths


def test_no_bool_labels_anywhere() -> None:
    for path in _all_command_paths():
        assert "<bool>" not in _help(*path), path


def test_listing_summaries_match_each_commands_help() -> None:
    for name, lazy in COMMANDS.items():
        command = lazy.load(name)
        first = inspect.cleandoc(command.help or "").split("\n\n")[0]
        assert " ".join(first.split()) == " ".join(lazy.summary.split()), name


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_no_heavy_library(args: list[str]) -> None:
    code = (
        "import json, sys\n"
        "from clinjudge.cli import main\n"
        f"sys.argv = ['judge', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("name", ["run", "audit"])
def test_every_option_sits_in_a_named_panel(name: str) -> None:
    command = COMMANDS[name].load(name)
    loose = [p.name for p in command.params if not getattr(p, "rich_help_panel", None)]
    if name == "run":
        assert loose == []
    text = _help(name)
    options_panel = text[text.index("╭─ Options ─") :].split("╰")[0]
    if name == "run":
        assert "--help" in options_panel and options_panel.count(" --") == 1


def test_runs_list_loads_neither_model_clients_nor_statistics(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    RunStore(db).close()
    code = (
        "import json, sys\n"
        "from clinjudge.cli import main\n"
        f"sys.argv = ['judge', 'runs', 'list', '--db', {str(db)!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = ['openai', 'litellm', 'scipy', 'autogen_ext', 'clinjudge.analysis']\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []
