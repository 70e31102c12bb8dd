"""Rubric schema, the built-in PDSQI-9 file, the loader and the Item model."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from pydantic import ValidationError

from clinjudge.rubrics import (
    Item,
    Polarity,
    Rubric,
    RubricError,
    ScaleKind,
    alias_forms,
    builtin_rubric_names,
    load_rubric,
    load_rubric_file,
    normalise_key,
    parse_rubric_text,
)

PDSQI9 = load_rubric("pdsqi9")
PDSQI9_KEYS = [
    "citation",
    "accurate",
    "thorough",
    "useful",
    "organized",
    "comprehensible",
    "succinct",
    "abstraction",
    "synthesized",
    "voice_summ",
    "voice_note",
]
LIKERT_KEYS = PDSQI9_KEYS[:7]


def test_pdsqi9_is_builtin_with_eleven_keys_in_order() -> None:
    assert "pdsqi9" in builtin_rubric_names()
    assert PDSQI9.name == "pdsqi9"
    assert PDSQI9.keys == PDSQI9_KEYS
    assert set(PDSQI9.inputs) == {"notes", "summary", "specialty"}
    assert PDSQI9.provenance.source and PDSQI9.provenance.licence


@pytest.mark.parametrize("key", LIKERT_KEYS)
def test_pdsqi9_likert_attributes(key: str) -> None:
    a = PDSQI9.attribute(key)
    assert (a.scale, a.min, a.max, a.nullable, a.gate) == (ScaleKind.likert, 1, 5, False, None)
    assert a.polarity is Polarity.higher_better and a.agreement
    assert sorted(a.anchors) == [1, 2, 3, 4, 5] and all(m.strip() for m in a.anchors.values())


def test_pdsqi9_special_attributes() -> None:
    assert PDSQI9.attribute("citation").name == "Cited"
    abstraction = PDSQI9.attribute("abstraction")
    assert (abstraction.scale, abstraction.min, abstraction.max) == (ScaleKind.binary, 0, 1)
    assert abstraction.polarity is Polarity.neutral and not abstraction.agreement
    synth = PDSQI9.attribute("synthesized")
    assert (synth.scale, synth.min, synth.max, synth.nullable) == (ScaleKind.likert, 1, 5, True)
    assert (synth.gate.attribute, synth.gate.null_when) == ("abstraction", 0)
    assert synth.null_meaning
    for key in ("voice_summ", "voice_note"):
        a = PDSQI9.attribute(key)
        assert (a.scale, a.min, a.max, a.nullable) == (ScaleKind.binary, 0, 1, False)
        assert a.polarity is Polarity.higher_worse
    assert list(PDSQI9.attribute("voice_summ").values) == [0, 1]


def test_attribute_lookup_unknown_key() -> None:
    with pytest.raises(KeyError):
        PDSQI9.attribute("nope")


def full(**over) -> dict:
    base = dict.fromkeys(LIKERT_KEYS, 4) | {"abstraction": 1, "synthesized": 3}
    return base | {"voice_summ": 0, "voice_note": 0} | over


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        (full(), None),
        (full(abstraction=0, synthesized=None), None),
        (full(abstraction=0, synthesized=3), "must be null when abstraction is 0, got 3"),
        (full(abstraction=1, synthesized=None), "may be null only when abstraction is 0"),
        (full(abstraction=None, synthesized=None), "abstraction is None"),
    ],
)
def test_gate_violation(values: dict, fragment: str | None) -> None:
    result = PDSQI9.gate_violation(values)
    if fragment is None:
        assert result is None
    else:
        assert fragment in result and result.startswith("synthesized")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Abstraction needed", "abstraction_needed"),
        ("  Voice-Summ ", "voice_summ"),
        ("Stigmatizing language: in   summary!", "stigmatizing_language_in_summary"),
        ("", ""),
    ],
)
def test_normalise_key(text: str, expected: str) -> None:
    assert normalise_key(text) == expected


def test_alias_forms_include_key_name_and_aliases() -> None:
    forms = alias_forms(PDSQI9.attribute("citation"))
    assert {"citation", "cited", "citations", "cite"} <= forms


# --- invalid rubric files -------------------------------------------------------------------


def minimal() -> dict:
    return {
        "name": "mini",
        "version": "0.1",
        "title": "Mini",
        "provenance": {"source": "tests", "licence": "CC0"},
        "inputs": ["summary"],
        "task": "Grade it.",
        "attributes": [
            {
                "key": "clear",
                "name": "Clear",
                "description": "d",
                "scale": "likert",
                "min": 1,
                "max": 3,
                "anchors": {1: "bad", 2: "ok", 3: "good"},
            },
            {
                "key": "flag",
                "name": "Flag",
                "description": "d",
                "scale": "binary",
                "min": 0,
                "max": 1,
                "anchors": {0: "no", 1: "yes"},
                "polarity": "higher_worse",
            },
            {
                "key": "extra",
                "name": "Extra",
                "description": "d",
                "scale": "likert",
                "min": 1,
                "max": 3,
                "anchors": {1: "a", 2: "b", 3: "c"},
                "nullable": True,
                "null_meaning": "flag is 0",
                "gate": {"attribute": "flag", "null_when": 0},
            },
        ],
    }


def broken(edit) -> dict:
    data = copy.deepcopy(minimal())
    edit(data)
    return data


def _set(path: list, value):
    def edit(data: dict) -> None:
        target = data
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return edit


INVALID = [
    (
        "anchor_missing",
        _set(["attributes", 0, "anchors"], {1: "a", 3: "c"}),
        ["attributes.0", "'clear'", "anchors", "[1, 2, 3]"],
    ),
    (
        "anchor_extra",
        _set(["attributes", 0, "anchors"], {0: "z", 1: "a", 2: "b", 3: "c"}),
        ["attributes.0", "anchors"],
    ),
    ("binary_max_2", _set(["attributes", 1, "max"], 2), ["attributes.1", "'flag'", "0 to 1"]),
    ("min_not_below_max", _set(["attributes", 0, "min"], 3), ["'clear'", "min must be below max"]),
    (
        "duplicate_keys",
        _set(["attributes", 2, "key"], "clear"),
        ["attributes", "duplicate", "clear"],
    ),
    (
        "gate_unknown",
        _set(["attributes", 2, "gate"], {"attribute": "ghost", "null_when": 0}),
        ["'extra'", "unknown 'ghost'"],
    ),
    (
        "gate_value_off_scale",
        _set(["attributes", 2, "gate"], {"attribute": "flag", "null_when": 5}),
        ["'extra'", "outside 'flag'"],
    ),
    (
        "gated_not_nullable",
        _set(["attributes", 2, "nullable"], False),
        ["attributes.2", "'extra'", "must be nullable"],
    ),
    (
        "nullable_without_meaning",
        _set(["attributes", 2, "null_meaning"], None),
        ["'extra'", "null_meaning"],
    ),
    ("alias_clash", _set(["attributes", 1, "aliases"], ["Clear"]), ["alias 'clear'"]),
    ("unknown_field", _set(["attributes", 0, "colour"], "red"), ["attributes.0.colour"]),
    ("bad_scale", _set(["attributes", 0, "scale"], "stars"), ["attributes.0.scale"]),
    ("bad_key", _set(["attributes", 0, "key"], "Clear Key"), ["attributes.0.key"]),
    ("bad_input", _set(["inputs"], ["summary", "audio"]), ["inputs.1"]),
    ("no_attributes", _set(["attributes"], []), ["attributes", "at least one"]),
    ("missing_task", lambda d: d.pop("task"), ["field task"]),
    ("bad_provenance", _set(["provenance"], {"source": "x"}), ["provenance.licence"]),
]


@pytest.mark.parametrize(
    ("edit", "fragments"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_rubric_file_names_file_and_field(tmp_path, edit, fragments: list[str]) -> None:
    path = tmp_path / "bad_rubric.yaml"
    path.write_text(yaml.safe_dump(broken(edit)), encoding="utf-8")
    with pytest.raises(RubricError) as caught:
        load_rubric_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not a valid rubric")
    for fragment in fragments:
        assert fragment in message


def test_minimal_fixture_is_valid() -> None:
    rubric = Rubric.model_validate(minimal())
    assert rubric.keys == ["clear", "flag", "extra"]


@pytest.mark.parametrize(
    ("filename", "text", "fragment"),
    [
        ("broken.yaml", "name: x\nattributes: [unclosed\n", "cannot parse"),
        ("broken.json", '{"name": "x",', "cannot parse"),
        ("list.yaml", "- name: x\n- name: y\n", "mapping at the top level"),
        ("scalar.yaml", "just text", "mapping at the top level"),
        ("empty.yaml", "", "mapping at the top level"),
    ],
)
def test_unparseable_or_wrong_shape(tmp_path, filename: str, text: str, fragment: str) -> None:
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RubricError) as caught:
        load_rubric_file(path)
    assert str(caught.value).startswith(str(path)) and fragment in str(caught.value)


def test_unreadable_paths(tmp_path) -> None:
    for path in (tmp_path / "absent.yaml", tmp_path):
        with pytest.raises(RubricError, match="cannot read") as caught:
            load_rubric_file(path)
        assert str(path) in str(caught.value)
    with pytest.raises(RubricError, match="cannot read"):
        load_rubric(str(tmp_path / "absent.yaml"))


def test_parse_rubric_text_uses_source_in_errors() -> None:
    with pytest.raises(RubricError, match=r"^inline-source: "):
        parse_rubric_text("[1, 2]", "inline-source")


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_user_rubric_loads_from_file(tmp_path, suffix: str) -> None:
    data = minimal()
    path = tmp_path / f"mine.{suffix}"
    text = json.dumps(data) if suffix == "json" else yaml.safe_dump(data)
    path.write_text(text, encoding="utf-8")
    for rubric in (load_rubric_file(path), load_rubric(str(path))):
        assert rubric == Rubric.model_validate(data)
        assert rubric.attribute("extra").gate.attribute == "flag"
        assert rubric.attribute("clear").anchors == {1: "bad", 2: "ok", 3: "good"}


def test_builtin_roundtrips_through_user_file(tmp_path) -> None:
    path = tmp_path / "copy.json"
    path.write_text(PDSQI9.model_dump_json(), encoding="utf-8")
    assert load_rubric(str(path)) == PDSQI9


def test_unknown_name_lists_builtins() -> None:
    with pytest.raises(RubricError) as caught:
        load_rubric("no_such_rubric")
    message = str(caught.value)
    assert "'no_such_rubric'" in message
    for name in builtin_rubric_names():
        assert name in message


def test_builtin_names_have_no_suffix_and_all_load() -> None:
    names = builtin_rubric_names()
    assert names == sorted(names)
    for name in names:
        assert "." not in name
        assert load_rubric(name).name == name


# --- Item ---------------------------------------------------------------------------------


def test_item_notes_from_strings_get_positions() -> None:
    item = Item(id=7, notes=["first", "second"], summary="s")
    assert item.id == "7"
    assert [(n.id, n.text) for n in item.notes] == [("1", "first"), ("2", "second")]


def test_item_notes_from_mappings_coerce_int_ids() -> None:
    item = Item(
        id="a",
        notes=[{"id": 12, "text": "x"}, {"id": "n-3", "text": "y"}, "z"],
        summary="s",
        specialty="Oncology",
        reference="r",
        vendor="v",
        meta={"k": 1},
    )
    assert [n.id for n in item.notes] == ["12", "n-3", "3"]
    assert (item.specialty, item.reference, item.vendor, item.meta) == (
        "Oncology",
        "r",
        "v",
        {"k": 1},
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"id": "a", "summary": ""},
        {"id": "", "summary": "s"},
        {"id": "a"},
        {"id": "a", "summary": "s", "colour": "red"},
        {"id": "a", "summary": "s", "notes": [{"id": "1", "text": "x", "date": "2020"}]},
        {"id": "a", "summary": "s", "notes": [{"id": "1", "text": ""}]},
        {"id": "a", "summary": "s", "notes": [""]},
        {"id": "a", "summary": "s", "notes": [{"text": "no id"}]},
        {"id": "a", "summary": "s", "notes": "just one string"},
    ],
    ids=[
        "empty_summary",
        "empty_id",
        "no_summary",
        "unknown_field",
        "unknown_note_field",
        "empty_note_text",
        "empty_note_string",
        "note_without_id",
        "notes_not_list",
    ],
)
def test_item_rejects(kwargs: dict) -> None:
    with pytest.raises(ValidationError):
        Item(**kwargs)


def test_item_defaults() -> None:
    item = Item(id="a", summary="s")
    assert (item.notes, item.specialty, item.reference, item.meta) == ([], None, None, {})
