"""Reading PRM input files: JSONL, CSV cells holding JSON, the clinical-note JSON records."""

from __future__ import annotations

import json

import pytest

from clinjudge.inputs import InputError
from clinjudge.prm_bridge import load_chains


def test_csv_cells_with_json_lists(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text(
        'id,candidate,steps,labels,question\nq1,a,"[""one"", ""Step 2: two""]","[1, 0]",Why?\n',
        encoding="utf-8",
    )
    [chain] = load_chains(path, "chain")
    assert [(s.text, s.label) for s in chain.steps] == [("one", 1), ("two", 0)]
    assert (chain.id, chain.candidate, chain.question) == ("q1", "a", "Why?")


def test_clinical_note_record_is_read_as_is(tmp_path):
    record = {
        "Problems": [{"Problem": "Asthma:", "Problem_score": "+",
                      "Steps": [{"Step": "Wheeze.", "Step_score": "-"}],
                      "Problem_completeness_score": "+"}],
        "Note_completeness_score": "+",
        "Case_id": "A_0", "Sample_no": 3, "Dialogue": "[doctor] hi",
    }  # fmt: skip
    path = tmp_path / "notes.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    [chain] = load_chains(path, "chain", need_labels=True)
    assert (chain.id, chain.candidate, chain.question) == ("A_0", "3", "[doctor] hi")
    assert [(s.kind, s.label) for s in chain.steps] == [
        ("problem", 1),
        ("sentence", 0),
        ("problem_completeness", 1),
        ("note_completeness", 1),
        ("end_of_note", 0),
    ]


def test_free_text_note_segmenter_and_default_candidates(tmp_path):
    rows = [
        {"id": 7, "text": "1. Asthma.\nWheeze today. Inhaler.\n"},
        {"id": 7, "text": "1. Asthma.\nWheeze."},
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    first, second = load_chains(path, "note")
    assert (first.id, first.candidate, second.candidate) == ("7", "1", "2")
    assert [s.kind for s in first.steps] == [
        "problem", "sentence", "sentence", "problem_completeness", "note_completeness",
        "end_of_note",
    ]  # fmt: skip


def test_duplicate_candidates_and_bad_labels(tmp_path):
    rows = [
        {"id": "q", "candidate": "a", "steps": ["x"]},
        {"id": "q", "candidate": "a", "steps": ["y"]},
        {"id": "r", "steps": [{"text": "z", "label": "maybe"}]},
        {"id": "s", "text": "   "},
        {"id": "t", "text": "Step 1:"},
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_chains(path, "chain")
    text = str(caught.value)
    assert "line 2: field candidate: duplicate candidate 'a' of id 'q' (first at" in text
    assert "line 3: field steps.0.StepInput.label" in text and "maybe" in text
    assert "line 4: field (record): give exactly one of" in text  # blank = absent
    assert "line 5: field text: no steps found" in text
