"""What a judge workflow may ask of the run that calls it, and what it hands back.

Workflows sit below the runner: they never import ``orchestration``. The runner gives each sample
an object that satisfies :class:`WorkflowContext` (``orchestration.SampleContext``: retried,
rate-limited, recorded model calls), and its run settings satisfy :class:`WorkflowSettings`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

# The deciding agents' names are defined once, where readers of stored runs find them cheaply.
from clinjudge._util.modes import DECIDING_AGENTS as DECIDING_AGENTS
from clinjudge._util.modes import JUDGE_AGENT as JUDGE_AGENT
from clinjudge._util.modes import ORCHESTRATOR_AGENT as ORCHESTRATOR_AGENT
from clinjudge._util.modes import PANEL_AGENT as PANEL_AGENT
from clinjudge.judges.clients import CallConfig, ChatMessage, Completion, ModelSettings
from clinjudge.judges.workflows._single import CallFn, SampleVerdict
from clinjudge.personas import Persona
from clinjudge.prm_bridge import PRMRunSettings
from clinjudge.rubrics import ChatTurn, Item, Rubric, Shot


class WorkflowSettings(Protocol):
    """The run settings a workflow reads (``orchestration.RunConfig`` has them all)."""

    @property
    def mode(self) -> str: ...
    @property
    def personas(self) -> str: ...
    @property
    def explanations(self) -> bool: ...
    @property
    def max_repairs(self) -> int: ...
    @property
    def panel_aggregate(self) -> str: ...
    @property
    def rounds(self) -> int: ...
    @property
    def max_turns(self) -> int | None: ...
    @property
    def max_stalls(self) -> int: ...
    @property
    def blind_first_round(self) -> bool: ...
    @property
    def planning(self) -> bool: ...
    @property
    def prm(self) -> PRMRunSettings | None: ...


class AgentChatFn(Protocol):
    """One agent's conversation call: retried, rate-limited and recorded like a call over
    rendered turns, for agents whose messages carry who said them and tool calls."""

    @property
    def model_info(self) -> Mapping[str, Any]:
        """What the agent's model can do (AutoGen's ``ModelInfo`` keys)."""
        ...

    async def __call__(self, messages: Sequence[ChatMessage], config: CallConfig) -> Completion:
        """The model's reply to the conversation (text or tool calls)."""
        ...


class WorkflowModels(Protocol):
    """The run's models as a workflow sees them."""

    @property
    def shared_state(self) -> dict[str, Any]:
        """Run-wide state of workflows, e.g. each item's PRM evidence (scored once per item)."""
        ...

    def settings_for(self, agent: str, role: str) -> ModelSettings:
        """Settings of an agent: its own, else its role's, else the judge's."""
        ...


class WorkflowContext(Protocol):
    """Everything one sample's workflow may use."""

    run_id: str
    item: Item
    sample: int
    rubric: Rubric
    shots: list[Shot]
    calls: list[dict[str, Any]]
    extra_rows: dict[str, list[dict[str, Any]]]

    @property
    def config(self) -> WorkflowSettings: ...
    @property
    def models(self) -> WorkflowModels: ...
    @property
    def personas(self) -> list[Persona]: ...

    def call_fn(self, agent: str, role: str) -> CallFn:
        """A recorded, retried call over rendered turns for one agent."""
        ...

    def chat(self, agent: str, role: str) -> AgentChatFn:
        """A recorded, retried conversation call for one agent."""
        ...

    def record_local_call(
        self,
        agent: str,
        role: str,
        model: str,
        *,
        started: datetime,
        latency_s: float,
        prompt_tokens: int | None = None,
        error: str | None = None,
    ) -> None:
        """Record a call of a model run in this process (a PRM or NLI forward pass)."""
        ...


@dataclass
class WorkflowResult:
    """What a workflow concluded for one sample.

    Args:
        agent: Agent name of the sample-level decision (``judge``, ``panel``, ``orchestrator``).
        verdict: The sample-level decision.
        members: Each member's own verdict (panels and discussions).
        transcript: Every turn as (agent, turn), in order; empty means the verdict's transcript.
        extra_rows: Rows for other tables (e.g. DocLens ``claims``, ``prm_steps``), written in the
            same transaction as the sample.
    """

    agent: str
    verdict: SampleVerdict
    members: dict[str, SampleVerdict] = field(default_factory=dict)
    transcript: list[tuple[str, ChatTurn]] = field(default_factory=list)
    extra_rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
