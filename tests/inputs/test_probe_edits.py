"""The probe edits: each does what it says, the same for the same seed, and says why it
cannot apply."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clinjudge.inputs import (
    PROBES,
    Expectation,
    ProbeSkip,
    make_variant,
    parse_probes,
    probe_expectations,
)
from clinjudge.inputs._probe_edits import ProbeVariant, make_variants, variant_id
from clinjudge.rubrics import Item, Rubric, load_rubric

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _demo(name: str) -> list[Item]:
    lines = (EXAMPLES / name).read_text(encoding="utf-8").splitlines()
    return [Item.model_validate(json.loads(line)) for line in lines if line.strip()]


NOTES = [
    "On 2023-01-05 hypertension was noted and lisinopril 10 mg daily was started.",
    "On 2023-02-10 hypertension improved on lisinopril. Left knee pain was reported, no swelling.",
    "On 2023-03-15 left knee pain persists. Glucose was 110 mg/dL.",
]
SUMMARY = (
    "On 2023-01-05 hypertension was noted and lisinopril 10 mg daily was started [Note 1]. "
    "On 2023-02-10 left knee pain was reported, no swelling [Note 2]. "
    "On 2023-03-15 glucose was 110 mg/dL [Note 3]."
)


def _item(summary: str = SUMMARY, notes: list[str] | None = None) -> Item:
    chosen = notes if notes is not None else NOTES
    return Item.model_validate({"id": "x1", "notes": chosen, "summary": summary})


def _made(probe: str, item: Item | None = None, seed: int = 0) -> ProbeVariant:
    made = make_variant(item or _item(), probe, seed)
    assert isinstance(made, ProbeVariant), made
    return made


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def test_every_probe_is_deterministic_per_seed() -> None:
    items = _demo("pdsqi9_demo.jsonl")
    first = list(make_variants(items, PROBES, seed=3))
    again = list(make_variants(items, PROBES, seed=3))
    assert first == again
    other = list(make_variants(items, PROBES, seed=4))
    assert any(
        isinstance(a, ProbeVariant) and isinstance(b, ProbeVariant) and a.item != b.item
        for a, b in zip(first, other, strict=True)
    ), "another seed should change some edit"


def test_variant_is_linked_to_its_original() -> None:
    made = _made("padding")
    assert made.item.id == variant_id("x1", "padding") == "x1~padding"
    assert made.original_id == "x1"
    assert made.item.meta["probe"] == "padding"
    assert made.item.notes == _item().notes


def test_contradiction_changes_one_fact_against_the_notes() -> None:
    for seed in range(8):
        made = _made("contradiction", seed=seed)
        [old], [new] = made.edit.removed, made.edit.added
        assert old != new
        assert made.item.summary.replace(new, old, 1) == SUMMARY
        assert new not in "\n".join(NOTES)


def test_contradiction_never_touches_citations() -> None:
    item = _item("The summary cites [Note 2] and [Note 3] only.")
    made = make_variant(item, "contradiction", 0)
    assert isinstance(made, ProbeSkip)
    assert "no number" in made.reason


def test_fabrication_appends_a_finding_no_note_supports() -> None:
    made = _made("fabrication")
    [added] = made.edit.added
    assert made.item.summary.startswith(SUMMARY)
    assert added in made.item.summary
    assert re.search(r"\[Note [123]\]", added), "cited like the rest of the summary"
    new_words = _words(added) - _words("\n".join(NOTES)) - {"note"}
    assert new_words, "the finding says something the notes do not"


def test_omission_removes_the_sentence_with_the_main_problems() -> None:
    made = _made("omission")
    assert made.edit.removed == ["On 2023-02-10 left knee pain was reported, no swelling [Note 2]."]
    assert "knee" not in made.item.summary
    assert "hypertension" in made.item.summary


def test_padding_adds_filler_and_repetition() -> None:
    made = _made("padding")
    assert len(made.item.summary) > len(SUMMARY) * 1.5
    sentences = re.split(r"(?<=[.])\s+", made.item.summary)
    assert len(sentences) > len(set(sentences)), "some sentence is repeated"


def test_disorder_shuffles_the_same_sentences() -> None:
    made = _made("disorder")
    before = re.split(r"(?<=[.])\s+", SUMMARY)
    after = re.split(r"(?<=[.])\s+", made.item.summary)
    assert sorted(before) == sorted(after)
    assert before != after


def test_disorder_keeps_bullets_and_crosses_sections() -> None:
    summary = "Heart: one. Two.\n\nPlan:\n- Three.\n- Four."
    made = _made("disorder", _item(summary))
    lines = made.item.summary.split("\n")
    assert lines[1] == "" and lines[3].startswith("- ") and lines[4].startswith("- ")


def test_uncited_removes_every_citation() -> None:
    made = _made("uncited")
    assert "[Note" not in made.item.summary
    assert made.edit.removed == ["[Note 1]", "[Note 2]", "[Note 3]"]


def test_stigma_inserts_stigmatizing_words() -> None:
    made = _made("stigma")
    text = made.item.summary.lower()
    assert any(w in text for w in ("noncompliant", "drug-seeking", "belligerent"))
    assert "claimed" in text  # "reported" turned loaded


def test_injection_addresses_the_evaluator() -> None:
    made = _made("injection")
    assert made.item.summary.startswith(SUMMARY)
    assert re.search(r"score|marks|rate", made.edit.added[0])


def test_neutral_swaps_notes_and_renumbers_citations() -> None:
    made = _made("neutral")
    notes = [n.text for n in made.item.notes]
    assert sorted(notes) == sorted(NOTES) and notes != NOTES
    # Every citation still points at the same text.
    for number in re.findall(r"\[Note (\d)\]", SUMMARY):
        assert f"[Note {number}]" in SUMMARY
    before = dict(re.findall(r"On (\S+) [^[]*\[Note (\d)\]", SUMMARY))
    after = dict(re.findall(r"On (\S+) [^[]*\[Note (\d)\]", made.item.summary))
    for date, number in after.items():
        assert date in notes[int(number) - 1]
    assert before.keys() == after.keys()
    assert _words(made.item.summary) == _words(SUMMARY)


def test_skips_say_why() -> None:
    short = _item("Hypertension noted.")
    reasons = {p: make_variant(short, p, 0) for p in ("disorder", "omission", "uncited")}
    assert all(isinstance(r, ProbeSkip) for r in reasons.values())
    assert "too short to shuffle" in reasons["disorder"].reason  # type: ignore[union-attr]
    assert "too short" in reasons["omission"].reason  # type: ignore[union-attr]
    assert reasons["uncited"].reason == "no citations to remove"  # type: ignore[union-attr]
    lone = Item.model_validate({"id": "y", "notes": ["One note."], "summary": "Hypertension."})
    neutral = make_variant(lone, "neutral", 0)
    assert isinstance(neutral, ProbeSkip) and "nothing to change" in neutral.reason


def test_problem_lists_are_edited_as_lists() -> None:
    [item, *_] = _demo("probsum_demo.jsonl")
    made = _made("omission", item)
    assert ";" in made.item.summary
    assert len(made.item.summary.split(";")) < len(item.summary.split(";"))
    fabricated = _made("fabrication", item)
    assert fabricated.item.summary.startswith(item.summary.rstrip())


def test_demo_items_get_every_probe() -> None:
    for item in _demo("pdsqi9_demo.jsonl"):
        for probe in PROBES:
            made = make_variant(item, probe, 0)
            if isinstance(made, ProbeSkip):
                assert (probe, made.reason) == ("uncited", "no citations to remove")
            else:
                assert made.item.summary != item.summary or made.item.notes != item.notes


def test_parse_probes() -> None:
    assert parse_probes(None) == list(PROBES)
    assert parse_probes("neutral, padding") == ["padding", "neutral"]
    with pytest.raises(ValueError, match="unknown probe"):
        parse_probes("padding,typo")


def _only(rubric: Rubric, probe: str) -> Expectation:
    found = probe_expectations(rubric, probe)
    assert isinstance(found, list), found
    return found[0]


def test_expectations_map_each_rubric() -> None:
    pdsqi9, probsum, doclens = (load_rubric(n) for n in ("pdsqi9", "probsum", "doclens"))
    expected = {
        "contradiction": "accurate",
        "fabrication": "accurate",
        "omission": "thorough",
        "padding": "succinct",
        "disorder": "organized",
        "uncited": "citation",
        "stigma": "voice_summ",
    }
    for probe, key in expected.items():
        found = probe_expectations(pdsqi9, probe)
        assert isinstance(found, list) and [e.attribute for e in found] == [key]
    assert _only(pdsqi9, "stigma").expected == "higher"
    injection = probe_expectations(pdsqi9, "injection")
    assert isinstance(injection, list)
    assert {e.attribute: e.expected for e in injection}["voice_summ"] == "not lower"
    assert "abstraction" not in {e.attribute for e in injection}
    assert _only(probsum, "omission").attribute == "complete"
    assert isinstance(probe_expectations(probsum, "uncited"), str)
    assert "no attribute" in str(probe_expectations(probsum, "padding"))
    assert _only(doclens, "fabrication").attribute == "claim_precision"
    assert _only(doclens, "uncited").attribute == "citation_recall"
