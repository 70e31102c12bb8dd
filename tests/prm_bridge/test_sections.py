"""Section-aware note segmentation on synthetic notes written for these tests, one per layout.

Expected step lists are written out by hand from the clinical-note step scheme: a problem
description, its sentences, a completeness step per problem, then note completeness and end of
note; section headings are never steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clinjudge.inputs import InputError
from clinjudge.prm_bridge import SectionError, load_chains
from clinjudge.prm_bridge._inputs import chain_from_text
from clinjudge.prm_bridge._sections import heading_of, select_sections
from clinjudge.prm_bridge._segment import segment_note

PC, NC, EON = ("problem_completeness", ""), ("note_completeness", ""), ("end_of_note", "")

# "aci" layout: capitals without colons, diagnosis line under ASSESSMENT, prose under PLAN.
ACI = """CHIEF COMPLAINT

Left wrist pain.

HISTORY OF PRESENT ILLNESS

Ms. Gray is a 40-year-old woman who fell on an outstretched hand two days ago.

PHYSICAL EXAM

MUSCULOSKELETAL: Tender over the distal radius.

ASSESSMENT

Left wrist sprain, possible scaphoid injury.

PLAN

{plan}

INSTRUCTIONS

Return sooner if the pain worsens.
""".format(
    plan="I reviewed the x-ray with the patient. She will wear a thumb spica splint. "
    "We will repeat the x-ray in 10 days."  # one long line, as such notes have it
)

# "virtassist" layout: summary paragraph, titles ending in a full stop with bullets, labelled
# follow-up and agreement lines.
VIRTASSIST = """CHIEF COMPLAINT

Cough.

ASSESSMENT AND PLAN

Mr. Stone is a 70-year-old man with asthma and gout who comes in for a cough.

Acute bronchitis.
• Medical Reasoning: The lungs are clear and the chest film is normal.
• Medical Treatment: Rest, fluids and honey for the cough.

Gout.
• Medical Reasoning: No flares this year.
• Medical Treatment: Continue allopurinol 100 mg daily.

Follow up: Return in 3 months.

Patient Agreements: The patient understands and agrees with the plan.
"""

# A whole SOAP note with an A/P heading, a numbered problem and a "#" problem.
SOAP = """SUBJECTIVE:
Feels tired for a month.
OBJECTIVE:
BP 150/95. Pulse 72.
A/P:
#1 Hypertension: Above goal today. Start amlodipine 5 mg daily.
# Fatigue
Check TSH and a blood count.
"""

# IMPRESSION AND PLAN with numbered problems ending in a full stop and dash bullets.
IMPRESSION = """Impression and Plan:
1. Community-acquired pneumonia.
- Start amoxicillin 1 g three times daily.
- Chest film in 6 weeks.
2. Type 2 diabetes.
- Hold metformin while ill.
"""

# ASSESSMENT bullets repeated as titles under PLAN (a scribe layout).
REPEATED = """ASSESSMENT

• Seasonal allergies.
• Eczema of both hands.

PLAN

Seasonal allergies.
Start a daily nasal steroid spray.

Eczema of both hands.
Apply a moisturiser twice daily. Use hydrocortisone cream for flares.
"""


def steps(text: str, section: str = "assessment_plan") -> tuple[str, list[tuple[str, str]]]:
    preamble, found = segment_note(text, section)
    return preamble, [(s.kind, s.text) for s in found]


def test_aci_layout():
    assert steps(ACI) == (
        "",
        [
            ("problem", "Left wrist sprain, possible scaphoid injury."),
            ("sentence", "I reviewed the x-ray with the patient."),
            ("sentence", "She will wear a thumb spica splint."),
            ("sentence", "We will repeat the x-ray in 10 days."),
            PC,
            ("sentence", "Return sooner if the pain worsens."),
            PC,
            NC,
            EON,
        ],
    )


def test_virtassist_layout():
    assert steps(VIRTASSIST) == (
        "Mr. Stone is a 70-year-old man with asthma and gout who comes in for a cough.",
        [
            ("problem", "Acute bronchitis."),
            ("sentence", "Medical Reasoning: The lungs are clear and the chest film is normal."),
            ("sentence", "Medical Treatment: Rest, fluids and honey for the cough."),
            PC,
            ("problem", "Gout."),
            ("sentence", "Medical Reasoning: No flares this year."),
            ("sentence", "Medical Treatment: Continue allopurinol 100 mg daily."),
            PC,
            ("problem", "Follow up:"),
            ("sentence", "Return in 3 months."),
            PC,
            ("problem", "Patient Agreements:"),
            ("sentence", "The patient understands and agrees with the plan."),
            PC,
            NC,
            EON,
        ],
    )


def test_soap_note_with_a_p_numbered_and_hash_problems():
    ap = [
        ("problem", "Hypertension:"),
        ("sentence", "Above goal today."),
        ("sentence", "Start amlodipine 5 mg daily."),
        PC,
        ("problem", "Fatigue"),
        ("sentence", "Check TSH and a blood count."),
        PC,
    ]
    assert steps(SOAP) == ("", [*ap, NC, EON])
    # all sections: the others are problems without a description; headings are no steps
    assert steps(SOAP, "all") == (
        "",
        [
            ("sentence", "Feels tired for a month."),
            PC,
            ("sentence", "BP 150/95."),
            ("sentence", "Pulse 72."),
            PC,
            *ap,
            NC,
            EON,
        ],
    )


def test_impression_and_plan_numbered_with_bullets():
    assert steps(IMPRESSION)[1] == [
        ("problem", "Community-acquired pneumonia."),
        ("sentence", "Start amoxicillin 1 g three times daily."),
        ("sentence", "Chest film in 6 weeks."),
        PC,
        ("problem", "Type 2 diabetes."),
        ("sentence", "Hold metformin while ill."),
        PC,
        NC,
        EON,
    ]


def test_plan_titles_repeating_the_assessment_continue_those_problems():
    assert steps(REPEATED)[1] == [
        ("problem", "Seasonal allergies."),
        ("sentence", "Start a daily nasal steroid spray."),
        PC,
        ("problem", "Eczema of both hands."),
        ("sentence", "Apply a moisturiser twice daily."),
        ("sentence", "Use hydrocortisone cream for flares."),
        PC,
        NC,
        EON,
    ]


@pytest.mark.parametrize("note", [ACI, VIRTASSIST, SOAP, IMPRESSION, REPEATED])
@pytest.mark.parametrize("section", ["all", "assessment_plan"])
def test_headings_are_never_steps(note, section):
    headings = {
        "CHIEF COMPLAINT", "HISTORY OF PRESENT ILLNESS", "PHYSICAL EXAM", "ASSESSMENT", "PLAN",
        "INSTRUCTIONS", "ASSESSMENT AND PLAN", "SUBJECTIVE", "OBJECTIVE", "A/P",
        "Impression and Plan",
    }  # fmt: skip
    texts = {text.rstrip(":") for _, text in steps(note, section)[1]}
    assert not texts & headings


def test_a_heading_name_selects_that_section_and_an_absent_one_is_named():
    assert steps(ACI, "plan")[1][:3] == [
        ("sentence", "I reviewed the x-ray with the patient."),
        ("sentence", "She will wear a thumb spica splint."),
        ("sentence", "We will repeat the x-ray in 10 days."),
    ]
    assert steps(ACI, "history_of_present_illness")[1][0][1].startswith("Ms. Gray")
    with pytest.raises(SectionError, match="SOCIAL HISTORY.*headings found: CHIEF COMPLAINT"):
        segment_note(ACI, "SOCIAL HISTORY")
    history_only = "CHIEF COMPLAINT\nCough.\nHISTORY OF PRESENT ILLNESS\nTwo days of cough."
    with pytest.raises(SectionError, match="assessment-and-plan"):
        segment_note(history_only, "assessment_plan")


def test_a_note_without_headings_is_taken_whole():
    note = "Asthma.\n• Continue the inhaler.\nGout.\n• Continue allopurinol."
    assert [k for k, _ in steps(note)[1]].count("problem") == 2
    assert select_sections(note, "assessment_plan")[0].heading is None


def test_heading_rules():
    assert heading_of("ASSESSMENT") == "ASSESSMENT"
    assert heading_of("HPI:") == "HPI"
    assert heading_of("## Plan") == "Plan"
    assert heading_of("Assessment and Plan:") == "Assessment and Plan"
    assert heading_of("a/p") == "a/p"
    assert heading_of("Plan:") is None  # a label inside a problem
    assert heading_of("GERD.") is None  # a problem title
    assert heading_of("HYPERTENSION:", in_assessment_plan=True) is None
    assert heading_of("PLAN", in_assessment_plan=True) == "PLAN"


def test_other_segmenters_read_only_the_section():
    chain = chain_from_text("i", ACI, "lines", section="assessment_plan")
    assert [s.text for s in chain.steps][0] == "Left wrist sprain, possible scaphoid injury."
    assert all(s.text != "PLAN" for s in chain.steps)


def test_input_file_error_names_line_and_headings(tmp_path: Path):
    path = tmp_path / "notes.jsonl"
    rows = [{"id": "a", "text": VIRTASSIST}, {"id": "b", "text": "CHIEF COMPLAINT\nCough."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(InputError, match=r"line 2: field text: no assessment-and-plan.*CHIEF"):
        load_chains(path, "note", section="assessment_plan")
    [first, second] = load_chains(path, "note", section="all")
    assert first.preamble == "" and second.steps[0].text == "Cough."
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    [chain] = load_chains(one, "note", section="assessment_plan")
    assert chain.preamble.startswith("Mr. Stone")


def test_prose_before_instructions_or_agreements_is_scored_not_a_preamble():
    note = "PLAN\nRest at home.\nINSTRUCTIONS\nCall if worse."
    assert steps(note) == (
        "",
        [("sentence", "Rest at home."), PC, ("sentence", "Call if worse."), PC, NC, EON],
    )
    note = "ASSESSMENT AND PLAN\nRest at home.\nPatient Agreements: The patient agrees."
    assert steps(note) == (
        "",
        [
            ("sentence", "Rest at home."),
            PC,
            ("problem", "Patient Agreements:"),
            ("sentence", "The patient agrees."),
            PC,
            NC,
            EON,
        ],
    )
