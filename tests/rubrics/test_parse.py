"""Parsing judge replies against the built-in PDSQI-9 rubric."""

from __future__ import annotations

import json

import pytest

from clinjudge.rubrics import JudgmentParseError, json_objects, load_rubric, parse_judgment

RUBRIC = load_rubric("pdsqi9")
KEYS = RUBRIC.keys

BASE = {
    "citation": 4,
    "accurate": 5,
    "thorough": 3,
    "useful": 4,
    "organized": 2,
    "comprehensible": 5,
    "succinct": 3,
    "abstraction": 1,
    "synthesized": 4,
    "voice_summ": 0,
    "voice_note": 1,
}
NO_ABSTRACTION = {"abstraction": 0, "synthesized": None}
DISPLAY_NAMES = {
    "citation": "Cited",
    "accurate": "Accurate",
    "thorough": "Thorough",
    "useful": "Useful",
    "organized": "Organized",
    "comprehensible": "Comprehensible",
    "succinct": "Succinct",
    "abstraction": "Abstraction needed",
    "synthesized": "Synthesized",
    "voice_summ": "Stigmatizing language in summary",
    "voice_note": "Stigmatizing language in source notes",
}


def values(**over) -> dict:
    return {**BASE, **over}


def obj(drop=(), rename=None, **over) -> dict:
    """A reply object: BASE with overrides, keys dropped or renamed."""
    rename = rename or {}
    return {rename.get(k, k): v for k, v in values(**over).items() if k not in drop}


def js(drop=(), rename=None, **over) -> str:
    return json.dumps(obj(drop, rename, **over), indent=1)


def raw_js(**raw) -> str:
    """BASE as JSON with some values written verbatim (not JSON-encoded)."""
    parts = [f'"{k}": {raw.get(k, json.dumps(v))}' for k, v in BASE.items()]
    return "{" + ", ".join(parts) + "}"


def wrapped(fn) -> str:
    """BASE with each value transformed by fn(value) -> JSON-able."""
    return json.dumps({k: fn(v) for k, v in BASE.items()})


DECOY = js(citation=1, accurate=1, thorough=1, useful=1)
DECOY_VALUES = values(citation=1, accurate=1, thorough=1, useful=1)

SUCCESS = [
    ("plain", js(), BASE),
    ("fence_json", f"```json\n{js()}\n```", BASE),
    ("fence_bare", f"```\n{js()}\n```", BASE),
    ("fence_prose", f"Here you go:\n```JSON\n{js()}\n```\nHope this helps!", BASE),
    ("prose_around", f"After reading all notes, my grades are {js()} -- done.", BASE),
    ("pretty_with_newlines", json.dumps(BASE, indent=4).replace("\n", "\r\n"), BASE),
    ("think_braces", f"<think>Use {{note 2}} and {{oops</think>\n{js()}", BASE),
    ("think_after_answer_decoy", f"{js()}\n<think>draft {DECOY}</think>", BASE),
    ("thinking_tag_decoy", f"{js()}<THINKING>{DECOY}</thinking>", BASE),
    ("reasoning_tag_decoy", f"<reasoning>{DECOY}</reasoning>{js()}", BASE),
    ("think_unclosed", f"<think>\nweighing {{citations}} first...\n\n{js()}", BASE),
    ("think_unclosed_partial_decoy", f'<think>maybe {{"citation": 1}} hmm\n{js()}', BASE),
    ("think_orphan_close", f"the model was already thinking {DECOY}\n</think>\n{js()}", BASE),
    ("two_objects_first_irrelevant", f'{{"note": "x", "n": 2}}\n{js()}', BASE),
    ("two_objects_last_irrelevant", f'{js()}\n{{"confidence": "high"}}', BASE),
    ("two_objects_partial_then_full", f'{{"citation": 1, "accurate": 1}} {js()}', BASE),
    ("two_objects_full_then_partial", f'{js()} {{"citation": 1, "accurate": 1}}', BASE),
    ("two_objects_tie_last_wins", f"{DECOY}\nCorrected:\n{js()}", BASE),
    ("two_objects_tie_last_wins_rev", f"{js()}\nCorrected:\n{DECOY}", DECOY_VALUES),
    ("display_names", js(rename=DISPLAY_NAMES), BASE),
    (
        "case_space_hyphen",
        js(
            rename={
                "citation": "CITATION",
                "voice_summ": "Voice-Summ",
                "voice_note": "voice note",
                "accurate": " Accurate ",
                "abstraction": "abstraction-needed",
                "comprehensible": "COMPREHENSIBLE",
            }
        ),
        BASE,
    ),
    (
        "listed_aliases",
        js(
            rename={
                "citation": "citations",
                "accurate": "accuracy",
                "thorough": "completeness",
                "useful": "relevance",
                "organized": "organisation",
                "comprehensible": "clarity",
                "succinct": "concise",
                "abstraction": "needs_abstraction",
                "synthesized": "synthesis",
                "voice_summ": "stigmatizing",
                "voice_note": "voice_notes",
            }
        ),
        BASE,
    ),
    ("reversed_key_order", json.dumps(dict(reversed(list(BASE.items())))), BASE),
    ("numbers_as_strings", wrapped(str), BASE),
    ("out_of_five", wrapped(lambda v: f"{v}/5"), BASE),
    ("out_of_five_spaced", wrapped(lambda v: f"{v} / 5"), BASE),
    ("number_dash_words", wrapped(lambda v: f"{v} - mostly fine"), BASE),
    ("number_paren_words", wrapped(lambda v: f"{v} (see notes)"), BASE),
    ("number_colon_words", wrapped(lambda v: f" {v}: ok"), BASE),
    ("floats", wrapped(float), BASE),
    ("float_strings", wrapped(lambda v: f"{v}.0"), BASE),
    ("score_objects", wrapped(lambda v: {"score": v, "explanation": f"because {v}"}), BASE),
    ("explanation_then_grade", wrapped(lambda v: {"explanation": "e", "grade": v}), BASE),
    ("capitalised_fields", wrapped(lambda v: {"Reasoning": "r", "Score": str(v)}), BASE),
    ("rating_field", wrapped(lambda v: {"rating": v}), BASE),
    ("value_field", wrapped(lambda v: {"value": v, "comment": "c"}), BASE),
    ("epic_list_form", wrapped(lambda v: [f"explanation for {v}", v]), BASE),
    ("single_item_list", wrapped(lambda v: [v]), BASE),
    ("nested_scores", json.dumps({"scores": BASE, "rationale": {"accurate": "fine"}}), BASE),
    ("nested_evaluation", json.dumps({"evaluation": BASE}), BASE),
    ("nested_results_alias_keys", json.dumps({"Results": obj(rename=DISPLAY_NAMES)}), BASE),
    ("array_wrapper", json.dumps([BASE]), BASE),
    ("extra_keys_ignored", json.dumps({**BASE, "overall": 4, "confidence": "high"}), BASE),
    ("synth_NA", js(abstraction=0, synthesized="NA"), values(**NO_ABSTRACTION)),
    ("synth_N/A", js(abstraction=0, synthesized="N/A"), values(**NO_ABSTRACTION)),
    ("synth_na_lower", js(abstraction=0, synthesized="n/a"), values(**NO_ABSTRACTION)),
    ("synth_null", js(abstraction=0, synthesized=None), values(**NO_ABSTRACTION)),
    ("synth_None_str", js(abstraction=0, synthesized="None"), values(**NO_ABSTRACTION)),
    (
        "synth_not_applicable",
        js(abstraction=0, synthesized="Not applicable"),
        values(**NO_ABSTRACTION),
    ),
    ("synth_empty_str", js(abstraction=0, synthesized=""), values(**NO_ABSTRACTION)),
    ("synth_zero_gated", js(abstraction=0, synthesized=0), values(**NO_ABSTRACTION)),
    ("synth_zero_str_gated", js(abstraction="0", synthesized="0"), values(**NO_ABSTRACTION)),
    (
        "synth_score_obj_null",
        js(abstraction=0, synthesized={"score": None, "explanation": "n"}),
        values(**NO_ABSTRACTION),
    ),
    ("abstraction_no", js(abstraction="no", synthesized="NA"), values(**NO_ABSTRACTION)),
    ("abstraction_yes", js(abstraction="Yes"), BASE),
    ("bare_NA", raw_js(abstraction="0", synthesized="NA"), values(**NO_ABSTRACTION)),
    (
        "bare_N/A_last",
        js(drop=("synthesized",), abstraction=0)[:-2] + ',\n"synthesized": N/A\n}',
        values(**NO_ABSTRACTION),
    ),
    ("bare_None", raw_js(abstraction="0", synthesized="None"), values(**NO_ABSTRACTION)),
    ("json_NaN", raw_js(abstraction="0", synthesized="NaN"), values(**NO_ABSTRACTION)),
    ("voice_yes_no", js(voice_summ="yes", voice_note="no"), values(voice_summ=1, voice_note=0)),
    ("voice_json_bools", js(voice_summ=True, voice_note=False), values(voice_summ=1, voice_note=0)),
    ("voice_bool_strings", js(voice_summ="False", voice_note="TRUE"), BASE),
    ("voice_bare_python_bools", raw_js(voice_summ="False", voice_note="True"), BASE),
    ("voice_present_absent", js(voice_summ="absent", voice_note="Present"), BASE),
    ("trailing_commas", js().replace("\n}", ",\n}"), BASE),
    (
        "trailing_commas_nested",
        json.dumps({"scores": BASE}).replace("}}", ",},}"),
        BASE,
    ),
    (
        "trailing_comma_brace_in_string",
        wrapped(lambda v: {"explanation": "odd } brace", "score": v}).replace("}}", "},}"),
        BASE,
    ),
    (
        "trailing_comma_escaped_quote_brace",
        wrapped(lambda v: {"explanation": 'said "} \\', "score": v}).replace("}}", "},}"),
        BASE,
    ),
    (
        "explanation_with_quotes_braces",
        wrapped(lambda v: {"explanation": 'he said "}{"', "score": v}),
        BASE,
    ),
    (
        "all_min",
        js(**{k: 1 for k in KEYS[:7]}, synthesized=1, voice_summ=0, voice_note=0),
        values(**{k: 1 for k in KEYS[:7]}, synthesized=1, voice_summ=0, voice_note=0),
    ),
    (
        "all_max",
        js(**{k: 5 for k in KEYS[:7]}, synthesized=5, voice_summ=1, voice_note=1),
        values(**{k: 5 for k in KEYS[:7]}, synthesized=5, voice_summ=1, voice_note=1),
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in SUCCESS], ids=[c[0] for c in SUCCESS]
)
def test_parse_success(text: str, expected: dict) -> None:
    result = parse_judgment(text, RUBRIC)
    assert result.values == expected
    assert list(result.values) == KEYS


def test_score_objects_capture_rationale_per_key() -> None:
    text = wrapped(lambda v: {"score": v, "explanation": f"because {v}"})
    result = parse_judgment(text, RUBRIC)
    assert result.rationales == {k: f"because {v}" for k, v in BASE.items()}


def test_epic_list_form_captures_rationale() -> None:
    result = parse_judgment(json.dumps({**BASE, "accurate": ["no fabrication found", 5]}), RUBRIC)
    assert result.values["accurate"] == 5
    assert result.rationales == {"accurate": "no fabrication found"}


def test_nested_rationale_mapping_goes_to_keys() -> None:
    text = json.dumps({"scores": BASE, "rationale": {"Cited": "two wrong", "thorough": "misses"}})
    result = parse_judgment(text, RUBRIC)
    assert result.rationales == {"citation": "two wrong", "thorough": "misses"}
    assert result.rationale is None


def test_overall_rationale_string() -> None:
    result = parse_judgment(json.dumps({**BASE, "rationale": "Lowest: organized."}), RUBRIC)
    assert result.rationale == "Lowest: organized."
    assert result.rationales == {}


def test_plain_scores_have_no_rationale() -> None:
    result = parse_judgment(js(), RUBRIC)
    assert result.rationales == {} and result.rationale is None


FAILURES = [
    ("empty", "", ["empty"]),
    ("whitespace", "  \n\t ", ["empty"]),
    ("no_json", "I am unable to grade this summary.", ["no JSON"]),
    ("only_prose_braces", "Scores: {citation four}", ["no JSON"]),
    ("json_inside_think_only", f"<think>{js()}</think>Sorry, I cannot comply.", ["no JSON"]),
    ("unrelated_json", '{"foo": 1, "bar": {"baz": 2}}', ["rubric's keys"]),
    ("truncated_mid_object", js()[:60], ["no JSON"]),
    ("truncated_nested", wrapped(lambda v: {"score": v, "explanation": "x"})[:120], ["JSON"]),
    (
        "missing_two",
        js(drop=("thorough", "voice_note")),
        ["missing keys", "thorough", "voice_note"],
    ),
    ("likert_9", js(accurate=9), ["accurate=9", "1..5"]),
    ("likert_0", js(useful=0), ["useful=0", "outside"]),
    ("likert_minus1", js(thorough=-1), ["thorough=-1", "outside"]),
    ("likert_minus1_str", js(thorough="-1"), ["thorough=-1", "outside"]),
    ("likert_6_of_5", js(citation="6/5"), ["citation=6", "outside"]),
    ("binary_2", js(voice_summ=2), ["voice_summ=2", "0..1"]),
    ("abstraction_2", js(abstraction=2), ["abstraction=2", "0..1"]),
    ("non_integer", js(succinct=3.5), ["succinct", "3.5", "whole number"]),
    ("non_integer_str", js(succinct="3.5"), ["succinct", "3.5", "not a score"]),
    ("null_not_nullable", js(accurate=None), ["accurate is null"]),
    ("na_not_nullable", js(organized="N/A"), ["organized is null"]),
    ("score_obj_null_not_nullable", js(useful={"score": None}), ["useful is null"]),
    (
        "gate_one_with_null",
        js(abstraction=1, synthesized=None),
        ["synthesized may be null only", "abstraction is 1"],
    ),
    ("gate_one_with_na", js(abstraction="yes", synthesized="NA"), ["synthesized may be null"]),
    ("gate_one_with_zero", js(abstraction=1, synthesized=0), ["synthesized=0", "outside"]),
    ("text_value", js(comprehensible="excellent"), ["comprehensible", "'excellent'"]),
    ("yes_for_likert", js(accurate="yes"), ["accurate", "'yes'"]),
    ("bool_for_likert", js(accurate=True), ["accurate"]),
    ("maybe_for_binary", js(voice_summ="maybe"), ["voice_summ", "'maybe'"]),
    ("object_without_score", js(citation={"explanation": "fine"}), ["citation", "no score"]),
    ("list_two_numbers", js(citation=[3, 4]), ["citation", "single score"]),
    ("dict_of_wrong_type", js(citation={"score": {"n": 4}}), ["citation", "not a score"]),
    (
        "several_problems",
        js(drop=("voice_note",), accurate=9, useful="great"),
        ["accurate=9", "useful", "missing keys: voice_note"],
    ),
    (
        "orphan_close_draft_not_used",
        f"thinking {js()}\n</think>\nFinal: {js(drop=('succinct',))}",
        ["missing keys: succinct"],
    ),
]


@pytest.mark.parametrize(
    ("text", "fragments"), [c[1:] for c in FAILURES], ids=[c[0] for c in FAILURES]
)
def test_parse_failure(text: str, fragments: list[str]) -> None:
    with pytest.raises(JudgmentParseError) as caught:
        parse_judgment(text, RUBRIC)
    reason = str(caught.value)
    for fragment in fragments:
        assert fragment in reason


def test_none_reply_is_empty() -> None:
    with pytest.raises(JudgmentParseError, match="empty"):
        parse_judgment(None, RUBRIC)


def test_missing_keys_lists_exactly_the_missing() -> None:
    with pytest.raises(JudgmentParseError) as caught:
        parse_judgment(js(drop=("citation", "synthesized", "voice_summ")), RUBRIC)
    listed = str(caught.value).split("missing keys:")[1].split(";")[0]
    assert [k.strip() for k in listed.split(",")] == ["citation", "synthesized", "voice_summ"]


def test_bad_value_not_also_reported_missing() -> None:
    with pytest.raises(JudgmentParseError) as caught:
        parse_judgment(js(accurate="excellent"), RUBRIC)
    assert "missing" not in str(caught.value)


def test_json_objects_finds_top_level_objects_in_order() -> None:
    text = 'a {x} b {"a": {"b": 1}} c ```{"c": 2,}``` d {"d": [1, {"e": 3}]}'
    assert json_objects(text) == [{"a": {"b": 1}}, {"c": 2}, {"d": [1, {"e": 3}]}]


def test_json_objects_none_in_plain_text() -> None:
    assert json_objects("no braces here, only } and {") == []


def test_same_attribute_twice_with_different_values_is_rejected(pdsqi9) -> None:
    reply = (
        '{"citation": 4, "accurate": 4, "Accuracy": 2, "thorough": 4, "useful": 4, '
        '"organized": 4, "comprehensible": 4, "succinct": 4, "abstraction": 0, '
        '"synthesized": null, "voice_summ": 0, "voice_note": 0}'
    )
    with pytest.raises(JudgmentParseError, match="accurate: given twice"):
        parse_judgment(reply, pdsqi9)


def test_same_attribute_twice_with_equal_values_is_accepted(pdsqi9) -> None:
    reply = (
        '{"citation": 4, "accurate": 4, "Accuracy": 4, "thorough": 4, "useful": 4, '
        '"organized": 4, "comprehensible": 4, "succinct": 4, "abstraction": 0, '
        '"synthesized": null, "voice_summ": 0, "voice_note": 0}'
    )
    assert parse_judgment(reply, pdsqi9).values["accurate"] == 4


# -- replies the schema rules out, each decided with a trace (hardening round 4, part 3) --------


def test_a_key_repeated_with_different_scores_is_refused() -> None:
    # A JSON parser keeps the last of a repeated key; which score the judge meant is unknown.
    body = js()[:-1].rstrip() + ',\n "accurate": 1\n}'
    assert json.loads(body)["accurate"] == 1  # what a plain parser would silently keep
    with pytest.raises(JudgmentParseError, match="accurate: key given 2 times"):
        parse_judgment(body, RUBRIC)
    # Inside a score container too.
    wrapped = '{"scores": ' + body + "}"
    with pytest.raises(JudgmentParseError, match="accurate: key given 2 times"):
        parse_judgment(wrapped, RUBRIC)


def test_a_key_repeated_with_the_same_score_is_one_answer() -> None:
    body = js()[:-1].rstrip() + ',\n "accurate": 5\n}'
    assert parse_judgment(body, RUBRIC).values == BASE


def test_a_score_under_a_near_name_is_refused_other_extra_keys_are_noted() -> None:
    with pytest.raises(JudgmentParseError, match="accurate_extra: not a key of the rubric"):
        parse_judgment(json.dumps({**BASE, "accurate_extra": 9}), RUBRIC)
    parsed = parse_judgment(json.dumps({**BASE, "evil": "x", "overall": 4}), RUBRIC)
    assert parsed.values == BASE
    assert parsed.notes == ["keys not in the rubric read past: evil, overall"]
    assert parse_judgment(json.dumps(BASE), RUBRIC).notes == []


def test_two_objects_that_disagree_are_read_with_a_note() -> None:
    corrected = parse_judgment(f"{js(accurate=2)}\nCorrected:\n{js()}", RUBRIC)
    assert corrected.values == BASE
    assert corrected.notes == [
        "the reply holds 2 JSON objects that score accurate differently (2, 5); "
        "the most complete, last one was read"
    ]
    assert parse_judgment(f"{js()}\nAgain:\n{js()}", RUBRIC).notes == []
