"""DocLens runs end to end (single, panel, magentic) against the fake OpenAI server.

The fake judge follows the hand-checkable rules of ``tests/doclens_fake.py``; the expected
values below are worked out by hand in the comments.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from clinjudge.judges import DocLensSettings, ModelSettings
from clinjudge.judges.doclens._judges import UnitVerdict
from clinjudge.judges.doclens._workflows import doclens_estimate_prompts, majority
from clinjudge.judges.workflows import workflow_for
from clinjudge.orchestration import RetryPolicy, RunConfig, create_run, execute_run, prepare_run
from clinjudge.personas import resolve_personas
from clinjudge.rubrics import load_rubric
from clinjudge.runs import RunStore
from tests.doclens_fake import (
    BATCH_MARKER,
    DECISION_MARKER,
    EXPECTED,
    ITEMS,
    SINGLE_MARKER,
    make_responder,
)
from tests.factories import write_jsonl
from tests.fake_openai import FakeOpenAIServer, Fault

FAST = RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.02, jitter=0.0)


def run_doclens(
    tmp_path: Path, responder: Any, *, mode: str = "single", faults: Any = None, **config: Any
) -> tuple[RunStore, str, Any, FakeOpenAIServer]:
    data = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    with FakeOpenAIServer(responder, faults=faults) as server:
        judge = ModelSettings(model="openai/local-judge", base_url=server.base_url, timeout=5.0)
        run_config = RunConfig(
            rubric="doclens",
            mode=mode,
            data=str(data),
            db=str(tmp_path / "runs.duckdb"),
            judge=judge,
            retry=FAST,
            personas="scoring",
            **config,
        )
        prepared = prepare_run(run_config)
        store = RunStore(run_config.db)
        run_id = create_run(store, prepared)
        tally = execute_run(store, run_id, prepared, show_progress=False)
    return store, run_id, tally, server


def metrics(store: RunStore, run_id: str, agent: str) -> dict[str, dict[str, float | None]]:
    rows = store.query(
        "SELECT item_id, attribute, value FROM judgments WHERE run_id = ? AND agent = ?",
        [run_id, agent],
    )
    found: dict[str, dict[str, float | None]] = {}
    for row in rows:
        found.setdefault(row["item_id"], {})[row["attribute"]] = row["value"]
    return found


def assert_metrics(got: dict[str, dict[str, float | None]], want: dict[str, Any]) -> None:
    assert set(got) == set(want)
    for item_id, values in want.items():
        assert got[item_id] == pytest.approx(values), item_id


def test_claim_rubric_gets_claim_workflows() -> None:
    rubric = load_rubric("doclens")
    assert rubric.method == "claims"
    assert [workflow_for(m, rubric)[0] for m in ("single", "panel", "magentic")] == [
        "judge",
        "panel",
        "orchestrator",
    ]
    assert workflow_for("single", rubric)[1] is not workflow_for("single")[1]


def test_single_mode_metrics_and_claims_rows(tmp_path: Path) -> None:
    store, run_id, tally, server = run_doclens(tmp_path, make_responder())
    assert (tally.ok, tally.failed) == (2, 0)
    assert_metrics(metrics(store, run_id, "judge"), EXPECTED)
    assert_metrics(metrics(store, run_id, "final"), EXPECTED)

    rows = store.query(
        "SELECT * FROM claims WHERE run_id = ? AND item_id = 'a' ORDER BY kind, idx", [run_id]
    )
    by_kind = Counter(r["kind"] for r in rows)
    assert by_kind == {"recall": 3, "precision": 3, "citation": 3, "extraction": 2}
    assert {r["section"] for r in rows} == {"subjective"}
    citations = [r for r in rows if r["kind"] == "citation"]
    assert [json.loads(r["citations"]) for r in citations] == [[1], [2, 3], [0]]
    assert [json.loads(r["supporting"]) for r in citations] == [[1], [2], []]
    assert [r["verdict"] for r in citations] == ["entailed", "entailed", "not_entailed"]
    recall = [r for r in rows if r["kind"] == "recall"]
    assert recall[2]["text"] == "The patient has no chest pain"
    assert recall[2]["verdict"] == "not_entailed" and recall[2]["explanation"] == "fake rule"

    # Item b: borrowed citation noted; unknown unit judged without a call.
    rows_b = store.query(
        "SELECT * FROM claims WHERE run_id = ? AND item_id = 'b' AND kind = 'citation' "
        "ORDER BY idx",
        [run_id],
    )
    assert json.loads(rows_b[0]["citations"]) == [2]
    assert "borrowed" in rows_b[0]["explanation"]
    assert "unknown source unit" in rows_b[2]["explanation"]

    # Calls: 2 extractions + 2 batch entailments + statements with known citations (3 + 2).
    assert server.request_count == 2 * (2 + 2) + 3 + 2
    calls = store.query("SELECT DISTINCT agent, role FROM calls WHERE run_id = ?", [run_id])
    assert calls == [{"agent": "judge", "role": "judge"}]
    store.close()


def test_uncited_zero_policy_and_one_based_citations(tmp_path: Path) -> None:
    items = [
        i.model_copy(update={"summary": i.summary.replace("[2]", "[3]").replace("[1]", "[2]")})
        if i.id == "b"
        else i
        for i in ITEMS
    ]
    del items[0]
    data = write_jsonl(tmp_path / "items.jsonl", items)
    with FakeOpenAIServer(make_responder()) as server:
        config = RunConfig(
            rubric="doclens",
            data=str(data),
            db=str(tmp_path / "runs.duckdb"),
            judge=ModelSettings(model="openai/x", base_url=server.base_url, timeout=5.0),
            retry=FAST,
            doclens=DocLensSettings(uncited="zero", citation_base=1),
        )
        prepared = prepare_run(config)
        store = RunStore(config.db)
        run_id = create_run(store, prepared)
        execute_run(store, run_id, prepared, show_progress=False)
    # 1-based: [3] is "return in two weeks". The uncited sentence scores 0 with no citations.
    got = metrics(store, run_id, "judge")["b"]
    assert got["citation_recall"] == pytest.approx(1 / 3)
    assert got["citation_precision"] == pytest.approx(1 / 2)
    store.close()


def test_failed_entailments_stay_in_denominators(tmp_path: Path) -> None:
    def broken(body: dict[str, Any]) -> str | None:
        system = body["messages"][0]["content"]
        claims = body["messages"][1]["content"].partition("<CLAIMS>")[2]
        if BATCH_MARKER in system and "Follow up with cardiology" in claims:
            return "I cannot answer that."
        if SINGLE_MARKER in system and "Follow up with cardiology" in claims:
            return '{"explanation": "unsure"}'
        return None

    store, run_id, tally, _ = run_doclens(tmp_path, make_responder(broken=broken), max_repairs=1)
    assert tally.ok == 2
    row = store.query(
        "SELECT * FROM claims WHERE run_id = ? AND item_id = 'b' AND kind = 'precision' "
        "AND text = 'Follow up with cardiology'",
        [run_id],
    )[0]
    assert row["verdict"] == "failed" and row["status"] == "failed"
    assert "invalid reply after 1 repair" in row["error"] and "batch call" in row["error"]
    # The other two precision claims were judged one by one after the batch failed.
    verdicts = store.query(
        "SELECT verdict FROM claims WHERE run_id = ? AND item_id = 'b' AND kind = 'precision' "
        "ORDER BY idx",
        [run_id],
    )
    assert [v["verdict"] for v in verdicts] == ["entailed", "entailed", "failed"]
    judged = store.query(
        "SELECT value, error, rationale FROM judgments WHERE run_id = ? AND item_id = 'b' "
        "AND agent = 'judge' AND attribute = 'claim_precision'",
        [run_id],
    )[0]
    assert judged["value"] == pytest.approx(2 / 3)  # not 2/2: the failure stays counted
    assert "1 entailment judgment(s) failed" in judged["error"]
    assert "1 judgment(s) failed" in judged["rationale"]
    store.close()


def test_panel_mode_majority_and_member_rows(tmp_path: Path) -> None:
    store, run_id, tally, _ = run_doclens(tmp_path, make_responder(), mode="panel")
    assert tally.ok == 2
    # high and middle follow the rules, low always says 0: the majority equals the rules.
    assert_metrics(metrics(store, run_id, "panel"), EXPECTED)
    low = metrics(store, run_id, "low_scorer")
    assert all(v == 0.0 for item in low.values() for v in item.values())
    agents = Counter(
        r["agent"]
        for r in store.query(
            "SELECT agent FROM claims WHERE run_id = ? AND kind = 'recall'", [run_id]
        )
    )
    assert agents == dict.fromkeys(["panel", "high_scorer", "low_scorer", "middle_scorer"], 5)
    roles = {
        r["agent"]: r["role"]
        for r in store.query("SELECT DISTINCT agent, role FROM calls WHERE run_id = ?", [run_id])
    }
    assert roles == {
        "extractor": "extractor",
        "high_scorer": "panel_member",
        "low_scorer": "panel_member",
        "middle_scorer": "panel_member",
    }
    store.close()


def test_magentic_mode_orchestrator_decides_only_disputed(tmp_path: Path) -> None:
    # Disputed = every unit the rules call entailed (low_scorer says 0). The orchestrator
    # overrules the majority on recall-0 of each item and accepts the rest.
    responder = make_responder(orchestrator_verdicts={"recall-0": 0})
    store, run_id, tally, server = run_doclens(tmp_path, responder, mode="magentic", rounds=1)
    assert tally.ok == 2
    got = metrics(store, run_id, "orchestrator")
    assert got["a"]["claim_recall"] == pytest.approx(1 / 3)
    assert got["b"]["claim_recall"] == pytest.approx(1 / 2)
    for item_id in ("a", "b"):
        for key in ("claim_precision", "citation_recall"):
            assert got[item_id][key] == pytest.approx(EXPECTED[item_id][key])
    # Decisions name only disputed ids; unanimous "not entailed" units never reach it.
    decisions = [b for b in server.requests if "leading a panel" in b["messages"][0]["content"]]
    assert len(decisions) == 2
    user = decisions[0]["messages"][1]["content"]
    asked = json.loads(user.split("<DISCUSSION>\n")[1].split("\n</DISCUSSION>")[0])
    ids = {d["id"] for d in asked}
    assert "recall-2" not in ids and "recall-0" in ids
    discussion_votes = asked[0]["votes"]
    assert {v["stage"] for v in discussion_votes} == {"independent vote", "round 1"}
    calls = {r["agent"] for r in store.query("SELECT agent FROM calls WHERE run_id = ?", [run_id])}
    assert calls == {"extractor", "high_scorer", "low_scorer", "middle_scorer", "orchestrator"}
    store.close()


def test_provider_faults_fail_judgments_not_the_run(tmp_path: Path) -> None:
    def faults(_index: int, body: dict[str, Any]) -> Fault | None:
        user = body["messages"][-1]["content"]
        return Fault("server_error") if "<STATEMENT>\nThe patient has a headache" in user else None

    store, run_id, tally, _ = run_doclens(tmp_path, make_responder(), faults=faults)
    assert tally.ok == 2
    row = store.query(
        "SELECT verdict, error FROM claims WHERE run_id = ? AND item_id = 'a' "
        "AND kind = 'citation' AND idx = 2",
        [run_id],
    )[0]
    assert row["verdict"] == "failed" and row["error"].startswith("provider:")
    # Its one citation stays in the precision denominator, the statement in recall's.
    got = metrics(store, run_id, "judge")["a"]
    assert got["citation_recall"] == pytest.approx(2 / 3)
    assert got["citation_precision"] == pytest.approx(2 / 4)
    failed_calls = store.query(
        "SELECT count(*) AS n FROM calls WHERE run_id = ? AND status <> 'ok'", [run_id]
    )[0]["n"]
    assert failed_calls == FAST.max_attempts  # every attempt is recorded
    store.close()


def test_truncated_replies_are_repaired_with_more_room(tmp_path: Path) -> None:
    # Issue #28: the same cap would cut a greedy model's reply in the same place again.
    def faults(_index: int, body: dict[str, Any]) -> Fault | None:
        return Fault("truncated") if body.get("max_tokens", 0) < 800 else None

    store, run_id, tally, server = run_doclens(tmp_path, make_responder(), faults=faults)
    assert (tally.ok, tally.failed) == (2, 0)
    assert_metrics(metrics(store, run_id, "judge"), EXPECTED)
    caps = Counter(body["max_tokens"] for body in server.requests)
    assert set(caps) == {400, 800}  # calls, then repairs of the replies that did not parse
    repairs = [b["messages"][-1]["content"] for b in server.requests if b["max_tokens"] == 800]
    assert all("reply truncated at the token limit (max_tokens 400" in r for r in repairs)
    store.close()


def test_majority_ties_and_failures() -> None:
    yes = UnitVerdict("entailed", supporting=[1, 2])
    yes_one = UnitVerdict("entailed", supporting=[1])
    no = UnitVerdict("not_entailed")
    failed = UnitVerdict("failed", error="provider: 500")
    decided = majority([yes, yes_one, no], citations=[1, 2])
    assert decided.verdict == "entailed" and decided.supporting == [1]
    assert decided.score == pytest.approx(2 / 3)
    tie = majority([yes, no, failed], citations=[1, 2])
    assert tie.verdict == "not_entailed" and "tie" in (tie.explanation or "")
    assert "1 member(s) failed" in (tie.explanation or "")
    none = majority([failed, failed])
    assert none.verdict == "failed" and "provider: 500" in (none.error or "")


def test_magentic_orchestrator_failure_fails_disputed_claims_only(tmp_path: Path) -> None:
    def broken(body: dict[str, Any]) -> str | None:
        return "no idea" if DECISION_MARKER in body["messages"][0]["content"] else None

    responder = make_responder(broken=broken)
    store, run_id, tally, _ = run_doclens(tmp_path, responder, mode="magentic", max_repairs=0)
    assert tally.ok == 2
    rows = store.query(
        "SELECT kind, idx, verdict, error FROM claims WHERE run_id = ? AND item_id = 'a' "
        "AND agent = 'orchestrator' AND kind = 'recall' ORDER BY idx",
        [run_id],
    )
    # recall-0 and recall-1 were disputed (low_scorer said 0); recall-2 was unanimous.
    assert [r["verdict"] for r in rows] == ["failed", "failed", "not_entailed"]
    assert rows[0]["error"].startswith("orchestrator gave no verdict")
    got = metrics(store, run_id, "orchestrator")["a"]
    assert got["claim_recall"] == 0.0
    store.close()


def test_estimate_prompts_match_the_calls_made() -> None:
    # Item a in single mode: 2 extractions, 2 batch entailments, 3 cited statements.
    single = doclens_estimate_prompts(ITEMS[0], RunConfig(rubric="doclens"))
    assert len(single) == 7
    panel_config = RunConfig(rubric="doclens", mode="panel")
    panel = doclens_estimate_prompts(ITEMS[0], panel_config, resolve_personas("scoring"))
    assert len(panel) == 2 + 3 * 5
    nli = RunConfig(rubric="doclens", doclens=DocLensSettings(nli_model="x"))
    assert len(doclens_estimate_prompts(ITEMS[0], nli)) == 2


def test_repeated_samples_and_resume_write_each_row_once(tmp_path: Path) -> None:
    store, run_id, tally, _ = run_doclens(tmp_path, make_responder(), samples=2)
    assert tally.ok == 4
    per_sample = store.query(
        "SELECT sample, count(*) AS n FROM claims WHERE run_id = ? GROUP BY sample ORDER BY 1",
        [run_id],
    )
    assert [(r["sample"], r["n"]) for r in per_sample] == [(1, 21), (2, 21)]
    assert_metrics(metrics(store, run_id, "final"), EXPECTED)
    # Writing a finished sample's rows again (as a resume after a crash would) adds nothing.
    rows = store.query("SELECT * FROM claims WHERE run_id = ?", [run_id])
    store.write_batch({"claims": rows})
    assert store.query("SELECT count(*) AS n FROM claims WHERE run_id = ?", [run_id])[0]["n"] == 42
    store.close()
