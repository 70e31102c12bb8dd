"""One definition of a run's deciding agent: the table a fresh process reads without loading
the workflows (`judge runs show`, the viewer, the DocLens scores) names, for every registered
mode, the agent the workflow registry runs it under (#24)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

import clinjudge.judges  # noqa: F401 (registers every workflow, DocLens's claim ones too)
from clinjudge._util.modes import DECIDING_AGENTS, deciding_agent
from clinjudge.judges.workflows import (
    Workflow,
    register_claims_workflow,
    register_workflow,
    workflow_for,
)
from clinjudge.judges.workflows._registry import _CLAIM_WORKFLOWS, _WORKFLOWS, single_workflow
from clinjudge.reports._viewer_item import views_from_rows
from clinjudge.rubrics import load_rubric

_FRESH = """
import json, sys
from clinjudge._util.modes import deciding_agent
modes = json.loads(sys.argv[1])
print(json.dumps({
    "agents": {mode: deciding_agent(mode) for mode in modes},
    "loaded": [m for m in ("clinjudge.judges", "openai", "autogen_core") if m in sys.modules],
}))
"""


def _registered() -> dict[str, str]:
    """Mode -> agent as the registry runs it, score rubrics' and claim rubrics' workflows."""
    claims = load_rubric("doclens")
    assert claims.method == "claims"
    agents: dict[str, str] = {}
    for mode in _WORKFLOWS:
        agents[mode] = workflow_for(mode)[0]
    for mode in _CLAIM_WORKFLOWS:
        agent = workflow_for(mode, claims)[0]
        # A mode decides by one agent whatever the rubric: runs show reads only the mode.
        assert agents.setdefault(mode, agent) == agent, mode
    return agents


def test_the_built_in_modes_are_registered_for_both_kinds_of_rubric() -> None:
    assert set(_WORKFLOWS) == set(_CLAIM_WORKFLOWS) == {"single", "panel", "magentic"}


def test_a_fresh_process_reads_every_registered_modes_agent_without_the_workflows() -> None:
    registered = _registered()
    done = subprocess.run(
        [sys.executable, "-c", _FRESH, json.dumps([*registered, "prm", "no-such-mode"])],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    fresh = json.loads(done.stdout)
    assert fresh["loaded"] == []
    assert fresh["agents"] == {**registered, "prm": None, "no-such-mode": None}
    assert set(registered.values()) <= set(DECIDING_AGENTS)


def test_the_viewer_orders_and_marks_the_registrys_deciding_agent() -> None:
    for mode, agent in _registered().items():
        others = [a for a in DECIDING_AGENTS if a != agent]
        samples = [
            {"sample": 1, "agent": name, "status": "ok"} for name in sorted([*others, agent])
        ]
        page = views_from_rows({"mode": mode}, [], samples, [])
        assert page["deciding"] == agent
        # The deciding agent's verdict comes first on the item page.
        assert page["samples"][0].agents[0]["agent"] == agent
    assert views_from_rows({"mode": "prm"}, [], [], [])["deciding"] is None


@pytest.mark.parametrize("register", [register_workflow, register_claims_workflow])
def test_a_built_in_mode_under_another_agent_is_refused(
    register: Callable[[str, str, Workflow], None],
) -> None:
    before = (dict(_WORKFLOWS), dict(_CLAIM_WORKFLOWS))
    with pytest.raises(ValueError, match="mode 'panel' decides by agent 'panel'"):
        register("panel", "judge", single_workflow)
    with pytest.raises(ValueError, match="must be one of judge, panel, orchestrator"):
        register("single", "referee", single_workflow)
    assert (dict(_WORKFLOWS), dict(_CLAIM_WORKFLOWS)) == before
    assert deciding_agent("panel") == "panel" and deciding_agent("single") == "judge"
