"""The AutoGen tool and the verifier agent on a tiny checkpoint."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from autogen_agentchat.messages import TextMessage
from autogen_core import CancellationToken

from clinjudge.prm_bridge._tool import (
    PRMVerifierAgent,
    evidence_rows,
    evidence_text,
    make_prm_tool,
    shared_scorer,
)
from clinjudge.rubrics import Item
from clinjudge.runs import RunStore
from tests.prm_bridge._tiny import save_exact_medprm


@pytest.fixture(scope="module")
def exact(tmp_path_factory) -> tuple[str, float]:
    path = tmp_path_factory.mktemp("exact_tool")
    return str(path), save_exact_medprm(path, a=-0.8)  # P(+) ~ 0.31: every step flagged


ITEM = Item(
    id="item-1",
    notes=["Patient has asthma.", "Uses an inhaler."],
    summary="Step 1: Asthma is present. Step 2: Inhaler is used.",
)


def test_tool_returns_json_evidence_off_the_event_loop(exact):
    model, p = exact
    scorer = shared_scorer(model, "medprm", device="cpu")
    assert shared_scorer(model, "medprm", device="cpu") is scorer  # loaded once per process
    threads: list[int] = []
    original = scorer.score

    def spy(*args, **kwargs):
        threads.append(threading.get_ident())
        return original(*args, **kwargs)

    scorer.score = spy  # type: ignore[method-assign]
    try:
        tool = make_prm_tool(scorer, ITEM)

        async def run() -> tuple[str, str, int]:
            token = CancellationToken()
            first, second = await asyncio.gather(
                tool.run_json({}, token), tool.run_json({"text": "One line only."}, token)
            )
            return (
                tool.return_value_as_string(first),
                tool.return_value_as_string(second),
                (threading.get_ident()),
            )

        summary_json, other_json, loop_thread = asyncio.run(run())
    finally:
        del scorer.score
    assert threads and loop_thread not in threads
    evidence = json.loads(summary_json)
    assert evidence["item_id"] == "item-1" and evidence["format"] == "medprm"
    assert [s["text"] for s in evidence["steps"]] == ["Asthma is present.", "Inhaler is used."]
    assert [s["score"] for s in evidence["steps"]] == pytest.approx([p, p], abs=1e-6)
    assert evidence["flagged"] == [1, 2]
    assert evidence["aggregates"]["min"] == pytest.approx(p, abs=1e-6)
    assert [s["text"] for s in json.loads(other_json)["steps"]] == ["One line only."]
    assert tool.name == "prm_step_scores"
    assert "text" not in tool.schema["parameters"].get("required", [])


def test_verifier_agent_answers_with_step_evidence(exact, db_path):
    model, p = exact
    scorer = shared_scorer(model, "medprm", device="cpu")
    agent = PRMVerifierAgent(scorer, ITEM)

    async def ask() -> str:
        response = await agent.on_messages(
            [TextMessage(content="What does the PRM say?", source="orchestrator")],
            CancellationToken(),
        )
        assert isinstance(response.chat_message, TextMessage)
        assert response.chat_message.source == "prm_verifier"
        return response.chat_message.content

    text = asyncio.run(ask())
    assert "2 of 2 steps flagged" in text
    assert f'- step 1 [step] {p:.3f}: "Asthma is present."' in text
    assert "{" not in text  # no JSON a rubric parser could mistake for grades
    evidence = asyncio.run(agent.evidence())
    assert evidence_text(evidence) == text
    rows = evidence_rows("run-1", evidence)
    assert [(r["item_id"], r["candidate"], r["step"], r["flagged"]) for r in rows] == [
        ("item-1", "summary", 1, True),
        ("item-1", "summary", 2, True),
    ]
    with RunStore(db_path) as store:
        store.write_batch({"prm_steps": rows + rows})  # a second sample adds nothing
        assert store.query("SELECT count(*) AS n FROM prm_steps")[0]["n"] == 2


def test_verifier_is_a_valid_group_chat_participant(exact):
    from autogen_agentchat.teams import RoundRobinGroupChat

    model, _ = exact
    agent = PRMVerifierAgent(shared_scorer(model, "medprm", device="cpu"), ITEM)
    team = RoundRobinGroupChat([agent], max_turns=1)
    result = asyncio.run(team.run(task="Panel: please report the step scores."))
    [reply] = [m for m in result.messages if m.source == "prm_verifier"]
    assert isinstance(reply, TextMessage) and "steps flagged" in reply.content
