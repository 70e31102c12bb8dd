"""The magentic mode end to end against the fake OpenAI server (no real model)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from clinjudge.judges import ModelSettings
from clinjudge.judges.workflows import workflow_for
from clinjudge.judges.workflows._magentic import ORCHESTRATOR_AGENT, magentic_workflow
from clinjudge.judges.workflows._magentic_chair import match_speaker, read_ledger
from clinjudge.orchestration import (
    RetryPolicy,
    RunConfig,
    SampleContext,
    create_run,
    execute_run,
    prepare_run,
)
from clinjudge.orchestration._context import ModelPool
from clinjudge.runs import FINAL_AGENT, RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import PDSQI9_KEYS, FakeOpenAIServer, Fault
from tests.magentic_fake import PanelFake

FAST = RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.02, jitter=0.0)
LIKERT = PDSQI9_KEYS[:7]


def run_panel(
    tmp_path: Path,
    fake: PanelFake,
    *,
    items: int = 1,
    faults: Any = None,
    roles: dict[str, str] | None = None,
    **config: Any,
) -> tuple[RunStore, str, Any, FakeOpenAIServer]:
    """One magentic run against a fake server answering with ``fake``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(items))
    with FakeOpenAIServer(responder=fake, faults=faults) as srv:
        judge = ModelSettings(model="openai/local-judge", base_url=srv.base_url, timeout=5.0)
        role_settings = {
            role: ModelSettings(model=model, base_url=srv.base_url, timeout=5.0)
            for role, model in (roles or {}).items()
        }
        run_config = RunConfig(
            mode="magentic",
            data=str(data),
            db=str(tmp_path / "runs.duckdb"),
            judge=judge,
            roles=role_settings,
            personas=fake.personas,
            retry=FAST,
            **config,
        )
        prepared = prepare_run(run_config)
        store = RunStore(run_config.db)
        run_id = create_run(store, prepared)
        tally = execute_run(store, run_id, prepared, show_progress=False)
    return store, run_id, tally, srv


def samples_by_agent(store: RunStore, run_id: str) -> dict[str, dict[str, Any]]:
    rows = store.query("SELECT * FROM samples WHERE run_id = ? AND sample = 1", [run_id])
    return {r["agent"]: r for r in rows}


def values_of(store: RunStore, run_id: str, agent: str, sample: int = 1) -> dict[str, Any]:
    rows = store.query(
        "SELECT attribute, value FROM judgments WHERE run_id = ? AND agent = ? AND sample = ?",
        [run_id, agent, sample],
    )
    return {r["attribute"]: r["value"] for r in rows}


def messages(store: RunStore, run_id: str, sample: int = 1) -> list[dict[str, Any]]:
    return store.query(
        "SELECT * FROM messages WHERE run_id = ? AND sample = ? ORDER BY seq", [run_id, sample]
    )


def test_mode_is_registered():
    assert workflow_for("magentic")[0] == ORCHESTRATOR_AGENT


def test_discussion_end_to_end(tmp_path):
    fake = PanelFake(personas="high_scorer,low_scorer", final_scores=4)
    store, run_id, tally, _ = run_panel(tmp_path, fake)
    assert (tally.ok, tally.failed) == (1, 0)

    samples = samples_by_agent(store, run_id)
    assert set(samples) == {ORCHESTRATOR_AGENT, "high_scorer", "low_scorer"}
    assert all(s["status"] == "ok" for s in samples.values())
    # The orchestrator decided (its own scores, not the members' average of 3.5).
    orchestrator = values_of(store, run_id, ORCHESTRATOR_AGENT)
    assert {orchestrator[k] for k in LIKERT} == {4}
    assert {values_of(store, run_id, "high_scorer")[k] for k in LIKERT} == {5}
    assert {values_of(store, run_id, "low_scorer")[k] for k in LIKERT} == {2}
    finals = store.query(
        "SELECT * FROM judgments WHERE run_id = ? AND final AND agent = ?", [run_id, FINAL_AGENT]
    )
    assert {f["attribute"]: f["value"] for f in finals}["accurate"] == 4

    turns = messages(store, run_id)
    assert (turns[0]["agent"], turns[0]["role"]) == ("user", "user")
    assert "CLINICAL SUMMARY TO EVALUATE" in turns[0]["content"]
    speakers = [t["agent"] for t in turns]
    assert speakers.count("high_scorer") == speakers.count("low_scorer") == 1
    assert turns[-1]["agent"] == ORCHESTRATOR_AGENT
    assert turns[-1]["content"].startswith("[final]")
    assert "ROUND 1 OF 1 BEGINS." in "\n".join(t["content"] for t in turns)
    assert all(t["content"].startswith("[") for t in turns[1:])

    # Every call is recorded under its agent, with the tokens the server reported.
    calls = store.query("SELECT * FROM calls WHERE run_id = ?", [run_id])
    assert Counter(c["agent"] for c in calls) == Counter(s.agent for s in fake.served)
    usage = {
        agent: (
            sum(c["prompt_tokens"] for c in calls if c["agent"] == agent),
            sum(c["completion_tokens"] for c in calls if c["agent"] == agent),
        )
        for agent in (ORCHESTRATOR_AGENT, "high_scorer", "low_scorer")
    }
    assert usage == fake.usage_by_agent()
    assert all(not c["tokens_estimated"] for c in calls)
    assert samples[ORCHESTRATOR_AGENT]["n_calls"] == len(calls)


def test_no_planning_cuts_calls(tmp_path):
    counts = {}
    for planning in (True, False):
        fake = PanelFake(personas="scoring")
        store, run_id, tally, srv = run_panel(tmp_path / str(planning), fake, planning=planning)
        assert (tally.ok, tally.failed) == (1, 0)
        assert {
            values_of(store, run_id, name)["accurate"]
            for name in ("high_scorer", "low_scorer", "middle_scorer")
        } == {5.0, 2.0, 3.0}
        counts[planning] = srv.request_count
        assert fake.count(kind="persona") == 3
    print(
        f"magentic calls, 3 personas, 1 round: planning={counts[True]} no-planning={counts[False]}"
    )
    assert counts[False] / counts[True] <= 0.6


def test_rounds_and_turn_limit(tmp_path):
    fake = PanelFake(personas="high_scorer,low_scorer", satisfied_after=5)
    store, run_id, tally, _ = run_panel(tmp_path / "rounds", fake, rounds=2)
    assert tally.ok == 1
    assert fake.count(kind="persona") == 4  # exactly rounds * personas turns
    text = "\n".join(t["content"] for t in messages(store, run_id))
    assert "ROUND 1 OF 2 ENDS." in text and "ROUND 2 OF 2 BEGINS." in text
    assert "[round 2] As low_scorer" in text

    # max_turns is the real number of member turns (AutoGen alone would allow one more).
    fake = PanelFake(personas="high_scorer,low_scorer")
    store, run_id, tally, _ = run_panel(tmp_path / "turns", fake, max_turns=1, planning=False)
    assert fake.count(kind="persona") == 1
    samples = samples_by_agent(store, run_id)
    assert samples[ORCHESTRATOR_AGENT]["status"] == "ok"
    assert samples["high_scorer"]["status"] == "ok"
    assert samples["low_scorer"]["status"] == "failed"
    assert samples["low_scorer"]["error"].startswith("no valid scores")


def test_ledger_may_not_end_before_everyone_spoke(tmp_path):
    fake = PanelFake(personas="scoring", satisfied_after=0)  # "satisfied" from the first ledger
    store, run_id, tally, _ = run_panel(tmp_path, fake, rounds=2)
    assert tally.ok == 1
    assert Counter(s.agent for s in fake.served if s.kind == "persona") == {
        "high_scorer": 1,
        "low_scorer": 1,
        "middle_scorer": 1,
    }


@pytest.mark.parametrize(
    "ledger",
    ["fenced", "string_bools", "unknown_speaker", "repeat_speaker", "bare", "garbage_once"],
)
def test_ledger_quirks_are_handled(tmp_path, ledger):
    fake = PanelFake(personas="scoring", ledger=ledger, satisfied_after=1)
    store, run_id, tally, _ = run_panel(tmp_path, fake, rounds=2)
    assert (tally.ok, tally.failed) == (1, 0)
    # Every persona was heard: "false" was not taken as true, unknown names were replaced.
    assert {s.agent for s in fake.served if s.kind == "persona"} == {
        "high_scorer",
        "low_scorer",
        "middle_scorer",
    }
    assert all(s["status"] == "ok" for s in samples_by_agent(store, run_id).values())


def test_stalls_replan_once_then_go_on(tmp_path):
    fake = PanelFake(personas="high_scorer,low_scorer", ledger="stalled")
    store, run_id, tally, _ = run_panel(tmp_path, fake, max_stalls=1)
    assert (tally.ok, tally.failed) == (1, 0)
    assert fake.count(kind="facts_update") == fake.count(kind="plan_update") == 1
    assert fake.count(kind="persona") == 2
    briefings = [t for t in messages(store, run_id) if t["content"].startswith("[briefing]")]
    assert len(briefings) == 2  # the replan briefed the panel again


def test_concurrent_samples(tmp_path):
    fake = PanelFake(personas="high_scorer,low_scorer")
    store, run_id, tally, _ = run_panel(tmp_path, fake, items=3, samples=2, concurrency=8)
    assert (tally.ok, tally.failed) == (6, 0)
    rows = store.query(
        "SELECT item_id, sample, count(*) AS n FROM calls WHERE run_id = ? GROUP BY ALL", [run_id]
    )
    assert len(rows) == 6 and {r["n"] for r in rows} == {len(fake.served) // 6}


@pytest.mark.parametrize("planning", [True, False])
def test_orchestrator_fault_on_its_first_call(tmp_path, planning):
    fake = PanelFake(personas="high_scorer,low_scorer")
    burst = [Fault("unavailable")] * FAST.max_attempts
    if not planning:  # the first orchestrator call is the final answer, after both members
        burst = [None, None, *burst]
    store, run_id, tally, _ = run_panel(tmp_path, fake, faults=burst, planning=planning)
    assert (tally.ok, tally.failed) == (0, 1)
    sample = samples_by_agent(store, run_id)[ORCHESTRATOR_AGENT]
    assert sample["status"] == "failed" and sample["error"].startswith("provider:")
    assert messages(store, run_id)[0]["agent"] == "user"


def test_unreadable_ledger_fails_the_sample_after_one_rerun(tmp_path):
    fake = PanelFake(personas="high_scorer,low_scorer", ledger="garbage")
    store, run_id, tally, _ = run_panel(tmp_path, fake)
    assert (tally.ok, tally.failed) == (0, 1)
    sample = samples_by_agent(store, run_id)[ORCHESTRATOR_AGENT]
    assert sample["status"] == "failed"
    assert sample["error"].startswith("ledger: progress ledger unreadable")
    assert "after 2 attempts" in sample["error"]
    assert fake.count(kind="ledger") == 2 * 3  # two discussions, three tries each
    turns = messages(store, run_id)
    assert turns[0]["agent"] == "user"
    assert any(t["content"].startswith("[attempt 2, task]") for t in turns)
    assert store.get_run(run_id)["status"] == "completed"


def test_final_answer_without_json_fails_with_raw_text(tmp_path):
    fake = PanelFake(personas="high_scorer,low_scorer", final="no_json")
    store, run_id, tally, _ = run_panel(tmp_path, fake)
    samples = samples_by_agent(store, run_id)
    orchestrator = samples[ORCHESTRATOR_AGENT]
    assert orchestrator["status"] == "failed"
    assert orchestrator["error"].startswith("invalid final answer")
    assert orchestrator["raw_text"] == "The panel agreed the summary is adequate overall."
    # The members' own scores are still kept.
    assert samples["high_scorer"]["status"] == samples["low_scorer"]["status"] == "ok"


def test_provider_fault_mid_discussion_fails_the_sample(tmp_path):
    def burst(index: int, body: dict[str, Any]) -> Fault | None:
        return Fault("server_error") if index >= 4 else None  # from the second persona on

    fake = PanelFake(personas="high_scorer,low_scorer")
    store, run_id, tally, srv = run_panel(tmp_path, fake, faults=burst)
    assert (tally.ok, tally.failed) == (0, 1)
    samples = samples_by_agent(store, run_id)
    orchestrator = samples[ORCHESTRATOR_AGENT]
    assert orchestrator["status"] == "failed"
    assert orchestrator["error"].startswith("provider:")
    assert samples["high_scorer"]["status"] == "ok"  # it spoke before the burst
    assert samples["low_scorer"]["status"] == "failed"
    calls = store.query("SELECT * FROM calls WHERE run_id = ?", [run_id])
    assert sum(c["status"] != "ok" for c in calls) == FAST.max_attempts
    assert srv.request_count == 4 + FAST.max_attempts
    turns = messages(store, run_id)
    assert any(t["agent"] == "high_scorer" for t in turns)  # the transcript so far is kept
    assert store.get_run(run_id)["status"] == "completed"


def test_two_samples_are_independent_discussions(tmp_path):
    fake = PanelFake(personas="high_scorer,low_scorer")
    store, run_id, tally, _ = run_panel(tmp_path, fake, samples=2, concurrency=1)
    assert (tally.ok, tally.failed) == (2, 0)
    calls = store.query("SELECT sample, agent FROM calls WHERE run_id = ?", [run_id])
    per_sample = Counter(c["sample"] for c in calls)
    assert per_sample[1] == per_sample[2] == len(fake.served) // 2
    first, second = messages(store, run_id, 1), messages(store, run_id, 2)
    assert [t["agent"] for t in first] == [t["agent"] for t in second]
    # The second discussion started from scratch: its first ledger saw no persona replies.
    ledgers = [s for s in fake.served if s.kind == "ledger"]
    assert len(ledgers) == 2 * 2
    assert ledgers[0].prompt_tokens == ledgers[2].prompt_tokens


def test_blind_first_round(tmp_path):
    fake = PanelFake(personas="high_scorer,low_scorer")
    store, run_id, tally, _ = run_panel(tmp_path, fake, blind_first_round=True, planning=False)
    assert tally.ok == 1
    assert Counter(s.agent for s in fake.served if s.kind == "persona") == {
        "high_scorer": 2,
        "low_scorer": 2,
    }
    turns = messages(store, run_id)
    assert turns[0]["agent"] == "user"
    assert sum(t["content"].startswith("[blind]") for t in turns) == 2
    briefing = next(t["content"] for t in turns if t["content"].startswith("[briefing]"))
    assert "INDEPENDENT SCORES" in briefing and "high_scorer: {" in briefing


def test_per_role_model_reaches_the_server(tmp_path):
    fake = PanelFake(personas="high_scorer,low_scorer")
    store, run_id, tally, _ = run_panel(
        tmp_path, fake, roles={"orchestrator": "openai/other-model"}
    )
    assert tally.ok == 1
    models = {(s.agent, s.model) for s in fake.served}
    assert models == {
        (ORCHESTRATOR_AGENT, "other-model"),
        ("high_scorer", "local-judge"),
        ("low_scorer", "local-judge"),
    }
    calls = store.query("SELECT agent, model FROM calls WHERE run_id = ?", [run_id])
    assert {c["model"] for c in calls if c["agent"] == ORCHESTRATOR_AGENT} == {"openai/other-model"}


def test_unknown_persona_spec_fails_the_sample(pdsqi9):
    # prepare_run rejects a bad spec up front; the workflow itself still never raises.
    config = RunConfig(
        mode="magentic", judge=ModelSettings(model="mock/judge"), personas="nobody_x"
    )
    ctx = SampleContext("run", make_items(1)[0], 1, config, pdsqi9, ModelPool(config, pdsqi9))
    result = asyncio.run(magentic_workflow(ctx))
    assert result.agent == ORCHESTRATOR_AGENT
    assert result.verdict.status == "failed" and result.verdict.error.startswith("personas:")


# -- ledger reading -----------------------------------------------------------------------------


def test_read_ledger_normalises_quirks():
    ledger, problem = read_ledger(
        'Sure.\n```json\n{"is_request_satisfied": {"reason": "no", "answer": "false"},'
        ' "is_in_loop": {"reason": "", "answer": "No"}, "next_speaker": "low_scorer",'
        ' "instruction_or_question": {"reason": "", "answer": "go"}}\n```'
    )
    assert problem == "" and ledger is not None
    assert (ledger.satisfied, ledger.in_loop, ledger.progress) == (False, False, True)
    assert (ledger.speaker, ledger.instruction) == ("low_scorer", "go")

    assert read_ledger("no json here")[0] is None
    bad, problem = read_ledger('{"is_request_satisfied": {"reason": "", "answer": "maybe"}}')
    assert bad is None and "maybe" in problem
    missing, problem = read_ledger('{"is_request_satisfied": {"reason": "", "answer": false}}')
    assert missing is None and "next_speaker" in problem


def test_match_speaker():
    names = ["high_scorer", "low_scorer"]
    aliases = {"high_scorer": "high_scorer", "low_scorer": "low_scorer"}
    assert match_speaker("low_scorer", names, aliases) == "low_scorer"
    assert match_speaker("Low Scorer", names, aliases) == "low_scorer"
    assert match_speaker("the high_scorer agent", names, aliases) == "high_scorer"
    assert match_speaker("Dr. Nobody", names, aliases) is None


def test_simulated_provider_runs_the_fixed_agenda(tmp_path, items_file):
    config = RunConfig(
        mode="magentic",
        data=str(items_file),
        db=str(tmp_path / "mock.duckdb"),
        judge=ModelSettings(model="mock/judge"),
        personas="scoring",
    )
    prepared = prepare_run(config)
    store = RunStore(config.db)
    run_id = create_run(store, prepared)
    tally = execute_run(store, run_id, prepared, show_progress=False)
    assert (tally.ok, tally.failed) == (6, 0)
    calls = store.query("SELECT agent FROM calls WHERE run_id = ?", [run_id])
    assert Counter(c["agent"] for c in calls)[ORCHESTRATOR_AGENT] == 6  # final answers only
