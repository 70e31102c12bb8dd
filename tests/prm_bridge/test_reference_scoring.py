"""The ``medprm`` and ``prm-clinic`` presets score what the reference code scores.

Expected values come from transcriptions of the reference procedures written here, step by
step as the released code does them (Med-PRM: cut and tag the solution, pick the system prompt
by mode, template, read the pair softmax where the text is " ки"; PRM-Clinic: full-vocabulary
softmax before each placeholder, note score = sum of logs with non-positive values replaced),
run on tiny random checkpoints; nothing here calls our renderer.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from clinjudge.prm_bridge import Chain, Step, TransformersPRM, aggregate, make_format
from clinjudge.prm_bridge._inputs import chain_from_text
from tests.prm_bridge._tiny import (
    RESERVED,
    isolate_positions,
    save_tiny,
    set_kind_logits,
    torch,
    transformers,
)

# Facts of Med-PRM's scoring script: its two PRM system prompts (the RAG one ends in a space).
RAG_PROMPT = (
    "You are an evaluator assessing the logicality and validity of the reasoning in each step "
    "of the given explanation. In order to support the evaluation, the relevant documents, the "
    "question, and the explanation are provided sequentially. If the reasoning contains errors, "
    "output - after that step. If the reasoning in a step is logical and valid, output + after "
    "that step. "
)
PLAIN_PROMPT = (
    "You are an evaluator assessing the logicality and validity of the reasoning in each step "
    "of the given explanation. In order to support the evaluation, the question and the "
    "explanation are provided. If the reasoning contains errors, output - after that step. If "
    "the reasoning in a step is logical and valid, output + after that step."
)


def tag_solution(solution: str) -> str:
    """Med-PRM's solution preparation: newlines to spaces, cut before every ``(## )?Step n:``,
    each piece stripped, ``"## "`` deleted, `` ки`` appended; the head stays untagged."""
    flat = solution.replace("\n", " ")
    starts = [m.start() for m in re.finditer(r"(?:## )?Step \d+:", flat)]
    if not starts:
        return flat.strip() + " ки" if flat.strip() else ""
    ends = starts[1:] + [len(flat)]
    tagged = [
        flat[a:b].strip().replace("## ", "") + " ки" for a, b in zip(starts, ends, strict=True)
    ]
    head = flat[: starts[0]].strip()
    return " ".join(([head] if head else []) + tagged)


def medprm_reference(
    path: Path, question: str, solution: str, docs: list[str], rag: bool, budget: int = 3072
) -> list[float]:
    """P(+) per tag, as Med-PRM's scoring script computes it."""
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    kept, used = [], 0
    for doc in docs:  # whole documents while they fit, one extra token each
        cost = len(tok(doc, add_special_tokens=False)["input_ids"]) + 1
        if used + cost > budget:
            break
        kept.append(doc)
        used += cost
    block = "".join(f"Document {i + 1}: {d}\n\n" for i, d in enumerate(kept))
    user = f"{block}Question: {question}\n\nExplanation: {tag_solution(solution)}"
    messages = [
        {"role": "system", "content": RAG_PROMPT if rag else PLAIN_PROMPT},
        {"role": "user", "content": user},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    enc = tok(text, return_offsets_mapping=True, add_special_tokens=True)
    where = [i for i, (s, e) in enumerate(enc["offset_mapping"]) if text[s:e] == " ки"]
    plus = tok(" +", add_special_tokens=False)["input_ids"][0]
    minus = tok(" -", add_special_tokens=False)["input_ids"][0]
    with torch.no_grad():
        logits = model(torch.tensor([enc["input_ids"]])).logits[0]
    return [torch.softmax(logits[i, [plus, minus]], dim=0)[0].item() for i in where]


@pytest.fixture(scope="module")
def medprm(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("medprm_reference")
    save_tiny(path, "medprm", seed=11)
    return path


def _ours(path: Path, text: str, docs: list[str] | None, **overrides) -> list[float | None]:
    scorer = TransformersPRM(str(path), make_format("medprm", overrides), device="cpu")
    chain = chain_from_text("q", text, "medprm", question="Which diagnosis?", documents=docs)
    [result] = scorer.score([chain])
    assert result.error is None, result.error
    return [s.score for s in result.steps]


SHAPES = {
    # (a) Med-PRM's own prompt asks for a "## Final Diagnosis:" ending
    "final diagnosis heading": (
        "## Step 1: Fever and a new murmur.\n## Step 2: Blood cultures are positive.\n"
        "## Step 3: ## Final Diagnosis: infective endocarditis"
    ),
    "heading inside the last step": (
        "Step 1: Pleuritic pain after a long flight.\nStep 2: Tachycardia.\n"
        "## Final Diagnosis: pulmonary embolism"
    ),
    # (b) spacing kept, numbers not renumbered, empty steps scored
    "spacing, skipped number, empty step": (
        "Step 1:   Three spaces before this step.\nStep 3: Number two was skipped.\n"
        "Step 4:\nStep 5: After an empty step."
    ),
    "preamble and a hash before a line break": (
        "Let us reason.\nStep 1: First claim. ##\nStep 2: Second claim."
    ),
    "no markers at all": "One paragraph of reasoning.\nIt goes on over two lines.",
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_medprm_steps_match_the_reference(medprm, shape):
    text = SHAPES[shape]
    expected = medprm_reference(medprm, "Which diagnosis?", text, [], rag=False)
    got = _ours(medprm, text, None)
    assert len(got) == len(expected)
    assert got == pytest.approx(expected, abs=1e-5)


def test_medprm_empty_step_adds_a_score(medprm):
    text = SHAPES["spacing, skipped number, empty step"]
    assert len(_ours(medprm, text, None)) == 4  # Step 4 has no text and is scored too


def test_medprm_picks_the_document_prompt_by_mode(medprm):
    text = "Step 1: Cough and fever.\nStep 2: Consolidation on the film."
    long_doc = "An unrelated and rather long document. " * 6
    cases = [
        (["Pneumonia presents with cough and fever."], {}),  # documents fit
        ([long_doc], {"document_budget": 10}),  # given, none fits the budget
        ([], {}),  # document mode, empty document block
        ([""], {}),  # one empty document
    ]
    for docs, overrides in cases:
        budget = overrides.get("document_budget", 3072)
        expected = medprm_reference(medprm, "Which diagnosis?", text, docs, rag=True, budget=budget)
        assert _ours(medprm, text, docs, **overrides) == pytest.approx(expected, abs=1e-5)
    plain = medprm_reference(medprm, "Which diagnosis?", text, [], rag=False)
    assert _ours(medprm, text, None) == pytest.approx(plain, abs=1e-5)
    rag_empty = medprm_reference(medprm, "Which diagnosis?", text, [], rag=True)
    assert rag_empty != pytest.approx(plain, abs=1e-5)  # the prompt really changes the scores


def test_documents_field_present_means_document_mode(medprm, tmp_path):
    from clinjudge.prm_bridge import load_chains

    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"id": "a", "text": "Step 1: x", "documents": []}\n{"id": "b", "text": "Step 1: x"}\n',
        encoding="utf-8",
    )
    first, second = load_chains(path, "medprm")
    assert first.grounded and not second.grounded


# -- PRM-Clinic: note-level product ------------------------------------------------------------


def clinic_note_score(probabilities: list[float]) -> float:
    """PRM-Clinic's note-level score: sum of logs, a non-positive probability replaced by 1e-10."""
    return sum(math.log(p) if p > 0 else math.log(1e-10) for p in probabilities)


def clinic_reference(path: Path, text: str) -> list[float]:
    """Full-vocabulary P(+) at the token before every placeholder, as PRM-Clinic reads it."""
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    ids = tok(text, return_tensors="pt", add_special_tokens=True)["input_ids"]
    placeholder = tok.convert_tokens_to_ids(RESERVED[5])
    plus = tok.convert_tokens_to_ids(RESERVED[6])
    with torch.no_grad():
        logits = model(ids).logits[0]
    where = (ids[0] == placeholder).nonzero().flatten().tolist()
    return [torch.softmax(logits[i - 1].double(), dim=-1)[plus].item() for i in where]


def test_prm_clinic_product_floors_only_non_positive(tmp_path):
    tokenizer, model = save_tiny(tmp_path, "prm-clinic", seed=5)
    isolate_positions(model)
    logits = {1: 4.0, 2: -19.5, 3: 0.5, 4: -27.0, 5: 2.0}  # kind token -> logit of '+'
    set_kind_logits(model, tokenizer, logits)
    model.save_pretrained(tmp_path)
    steps = [
        Step(text="Asthma.", kind="problem"),
        Step(text="Wheeze today.", kind="sentence"),
        Step(kind="problem_completeness"),
        Step(kind="note_completeness"),
        Step(kind="end_of_note"),
    ]
    slot = RESERVED[5]
    text = (
        "You are a physician writing a clinical note based on a dialogue with the patient. Only "
        'write the "ASSESSMENT AND PLAN" part of the notes. Only include information contained '
        "in the dialogue.\n###DIALOGUE:\n[doctor] hi\n###CLINICAL NOTE-ASSESSMENT AND PLAN: \n"
        f"Asthma.{RESERVED[0]}{slot}Wheeze today.{RESERVED[1]}{slot}{RESERVED[2]}{slot}"
        f"{RESERVED[3]}{slot}{RESERVED[4]}{slot}"
    )
    probabilities = clinic_reference(tmp_path, text)
    assert len(probabilities) == 5
    assert any(0 < p < 1e-10 for p in probabilities) and max(probabilities) > 0.01
    scorer = TransformersPRM(str(tmp_path), make_format("prm-clinic"), device="cpu")
    [result] = scorer.score([Chain(id="c", steps=steps, question="[doctor] hi")])
    ours = [s.score for s in result.steps]
    assert ours == pytest.approx(probabilities, rel=1e-4)
    expected = clinic_note_score(probabilities)
    assert result.aggregates["product"] == pytest.approx(expected, rel=1e-4)
    floored_everywhere = sum(math.log(max(p, 1e-10)) for p in probabilities)
    assert abs(expected - floored_everywhere) > 1.0  # the test tells the two rules apart
    assert aggregate([0.0, -0.0, 0.5], "product") == pytest.approx(
        2 * math.log(1e-10) + math.log(0.5)
    )
