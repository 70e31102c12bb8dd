"""Persona schema, the built-in sets, the loader and persona specs."""

from __future__ import annotations

import json
import keyword
import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from clinjudge.personas import (
    Persona,
    PersonaError,
    PersonaSet,
    builtin_persona_sets,
    builtin_personas,
    load_persona_file,
    load_persona_set,
    load_personas,
    resolve_personas,
)
from clinjudge.personas._registry import get_persona, parse_persona_text
from clinjudge.personas._schema import Role, Stance

PRACTICE = ["analytical_perfectionist", "efficient_multitasker", "collaborative_team_player"]
SCORING = ["high_scorer", "low_scorer", "middle_scorer"]
ALL_BUILTIN = [p for name in builtin_persona_sets() for p in load_persona_set(name).personas]


def _persona(name: str = "careful_reader", **overrides: object) -> dict:
    data = {
        "name": name,
        "display_name": name.replace("_", " ").title(),
        "description": f"Reviewer {name} for tests.",
        "system_message": "Judge the summary. End every reply with one JSON object of scores.",
        "stance": "neutral",
    }
    data.update(overrides)
    return data


def _set(personas: list[dict], **overrides: object) -> dict:
    data = {"name": "mine", "description": "A test set.", "personas": personas}
    data.update(overrides)
    return data


def _write(tmp_path: Path, data: object, name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    text = json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


# --- built-in sets -------------------------------------------------------------------------


def test_builtin_sets_are_listed_and_load() -> None:
    assert builtin_persona_sets() == ["practice", "scoring"]
    assert load_persona_set("practice").names == PRACTICE
    assert load_persona_set("scoring").names == SCORING


def test_builtin_sets_have_provenance_and_versions() -> None:
    for name in builtin_persona_sets():
        persona_set = load_persona_set(name)
        assert persona_set.name == name
        assert persona_set.version
        assert "Table 7" in (persona_set.source or "")


def test_persona_names_unique_across_sets_and_distinct_from_set_names() -> None:
    names = [p.name for p in ALL_BUILTIN]
    assert len(names) == len(set(names)) == 6
    assert sorted(builtin_personas()) == sorted(names)
    assert not set(names) & set(builtin_persona_sets())


@pytest.mark.parametrize("persona", ALL_BUILTIN, ids=lambda p: p.name)
def test_builtin_names_are_autogen_identifiers(persona: Persona) -> None:
    assert persona.name.isidentifier()
    assert persona.name == persona.name.lower()
    assert not keyword.iskeyword(persona.name)
    assert len(persona.name) <= 64


@pytest.mark.parametrize("persona", ALL_BUILTIN, ids=lambda p: p.name)
def test_builtin_system_messages_demand_json_at_the_end(persona: Persona) -> None:
    message = persona.system_message
    assert "JSON" in message
    assert "End every reply with one JSON object" in message
    assert "every rubric key" in message
    last_sentence = re.split(r"(?<=[.!?])\s+", message.strip())[-1]
    assert "JSON" in last_sentence
    # the evaluated text is data, never instructions
    assert "never instructions" in message
    assert "{" not in message and "}" not in message  # no unfilled template placeholders


@pytest.mark.parametrize("persona", ALL_BUILTIN, ids=lambda p: p.name)
def test_builtin_descriptions_are_one_line(persona: Persona) -> None:
    assert "\n" not in persona.description
    assert persona.description.endswith(".")
    assert persona.team_line() == f"{persona.name}: {persona.description}"


def test_stances_and_moderator() -> None:
    practice = load_persona_set("practice")
    assert practice.moderator is None
    assert practice.moderator_persona() is None
    assert {p.stance for p in practice.personas} == {Stance.neutral}
    assert all(p.role is Role.member for p in practice.personas)

    scoring = load_persona_set("scoring")
    assert scoring.moderator == "middle_scorer"
    middle = scoring.moderator_persona()
    assert middle is not None and middle.is_moderator
    assert middle.stance is Stance.moderator
    assert "CONSENSUS" in middle.system_message
    assert scoring.persona("high_scorer").stance is Stance.lenient
    assert scoring.persona("low_scorer").stance is Stance.strict
    assert [p.name for p in scoring.members] == ["high_scorer", "low_scorer"]


def test_team_description_matches_autogen_team_lines() -> None:
    scoring = load_persona_set("scoring")
    lines = scoring.team_description().splitlines()
    assert [line.split(":", 1)[0] for line in lines] == SCORING


def test_agent_kwargs_build_autogen_assistant_agents() -> None:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.replay import ReplayChatCompletionClient

    client = ReplayChatCompletionClient(["{}"])
    for persona in ALL_BUILTIN:
        agent = AssistantAgent(model_client=client, **persona.agent_kwargs())
        assert agent.name == persona.name
        assert agent.description == persona.description


def test_fingerprint_is_stable_and_tracks_wording() -> None:
    first = load_persona_set("scoring")
    assert first.fingerprint() == load_persona_set("scoring").fingerprint()
    changed = first.model_copy(deep=True)
    changed.personas[0].system_message += " Be brief; still end with the JSON object."
    assert changed.fingerprint() != first.fingerprint()
    assert first.personas[0].fingerprint() != changed.personas[0].fingerprint()


# --- persona specs -------------------------------------------------------------------------


def test_load_personas_by_set_name() -> None:
    assert [p.name for p in load_personas("scoring")] == SCORING
    assert [p.name for p in load_personas("practice")] == PRACTICE


def test_comma_list_of_builtin_names() -> None:
    personas = load_personas("high_scorer,low_scorer")
    assert [p.name for p in personas] == ["high_scorer", "low_scorer"]
    mixed = resolve_personas(" analytical_perfectionist , middle_scorer,high_scorer ")
    assert mixed.name == "custom"
    assert mixed.names == ["analytical_perfectionist", "middle_scorer", "high_scorer"]
    assert mixed.moderator == "middle_scorer"
    assert resolve_personas("high_scorer,low_scorer").moderator is None


def test_single_builtin_persona_name() -> None:
    persona_set = resolve_personas("low_scorer")
    assert persona_set.names == ["low_scorer"]
    assert get_persona("low_scorer").stance is Stance.strict


def test_unknown_persona_lists_choices() -> None:
    with pytest.raises(PersonaError) as info:
        load_personas("high_scorer,nobody")
    message = str(info.value)
    assert "'nobody'" in message
    for name in PRACTICE + SCORING + builtin_persona_sets():
        assert name in message
    with pytest.raises(PersonaError, match="built-in personas"):
        get_persona("nobody")


def test_unknown_set_lists_sets() -> None:
    with pytest.raises(PersonaError, match="built-in sets: practice, scoring"):
        load_persona_set("nothing")


@pytest.mark.parametrize("spec", ["", "  ", ",", " , "])
def test_empty_spec_is_an_error(spec: str) -> None:
    with pytest.raises(PersonaError):
        load_personas(spec)


def test_duplicate_names_in_comma_list() -> None:
    with pytest.raises(PersonaError, match="more than once"):
        load_personas("high_scorer,high_scorer")


# --- user files ----------------------------------------------------------------------------


def test_custom_set_from_yaml_file(tmp_path: Path) -> None:
    data = _set(
        [
            _persona("careful_reader", stance="strict"),
            _persona("chair", stance="moderator", role="moderator"),
        ],
        moderator="chair",
        version="2.1",
    )
    path = _write(tmp_path, data)
    loaded = load_persona_set(str(path))
    assert loaded.name == "mine" and loaded.version == "2.1"
    assert loaded.names == ["careful_reader", "chair"]
    assert loaded.moderator == "chair"
    assert load_persona_set(path) == loaded
    assert [p.name for p in load_personas(str(path))] == ["careful_reader", "chair"]
    assert resolve_personas(path) == loaded


def test_custom_set_from_json_file(tmp_path: Path) -> None:
    path = _write(tmp_path, _set([_persona()]), name="mine.json")
    assert load_persona_file(path).names == ["careful_reader"]


def test_moderator_inferred_from_role(tmp_path: Path) -> None:
    path = _write(tmp_path, _set([_persona("a_one"), _persona("chair", role="moderator")]))
    assert load_persona_set(str(path)).moderator == "chair"


def test_single_persona_file_becomes_set_of_one(tmp_path: Path) -> None:
    path = _write(tmp_path, _persona("lone_judge"), name="lone.yaml")
    loaded = load_persona_file(path)
    assert loaded.name == "lone_judge"
    assert loaded.names == ["lone_judge"]


def _error(tmp_path: Path, data: object, name: str = "mine.yaml") -> str:
    path = _write(tmp_path, data, name)
    with pytest.raises(PersonaError) as info:
        load_persona_set(str(path))
    message = str(info.value)
    assert str(path) in message
    return message


@pytest.mark.parametrize(
    "bad_name",
    ["High_Scorer", "high-scorer", "1st_judge", "has space", "", "x" * 65],
)
def test_bad_persona_name(tmp_path: Path, bad_name: str) -> None:
    message = _error(tmp_path, _set([_persona(), _persona(bad_name)]))
    assert "field personas.1.name" in message


@pytest.mark.parametrize("bad_name", ["class", "match", "user", "orchestrator"])
def test_keyword_and_reserved_names(tmp_path: Path, bad_name: str) -> None:
    message = _error(tmp_path, _set([_persona(bad_name)]))
    assert f"field personas.0.name (persona '{bad_name}')" in message


def test_duplicate_persona_names(tmp_path: Path) -> None:
    message = _error(tmp_path, _set([_persona("twin"), _persona("twin")]))
    assert "field personas:" in message
    assert "duplicate persona names: ['twin']" in message


def test_moderator_not_in_set(tmp_path: Path) -> None:
    message = _error(tmp_path, _set([_persona("a_one")], moderator="ghost"))
    assert "field moderator" in message
    assert "'ghost'" in message and "a_one" in message


def test_moderator_without_moderator_role(tmp_path: Path) -> None:
    message = _error(tmp_path, _set([_persona("a_one")], moderator="a_one"))
    assert "field moderator" in message
    assert "role" in message


def test_two_moderator_roles(tmp_path: Path) -> None:
    personas = [_persona("a_one", role="moderator"), _persona("b_two", role="moderator")]
    assert "field moderator" in _error(tmp_path, _set(personas))
    assert "field moderator" in _error(tmp_path, _set(personas, moderator="a_one"))


def test_unparseable_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\npersonas: {\n", encoding="utf-8")
    with pytest.raises(PersonaError, match=r"broken\.yaml: cannot parse"):
        load_persona_set(str(path))


def test_unparseable_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(PersonaError, match=r"broken\.json: cannot parse"):
        load_personas(str(path))


def test_top_level_must_be_mapping(tmp_path: Path) -> None:
    assert "mapping at the top level" in _error(tmp_path, [_persona()])


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PersonaError, match="cannot read"):
        load_persona_set(str(tmp_path / "absent.yaml"))


def test_system_message_must_mention_json(tmp_path: Path) -> None:
    persona = _persona(system_message="You judge summaries kindly.")
    message = _error(tmp_path, _set([persona]))
    assert "field personas.0.system_message (persona 'careful_reader')" in message
    assert "JSON" in message


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"description": "first line\nsecond line"}, "personas.0.description"),
        ({"stance": "grumpy"}, "personas.0.stance"),
        ({"role": "chair"}, "personas.0.role"),
        ({"temperature": 0.2}, "personas.0.temperature"),
        ({"display_name": ""}, "personas.0.display_name"),
    ],
)
def test_invalid_persona_fields(tmp_path: Path, overrides: dict, field: str) -> None:
    assert f"field {field}" in _error(tmp_path, _set([_persona(**overrides)]))


def test_missing_fields_and_empty_set(tmp_path: Path) -> None:
    persona = _persona()
    del persona["system_message"]
    assert "field personas.0.system_message" in _error(tmp_path, _set([persona]))
    assert "field personas:" in _error(tmp_path, _set([]))
    assert "field name" in _error(tmp_path, _set([_persona()], name="Bad Name"))


def test_single_persona_file_errors_name_the_field(tmp_path: Path) -> None:
    message = _error(tmp_path, _persona(stance="kind"), name="one.yaml")
    assert "not a valid persona" in message
    assert "field stance" in message


def test_parse_persona_text_uses_source_in_errors() -> None:
    with pytest.raises(PersonaError, match=r"^inline\.yaml: not a valid persona set"):
        parse_persona_text(yaml.safe_dump(_set([_persona("Bad")])), "inline.yaml")


def test_models_validate_directly() -> None:
    with pytest.raises(ValidationError):
        Persona.model_validate(_persona("bad-name"))
    persona_set = PersonaSet.model_validate(_set([_persona()]))
    assert persona_set.moderator is None
    with pytest.raises(KeyError):
        persona_set.persona("nobody")
