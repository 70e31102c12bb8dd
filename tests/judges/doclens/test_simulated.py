"""The ``mock/`` provider answers DocLens prompts with valid, deterministic, simulated replies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from clinjudge.judges import JudgeModel, ModelSettings
from clinjudge.judges.clients import CallConfig
from clinjudge.judges.doclens import _prompts as prompts
from clinjudge.judges.doclens._parse import (
    parse_claims,
    parse_entailment,
    parse_entailments,
    parse_keyed,
)
from clinjudge.judges.doclens._simulated import (
    CITATION_THRESHOLD,
    ENTAILMENT_THRESHOLD,
    coverage,
    doclens_kind,
    simulated_claims,
    simulated_doclens_reply,
)
from clinjudge.rubrics import ChatTurn, load_rubric
from tests.cli._helpers import invoke, query

DEMO = str(Path(__file__).resolve().parents[3] / "examples" / "doclens_demo.jsonl")
DOCUMENT = (
    "The patient has had a dry cough for two weeks. She denies fever. She takes lisinopril "
    "10 mg daily for hypertension. Lungs show bilateral wheezing without crackles."
)
CLAIMS = [
    "The patient has had a dry cough for two weeks",
    "She denies fever",
    "She takes lisinopril 10 mg daily",
    "Lungs show bilateral wheezing",
    "She reports weight loss",
    "An MRI of the brain was ordered",
    "Her father had colon cancer",
    "She drinks alcohol every evening",
]
STANCES = [None, "You are High Scorer.", "You are Low Scorer.", "You are Middle Scorer."]


def reply(turns: list[ChatTurn], seed: str = "judge|") -> str:
    text = simulated_doclens_reply([t.content for t in turns], seed)
    assert text is not None
    return text


def all_prompts() -> dict[str, list[ChatTurn]]:
    disputes = [{"id": "recall-0", "text": CLAIMS[0], "votes": []}]
    context = prompts.fence("DOCUMENT", DOCUMENT) + "\n" + prompts.fence("DOCUMENT", DOCUMENT)
    return {
        "extraction": prompts.extraction_messages(DOCUMENT, min_claims=1, max_claims=30),
        "batch": prompts.entailment_messages(DOCUMENT, CLAIMS, document_label="reference note"),
        "single": prompts.claim_messages(DOCUMENT, CLAIMS[0], document_label="generated note"),
        "citation": prompts.citation_messages(CLAIMS[0], {1: DOCUMENT}),
        "discussion": prompts.discussion_messages(context, disputes, stance="You are X."),
        "decision": prompts.decision_messages(context, disputes),
    }


def test_every_prompt_kind_is_recognised_by_its_own_marker_only() -> None:
    markers = [
        prompts.EXTRACTION_MARKER,
        prompts.BATCH_MARKER,
        prompts.SINGLE_MARKER,
        prompts.CITATION_MARKER,
        prompts.DISCUSSION_MARKER,
        prompts.DECISION_MARKER,
    ]
    for kind, turns in all_prompts().items():
        system = turns[0].content
        assert doclens_kind(system) == kind
        assert sum(marker in system for marker in markers) == 1, kind


def test_other_requests_are_not_answered() -> None:
    assert simulated_doclens_reply(["Score this summary.", "<SUMMARY>x</SUMMARY>"], "s") is None
    assert simulated_doclens_reply([], "s") is None


def test_extraction_gives_the_sentences_and_clauses_as_claims() -> None:
    claims = parse_claims(reply(all_prompts()["extraction"]))
    assert claims == [
        "The patient has had a dry cough for two weeks",
        "She denies fever",
        "She takes lisinopril 10 mg daily for hypertension",
        "Lungs show bilateral wheezing without crackles",
    ]
    split = simulated_claims("She denies fever and reports mild dyspnea on stairs.")
    assert split == ["She denies fever", "Reports mild dyspnea on stairs"]
    assert simulated_claims("ASSESSMENT:") == ["ASSESSMENT:"]  # never an empty list


def test_extraction_respects_the_claim_limits_in_the_prompt() -> None:
    few = prompts.extraction_messages(DOCUMENT, min_claims=1, max_claims=2)
    assert len(parse_claims(reply(few))) == 2
    many = prompts.extraction_messages("Cough for two weeks at night.", min_claims=3, max_claims=9)
    claims = parse_claims(reply(many))
    assert len(claims) == 3
    assert " ".join(claims) == "Cough for two weeks at night"


def check_rule(entailed: bool, explanation: str | None, share: float, threshold: float) -> None:
    assert explanation is not None and explanation.startswith("SIMULATED (mock provider)")
    flipped = "flipped" in explanation
    assert entailed == ((share >= threshold) != flipped)


def test_batch_entailment_gives_one_rule_verdict_per_claim_with_a_few_flips() -> None:
    flips, verdicts = 0, []
    for stance in STANCES:
        turns = prompts.entailment_messages(
            DOCUMENT, CLAIMS, document_label="generated note", stance=stance
        )
        got = parse_entailments(reply(turns), CLAIMS)
        assert all(g is not None for g in got)
        for claim, entry in zip(CLAIMS, got, strict=True):
            assert entry is not None and entry.claim == claim
            check_rule(entry.entailed, entry.explanation, coverage(claim, DOCUMENT), 0.7)
            flips += "flipped" in (entry.explanation or "")
        verdicts.append([g.entailed for g in got if g is not None])
    total = len(STANCES) * len(CLAIMS)
    assert 0 < flips < total / 3  # not trivially perfect, still mostly the rule
    assert len({tuple(v) for v in verdicts}) > 1  # personas (stances) disagree somewhere
    assert ENTAILMENT_THRESHOLD == 0.7


def test_single_claim_and_citation_replies_parse() -> None:
    single = parse_entailment(reply(all_prompts()["single"]))
    check_rule(single.entailed, single.explanation, coverage(CLAIMS[0], DOCUMENT), 0.7)
    units = {3: "[patient] i have had a dry cough for two weeks", 4: "[doctor] any allergies?"}
    got = parse_entailment(reply(prompts.citation_messages(CLAIMS[0], units)))
    check_rule(got.entailed, got.explanation, coverage(CLAIMS[0], units[3]), CITATION_THRESHOLD)
    if got.entailed:
        assert got.supporting == [3]
    unrelated = parse_entailment(reply(prompts.citation_messages("An MRI was ordered", units)))
    assert unrelated.supporting == []


def test_discussion_sides_with_the_majority_and_the_chair_applies_the_rule() -> None:
    context = (
        f"REFERENCE NOTE\n{prompts.fence('DOCUMENT', 'She denies fever.')}\n\n"
        f"GENERATED NOTE\n{prompts.fence('DOCUMENT', DOCUMENT)}"
    )
    votes = [{"member": m, "entailed": v} for m, v in (("a", 0), ("b", 0), ("c", 1))]
    disputes = [
        {"id": "recall-0", "text": "She denies fever", "votes": votes},
        {"id": "precision-2", "text": "She takes lisinopril 10 mg daily", "votes": votes},
        {
            "id": "citation-1",
            "text": "Dry cough for two weeks",
            "cited_units": {"2": "[patient] dry cough, two weeks now", "5": "[doctor] okay"},
            "votes": votes,
        },
    ]
    ids = [d["id"] for d in disputes]
    said = parse_keyed(reply(prompts.discussion_messages(context, disputes)), ids)
    assert {k: v.entailed for k, v in said.items()} == dict.fromkeys(ids, False)
    decided = parse_keyed(reply(prompts.decision_messages(context, disputes)), ids)
    # recall claims are judged against the generated note, precision claims against the
    # reference, statements against their cited units
    assert {k: v.entailed for k, v in decided.items()} == {
        "recall-0": True,
        "precision-2": False,
        "citation-1": True,
    }
    assert decided["citation-1"].supporting == [2]


def test_the_mock_model_answers_doclens_prompts_deterministically() -> None:
    rubric = load_rubric("doclens")
    turns = all_prompts()["batch"]

    async def go() -> list[str]:
        judge = JudgeModel(ModelSettings(model="mock/judge"), rubric)
        try:
            return [
                (await judge.generate(list(turns), CallConfig(variation="1"))).text
                for _ in range(2)
            ]
        finally:
            await judge.close()

    first, second = asyncio.run(go())
    assert first == second
    assert len(parse_entailments(first, CLAIMS)) == len(CLAIMS)
    assert isinstance(json.loads(first), list)


def run_demo(tmp_path: Path, mode: str, name: str = "run") -> tuple[Path, object]:
    db = tmp_path / f"{name}.duckdb"
    result = invoke(
        "run", "--rubric", "doclens", "--data", DEMO, "--db", str(db), "--mode", mode,
        "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return db, result


@pytest.mark.parametrize("mode", ["single", "panel", "magentic"])
def test_cli_doclens_run_with_the_mock_succeeds(tmp_path: Path, mode: str) -> None:
    db, result = run_demo(tmp_path, mode)
    assert "SIMULATED" in result.stderr  # type: ignore[attr-defined]
    assert query(db, "select bool_and(simulated) from runs") == [(True,)]
    statuses = query(db, "select distinct status from samples")
    assert statuses == [("ok",)]
    kinds = dict(query(db, "select kind, count(*) from claims group by kind"))
    assert set(kinds) == {"extraction", "recall", "precision", "citation"}
    assert query(db, "select count(*) from claims where status <> 'ok'") == [(0,)]
    values = [v for (v,) in query(db, "select value from judgments where final")]
    assert len(values) == 3 * 4 and all(0 <= v <= 1 for v in values)
    assert len(set(values)) > 2
    if mode != "single":
        members = query(db, "select count(distinct agent) from claims where kind = 'recall'")
        assert members == [(4,)]  # three personas plus the decision


def test_cli_doclens_mock_runs_are_reproducible(tmp_path: Path) -> None:
    sql = {
        "claims": "select item_id, agent, kind, idx, text, verdict, supporting from claims "
        "order by all",
        "judgments": "select item_id, agent, attribute, value from judgments order by all",
    }
    first, _ = run_demo(tmp_path, "magentic", "first")
    second, _ = run_demo(tmp_path, "magentic", "second")
    for statement in sql.values():
        assert query(first, statement) == query(second, statement)
    assert query(first, "select count(*) from claims")[0][0] > 20
