"""Which agent's verdicts are a run's samples, per judging mode: the one table.

A judge workflow stores its sample-level decision under one agent name (the single judge, the
panel's aggregate, the MagenticOne chair); counts, `judge runs show`, the viewer and the DocLens
scores read a run's samples from that agent's rows. The workflow registry
(``judges.workflows``) takes each mode's agent from here and refuses to register a mode under
another, so the two cannot disagree; this module imports nothing, so readers of a stored run
learn the agent without loading the workflows and the model clients under them.
"""

from __future__ import annotations

JUDGE_AGENT = "judge"
"""The single judge's agent name."""
PANEL_AGENT = "panel"
"""Agent name of a panel's aggregated sample-level decision."""
ORCHESTRATOR_AGENT = "orchestrator"
"""Agent name of the MagenticOne chair's decision."""
DECIDING_AGENTS = (JUDGE_AGENT, PANEL_AGENT, ORCHESTRATOR_AGENT)
"""Every agent a sample-level decision may be stored under."""
PRM_MODE = "prm"
"""Mode of a run that only scored candidates with a PRM (``judge prm score``): no samples."""
PRM_AGENT = "prm"
"""Agent name of PRM forward passes in the calls table."""
PRM_ROLE = "prm"
"""Role of PRM forward passes in the calls table."""
SIMULATED_NOTICE = "SIMULATED SCORES (mock provider): not judgments of any model or person."
"""Printed with a simulated (``mock/``) run's scores. Here, not with the mock client, so that
`runs show`, `export` and `agree` of a simulated run need not load the model clients (openai)."""

_MODE_AGENTS: dict[str, str] = {
    "single": JUDGE_AGENT,
    "panel": PANEL_AGENT,
    "magentic": ORCHESTRATOR_AGENT,
}


def deciding_agent(mode: str | None) -> str | None:
    """The agent whose verdicts are a run's samples in ``mode``.

    Args:
        mode: The run's mode (``single``, ``panel``, ``magentic`` or a registered one).

    Returns:
        The agent's name; None for a mode without judge samples (``prm`` scoring runs) or one
        this process does not know.
    """
    return _MODE_AGENTS.get(mode or "")


def set_deciding_agent(mode: str, agent: str) -> None:
    """Record the deciding agent of a mode (the workflow registry calls this on registration).

    Args:
        mode: The ``--mode`` name.
        agent: The agent its workflow stores the sample-level decision under.

    Raises:
        ValueError: ``agent`` is not a deciding agent, or the mode already decides by another.
    """
    if agent not in DECIDING_AGENTS:
        raise ValueError(f"deciding agent {agent!r} must be one of {', '.join(DECIDING_AGENTS)}")
    known = _MODE_AGENTS.setdefault(mode, agent)
    if known != agent:
        raise ValueError(
            f"mode {mode!r} decides by agent {known!r} (clinjudge/_util/modes.py), not {agent!r}"
        )
