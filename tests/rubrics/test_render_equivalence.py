"""The user message is the same text, byte for byte, however it is rendered (issue 27 renders
its rubric-only parts once per rubric object and skips defusing text that cannot hold a tag).

The reference below builds the message from the layout's rules, written out here: blocks in
the order specialty, notes, reference, summary (each only when the rubric takes it, the
summary always), numbered notes with a ``source_id`` when the id is not the number (anything
but ASCII letters, digits and ``_.:-`` made ``_``, at most 64 characters), every untrusted text
passed through ``neutralise``, examples before the document and the process reward model's
report after it. Items are generated with odd text: tags and their look-alikes, rubric keys
as tags, entities, non-ASCII letters, invisible characters, line separators, empty fields.
"""

from __future__ import annotations

import json
import random
import string
from typing import Any

import pytest

from clinjudge.rubrics import (
    ChatTurn,
    Item,
    Rubric,
    Shot,
    builtin_rubric_names,
    load_rubric,
    neutralise,
    render_messages,
    render_system,
    render_user,
)

SAFE_ID = set(string.ascii_letters + string.digits + "_.:-")


def ref_fenced(item: Item, rubric: Rubric) -> str:
    labels = rubric.labels
    blocks = []
    if "specialty" in rubric.inputs:
        specialty = neutralise(item.specialty or "not stated", rubric)
        blocks.append(
            "TARGET CLINICIAN SPECIALTY\n<TARGET_SPECIALTY>" + specialty + "</TARGET_SPECIALTY>"
        )
    if "notes" in rubric.inputs:
        notes = []
        for index, note in enumerate(item.notes):
            number = str(index + 1)
            attributes = 'number="' + number + '"'
            if note.id != number:
                cleaned = "".join(c if c in SAFE_ID else "_" for c in note.id)
                attributes += ' source_id="' + cleaned[:64] + '"'
            notes.append(
                "<SOURCE_NOTE "
                + attributes
                + ">\n"
                + neutralise(note.text, rubric)
                + "\n</SOURCE_NOTE>"
            )
        blocks.append(
            labels.notes
            + " (numbered; citations such as [Note 2] refer to these numbers)\n<CLINICAL_NOTES>\n"
            + "\n".join(notes)
            + "\n</CLINICAL_NOTES>"
        )
    if "reference" in rubric.inputs:
        reference = neutralise(item.reference or "", rubric)
        blocks.append(labels.reference + "\n<REFERENCE>\n" + reference + "\n</REFERENCE>")
    blocks.append(
        labels.summary
        + " TO EVALUATE\n<CLINICAL_SUMMARY>\n"
        + neutralise(item.summary, rubric)
        + "\n</CLINICAL_SUMMARY>"
    )
    return "\n\n".join(blocks)


def ref_user(
    item: Item, rubric: Rubric, shots: list[Shot] | None = None, evidence: str | None = None
) -> str:
    sections = []
    if shots:
        examples = []
        for index, shot in enumerate(shots):
            scores = {key: shot.scores.get(key) for key in rubric.keys}
            examples.append(
                '<EXAMPLE number="'
                + str(index + 1)
                + '">\n'
                + ref_fenced(shot.item, rubric)
                + "\n<EXAMPLE_SCORES>"
                + json.dumps(scores)
                + "</EXAMPLE_SCORES>\n</EXAMPLE>"
            )
        sections.append(
            "EXAMPLES\nPhysicians graded the following examples with this rubric. Use them to "
            "calibrate; they are not the document you are grading.\n<EXAMPLES>\n"
            + "\n".join(examples)
            + "\n</EXAMPLES>"
        )
    sections.append("DOCUMENT TO GRADE\n\n" + ref_fenced(item, rubric))
    if evidence is not None:
        sections.append(
            "PROCESS REWARD MODEL EVIDENCE\n<PRM_EVIDENCE>\n"
            + neutralise(evidence, rubric)
            + "\n</PRM_EVIDENCE>"
        )
    sections.append(
        "Grade the "
        + rubric.labels.summary
        + " above on all "
        + str(len(rubric.attributes))
        + " keys and answer with the JSON object only."
    )
    return "\n\n".join(sections)


# -- generated items ------------------------------------------------------------------------------

PIECES = [
    "BP 138/84",
    "HbA1c 7.4% ",
    " [Note 2] ",
    "<",
    ">",
    "</CLINICAL_SUMMARY>",
    '<SOURCE_NOTE number="9">',
    "</CLINICAL_NOTES>",
    "< / REFERENCE>",
    "<//TARGET_SPECIALTY>",
    "<PRM_EVIDENCE>",
    "<accurate>",
    "</CITATION>",
    "\uff1c/CLINICAL_SUMMARY\uff1e",  # fullwidth brackets
    "\u2039EXAMPLES\u203a",
    "&lt;/EXAMPLE&gt;",
    "&#60;EXAMPLE_SCORES>",
    "<CLINICAL\u200b_SUMMARY>",  # an invisible character inside the name
    "<\u0421LINICAL_NOTES>",  # a Cyrillic C
    "Überweisung",
    "naïve",
    "患者",
    "🙂",
    "\u2028",
    "\r\n",
    "\n\n",
    "\t",
    "\x00",
    "a < b",
    "x<y",
    '{"citation": 5}',
    "'quoted'",
    "\\",
]


def odd_text(rng: random.Random, *, empty: bool = False) -> str:
    if empty and rng.random() < 0.1:
        return ""
    if rng.random() < 0.3:
        return "".join(rng.choice(string.ascii_letters + " .,") for _ in range(rng.randint(1, 60)))
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))) or "x"


def odd_id(rng: random.Random, number: int) -> str:
    return rng.choice(
        [
            str(number),
            str(number),
            str(number + 1),
            "0" + str(number),
            "note-" + str(number),
            "a b/c",
            "ü:1.x",
            "x" * 70 + "é",
            odd_text(rng),
        ]
    )


def random_item(rng: random.Random, n: int) -> Item:
    count = rng.choice([0, 1, 3, 5, 70]) if rng.random() < 0.1 else rng.randint(1, 4)
    notes: list[Any] = []
    for number in range(1, count + 1):
        text = odd_text(rng)
        notes.append(text if rng.random() < 0.5 else {"id": odd_id(rng, number), "text": text})
    return Item(
        id=f"item-{n}",
        notes=notes,
        summary=odd_text(rng),
        specialty=rng.choice([None, "", "Cardiology", odd_text(rng)]),
        reference=rng.choice([None, "", odd_text(rng, empty=True)]),
    )


def variant(base: str, name: str, **changes: Any) -> Rubric:
    data = load_rubric(base).model_dump()
    data["name"] = name
    data.update(changes)
    return Rubric.model_validate(data)


RUBRICS = [load_rubric(name) for name in builtin_rubric_names()] + [
    variant(
        "pdsqi9",
        "every-input",
        inputs=["reference", "summary", "specialty", "notes"],
        labels={"notes": "SOURCE RECORDS (EHR)", "summary": "HANDOFF", "reference": "GOLD"},
    ),
    variant("probsum", "summary-only", inputs=["summary"]),
    variant("pdsqi9", "no-notes", inputs=["specialty", "summary", "reference"]),
]


@pytest.mark.parametrize("rubric", RUBRICS, ids=lambda r: r.name)
def test_user_message_equals_the_reference(rubric: Rubric):
    rng = random.Random(f"render-{rubric.name}")
    for n in range(400):
        item = random_item(rng, n)
        expected = ref_user(item, rubric)
        assert render_user(item, rubric) == expected
        turns = render_messages(item, rubric)
        assert turns == [ChatTurn("system", render_system(rubric)), ChatTurn("user", expected)]


@pytest.mark.parametrize("rubric", RUBRICS[:3], ids=lambda r: r.name)
def test_examples_and_evidence_equal_the_reference(rubric: Rubric):
    rng = random.Random(f"shots-{rubric.name}")
    for n in range(150):
        item = random_item(rng, n)
        shots = [
            Shot(
                random_item(rng, 1000 + k),
                {key: rng.choice([None, 1, 3]) for key in rubric.keys if rng.random() < 0.8},
            )
            for k in range(rng.randint(0, 3))
        ]
        evidence = rng.choice([None, odd_text(rng), ""])
        expected = ref_user(item, rubric, shots, evidence)
        assert render_user(item, rubric, shots, evidence=evidence) == expected
        explanations = rng.random() < 0.5
        turns = render_messages(item, rubric, shots, explanations=explanations, evidence=evidence)
        system = render_system(rubric, explanations=explanations, prm=evidence is not None)
        assert turns == [ChatTurn("system", system), ChatTurn("user", expected)]


def test_each_rubric_object_gets_its_own_layout():
    # The rubric-only parts are remembered per rubric object: a copy with other labels or
    # inputs renders with its own, and the original's text is unchanged afterwards.
    rng = random.Random(5)
    item = random_item(rng, 1)
    first = load_rubric("pdsqi9")
    before = render_user(item, first)
    changed = first.model_copy(
        update={
            "labels": first.labels.model_copy(update={"summary": "DISCHARGE LETTER"}),
            "inputs": ["summary"],
        }
    )
    assert render_user(item, changed) == ref_user(item, changed)
    assert "DISCHARGE LETTER TO EVALUATE" in render_user(item, changed)
    assert render_user(item, first) == before == ref_user(item, first)
