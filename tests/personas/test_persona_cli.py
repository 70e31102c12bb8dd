"""`judge persona list|show|validate` through the Typer app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from clinjudge.cli import app
from clinjudge.personas import builtin_personas, load_persona_set

WIDE = {"COLUMNS": "250", "NO_COLOR": "1"}


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=WIDE, catch_exceptions=False)


def test_list_shows_sets_and_personas() -> None:
    result = invoke("persona", "list")
    assert result.exit_code == 0, result.output
    for name in ("practice", "scoring", *builtin_personas()):
        assert name in result.stdout
    assert "moderator" in result.stdout
    assert "lenient" in result.stdout and "strict" in result.stdout


def test_show_set_prints_every_full_system_message() -> None:
    result = invoke("persona", "show", "scoring")
    assert result.exit_code == 0, result.output
    assert "moderator: middle_scorer" in result.stdout
    for persona in load_persona_set("scoring").personas:
        assert persona.system_message in result.stdout
        assert persona.description in result.stdout


def test_show_single_persona_prints_full_system_message() -> None:
    result = invoke("persona", "show", "analytical_perfectionist")
    assert result.exit_code == 0, result.output
    persona = builtin_personas()["analytical_perfectionist"]
    assert result.stdout.startswith("analytical_perfectionist  (Analytical Perfectionist)")
    assert persona.system_message in result.stdout
    assert "stance: neutral" in result.stdout


def test_show_json() -> None:
    result = invoke("persona", "show", "practice", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [p["name"] for p in data["personas"]] == [
        "analytical_perfectionist",
        "efficient_multitasker",
        "collaborative_team_player",
    ]
    single = json.loads(invoke("persona", "show", "low_scorer", "--json").stdout)
    assert single["stance"] == "strict"


def test_show_comma_list() -> None:
    result = invoke("persona", "show", "high_scorer,low_scorer")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("custom ")
    assert "middle_scorer" not in result.stdout


def test_show_unknown_lists_choices() -> None:
    result = invoke("persona", "show", "nobody")
    assert result.exit_code == 2
    assert "unknown persona 'nobody'" in result.stderr
    assert "high_scorer" in result.stderr and "practice" in result.stderr


def _persona_file(tmp_path: Path, **overrides: object) -> Path:
    persona = {
        "name": "file_judge",
        "display_name": "File Judge",
        "description": "A judge loaded from a file.",
        "system_message": "Judge [carefully]. End every reply with one JSON object of scores.",
        "stance": "neutral",
    }
    persona.update(overrides)
    path = tmp_path / "team.yaml"
    data = {"name": "team", "description": "From a file.", "personas": [persona]}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_show_file(tmp_path: Path) -> None:
    path = _persona_file(tmp_path)
    result = invoke("persona", "show", str(path))
    assert result.exit_code == 0, result.output
    assert "Judge [carefully]. End every reply with one JSON object" in result.stdout


def test_validate_good_and_bad_files(tmp_path: Path) -> None:
    good = invoke("persona", "validate", str(_persona_file(tmp_path)))
    assert good.exit_code == 0, good.output
    assert "valid persona set team" in good.stdout
    bad = invoke("persona", "validate", str(_persona_file(tmp_path, name="Bad-Name")))
    assert bad.exit_code == 2
    assert "team.yaml" in bad.stderr
    assert "personas.0.name" in bad.stderr
