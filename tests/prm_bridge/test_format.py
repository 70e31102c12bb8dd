"""Presets render the seeds' conventions exactly; segmenters; overrides."""

from __future__ import annotations

import pytest

from clinjudge.prm_bridge import Chain, PRMFormatError, Step, make_format, parse_overrides, render
from clinjudge.prm_bridge._render import encode, keep_documents
from clinjudge.prm_bridge._segment import (
    split_chain,
    split_note,
    split_sentences,
    steps_from_note_json,
)
from tests.prm_bridge._tiny import RESERVED, build_tokenizer

R = {n: RESERVED[n - 1] for n in range(1, 9)}


@pytest.fixture(scope="module")
def medprm_tok():
    return build_tokenizer([" ки"], [" +", " -"])


@pytest.fixture(scope="module")
def clinic_tok():
    return build_tokenizer(RESERVED, [])


def test_medprm_renders_chat_with_documents_and_doubled_bos(medprm_tok):
    fmt = make_format("medprm")
    chain = Chain(
        id="q",
        preamble="Let us think.\nCarefully.",
        steps=[Step(text="a\nb"), Step(text="c")],
        question="Which drug?",
        documents=["Doc one.", "Doc two."],
    )
    enc = encode(fmt, medprm_tok, chain)
    text = medprm_tok.decode(enc.input_ids, skip_special_tokens=False).replace(" ", "")
    rendered, _ = render(fmt, chain, medprm_tok)
    assert rendered.text == (
        "<s>[system]" + fmt.system_prompt_documents + "[end][user]"
        "Document 1: Doc one.\n\nDocument 2: Doc two.\n\n"
        "Question: Which drug?\n\nExplanation: Let us think. Carefully. "
        "Step 1: a b ки Step 2: c ки[end][assistant]"
    )
    assert text.startswith("<s><s>[system]")  # the template's BOS plus the tokenizer's
    tag = medprm_tok.convert_tokens_to_ids(" ки")
    assert [enc.input_ids[p] for p in enc.positions] == [tag, tag]
    no_docs, _ = render(fmt, chain.model_copy(update={"documents": []}), medprm_tok)
    assert fmt.system_prompt in no_docs.text and "Document 1" not in no_docs.text


def test_prm_clinic_renders_the_training_layout(clinic_tok):
    fmt = make_format("prm-clinic")
    note = {
        "Problems": [
            {
                "Problem": "Asthma.",
                "Problem_no": "1",
                "Problem_score": "+",
                "Steps": [
                    {"Step": "Assessment: wheeze.", "Step_no": "1", "Step_score": "+"},
                    {"Step": "Plan: - inhaler.", "Step_no": "2", "Step_score": "-"},
                ],
                "Problem_completeness_score": "+",
            },
            {"Problem": "Follow-up instructions:", "Steps": [{"Step": "Return in 2 weeks."}]},
        ],
        "Note_completeness_score": "+",
    }
    chain = Chain(id="c", steps=steps_from_note_json(note), question="[doctor] hi\n[patient] hello")
    rendered, _ = render(fmt, chain, clinic_tok)
    assert rendered.text == (
        "You are a physician writing a clinical note based on a dialogue with the patient. Only "
        'write the "ASSESSMENT AND PLAN" part of the notes. Only include information contained '
        "in the dialogue.\n###DIALOGUE:\n[doctor] hi\n[patient] hello\n"
        "###CLINICAL NOTE-ASSESSMENT AND PLAN: \n"
        f"Asthma.{R[1]}{R[6]}Assessment: wheeze.{R[2]}{R[6]}Plan: - inhaler.{R[2]}{R[6]}"
        f"{R[3]}{R[6]}Follow-up instructions:{R[1]}{R[6]}Return in 2 weeks.{R[2]}{R[6]}"
        f"{R[3]}{R[6]}{R[4]}{R[6]}{R[5]}{R[6]}"
    )
    enc = encode(fmt, clinic_tok, chain)
    placeholder = clinic_tok.convert_tokens_to_ids(R[6])
    assert enc.input_ids.count(placeholder) == len(chain.steps) == 9
    kinds = [clinic_tok.convert_ids_to_tokens(enc.input_ids[p]) for p in enc.positions]
    assert kinds == [R[1], R[2], R[2], R[3], R[1], R[2], R[3], R[4], R[5]]
    assert [enc.input_ids[p + 1] for p in enc.positions] == [placeholder] * 9
    assert enc.input_ids[0] == clinic_tok.bos_token_id
    assert [s.label for s in chain.steps] == [1, 1, 0, 1, None, None, None, 1, 0]


def test_math_shepherd_renders_raw_lines():
    tok = build_tokenizer([], [" ки"])
    fmt = make_format("math-shepherd")
    chain = Chain(id="m", steps=[Step(text="2+2=4"), Step(text="so 4")], question="What is 2+2?")
    rendered, _ = render(fmt, chain, tok)
    assert rendered.text == "What is 2+2? Step 1: 2+2=4 ки\nStep 2: so 4 ки"
    enc = encode(fmt, tok, chain)
    assert [tok.convert_ids_to_tokens(enc.input_ids[p]) for p in enc.positions] == [" ки"] * 2


def test_marker_strings_in_user_text_are_removed_with_a_warning(clinic_tok):
    fmt = make_format("prm-clinic")
    chain = Chain(id="c", steps=[Step(text=f"Sneaky{R[7]} step", kind="sentence")])
    enc = encode(fmt, clinic_tok, chain)
    assert any("removed 1 x" in w and "step 1" in w for w in enc.warnings)
    assert clinic_tok.convert_tokens_to_ids(R[7]) not in enc.input_ids


def test_document_budget_keeps_whole_documents_in_order(medprm_tok):
    docs = ["a" * 10, "b" * 5, "c" * 1]  # 10, 5 and 1 character tokens, +1 each
    assert keep_documents(docs, medprm_tok, 17) == docs[:2]
    assert keep_documents(docs, medprm_tok, 16) == docs[:1]
    assert keep_documents(docs, medprm_tok, None) == docs
    chain = Chain(id="q", steps=[Step(text="s")], documents=docs)
    enc = encode(make_format("medprm", {"document_budget": 12}), medprm_tok, chain)
    assert any("kept 1 of 3 documents" in w for w in enc.warnings)


def test_split_chain_keeps_preamble_and_falls_back_to_lines():
    assert split_chain("Think.\n## Step 1: x\ny Step 2: z") == ("Think.", ["x\ny", "z"])
    assert split_chain("one\n\n two \nthree") == ("", ["one", "two", "three"])


def test_split_note_follows_the_step_scheme():
    note = """ASSESSMENT AND PLAN
1. Congestive heart failure exacerbation: Weight up 3 kg. Dr. Lee saw her at 2.5 p.m. today.
Plan:
- Increase furosemide to 40 mg b.i.d. for 3 days.
2. Hypertension.
BP 150/90. Continue lisinopril.
Follow-up instructions: Return in 2 weeks.
"""
    steps = split_note(note)
    assert [(s.kind, s.text) for s in steps] == [
        ("problem", "Congestive heart failure exacerbation:"),
        ("sentence", "Weight up 3 kg."),
        ("sentence", "Dr. Lee saw her at 2.5 p.m. today."),
        ("sentence", "Plan: Increase furosemide to 40 mg b.i.d. for 3 days."),
        ("problem_completeness", ""),
        ("problem", "Hypertension."),
        ("sentence", "BP 150/90."),
        ("sentence", "Continue lisinopril."),
        ("problem_completeness", ""),
        ("problem", "Follow-up instructions:"),
        ("sentence", "Return in 2 weeks."),
        ("problem_completeness", ""),
        ("note_completeness", ""),
        ("end_of_note", ""),
    ]
    assert split_sentences("Seen by Dr. A. B. Smith. Next visit e.g. Monday. Done!") == [
        "Seen by Dr. A. B. Smith.",
        "Next visit e.g. Monday.",
        "Done!",
    ]


def test_split_note_reads_scribe_titles_followed_by_bullets():
    note = """ASSESSMENT AND PLAN

Ms. Doe is a 61-year-old woman seen for follow-up.

Asthma.
• Medical Reasoning: Symptoms are controlled.
• Medical Treatment: Continue the inhaler.

Knee pain.
• Additional Testing: X-ray of the right knee.
The patient agrees with the plan.
"""
    kinds = [(s.kind, s.text) for s in split_note(note)]
    # The opening summary is the untagged preamble (see test_sections.py), not a problem.
    assert kinds == [
        ("problem", "Asthma."),
        ("sentence", "Medical Reasoning: Symptoms are controlled."),
        ("sentence", "Medical Treatment: Continue the inhaler."),
        ("problem_completeness", ""),
        ("problem", "Knee pain."),
        ("sentence", "Additional Testing: X-ray of the right knee."),
        ("sentence", "The patient agrees with the plan."),
        ("problem_completeness", ""),
        ("note_completeness", ""),
        ("end_of_note", ""),
    ]
    # A short sentence without bullets after it stays a sentence.
    assert [s.kind for s in split_note("Asthma.\nStable today.")][:2] == ["sentence", "sentence"]


def test_note_json_error_types_and_end_of_note_rule():
    note = {
        "Problems": [
            {"Problem": "P1", "Steps": [{"Step": "s1"}, {"Step": "s2"}]},
            {"Note_completeness_score": "+"},
        ],
        "Swapped_info": [
            {"Error_level": "Step", "Problem_no": "1", "Step_no": "2", "Error_type": "Halluc"}
        ],
        "Removed_info": [{"Change_type": "Step Incompleteness", "Problem_no": "1"}],
    }
    steps = steps_from_note_json(note)
    assert [(s.kind, s.label, s.error_type) for s in steps] == [
        ("problem", None, None),
        ("sentence", None, None),
        ("sentence", 0, "Halluc"),
        ("problem_completeness", 0, "Step Incompleteness"),
        ("note_completeness", 1, None),
        ("end_of_note", 0, None),
    ]
    with pytest.raises(ValueError, match="Problems must be a list"):
        steps_from_note_json({"Problems": "x"})


def test_overrides_and_custom_format():
    assert parse_overrides(['step_tag=" <step>"', "read_offset=-1", "template=raw"]) == {
        "step_tag": " <step>",
        "read_offset": -1,
        "template": "raw",
    }
    fmt = make_format("custom", {"step_tag": "\n\n", "plus": "yes", "softmax": "vocab"})
    assert (fmt.step_tag, fmt.softmax, fmt.template) == ("\n\n", "vocab", "raw")
    with pytest.raises(PRMFormatError, match="expected KEY=VALUE"):
        parse_overrides(["nope"])
    with pytest.raises(PRMFormatError, match="read_offset"):
        make_format("medprm", {"read_offset": 2})
    with pytest.raises(PRMFormatError, match="unknown field"):
        make_format("medprm", {"prompt": "{solution} {oops}"})
    with pytest.raises(PRMFormatError, match="step_tag, kind_tokens or a placeholder"):
        make_format("custom", {"step_tag": ""})
