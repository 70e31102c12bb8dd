"""The magentic discussion's own runtime (telemetry skipped when nobody records it), the agents'
handlers found once per class and the shared decision schema: the same discussion as on AutoGen's
stock runtime and containers, and AutoGen's telemetry intact whenever someone receives it."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from autogen_agentchat.teams._group_chat._chat_agent_container import ChatAgentContainer
from autogen_agentchat.teams._group_chat._magentic_one._magentic_one_orchestrator import (
    MagenticOneOrchestrator,
)
from autogen_core import (
    EVENT_LOGGER_NAME,
    ROOT_LOGGER_NAME,
    RoutedAgent,
    SingleThreadedAgentRuntime,
)
from autogen_core.logging import MessageEvent
from opentelemetry import trace

from clinjudge.judges import ModelSettings
from clinjudge.judges.workflows import _magentic_chair
from clinjudge.judges.workflows._magentic import magentic_workflow
from clinjudge.judges.workflows._magentic_chair import (
    PanelGroupChat,
    _FixedHandlers,
    _Member,
    _PanelOrchestrator,
    decision_schema,
    shared_decision_schema,
)
from clinjudge.judges.workflows._magentic_runtime import DiscussionRuntime, runtime_traced
from clinjudge.orchestration import RetryPolicy, RunConfig, SampleContext
from clinjudge.orchestration._context import ModelPool
from clinjudge.personas import resolve_personas
from clinjudge.rubrics import Rubric
from tests.factories import make_items
from tests.fake_openai import FakeOpenAIServer
from tests.magentic_fake import PanelFake

FAST = RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.02, jitter=0.0)


def discuss(rubric: Rubric, fake: PanelFake, **config: Any) -> tuple[Any, list[Any], list[Any]]:
    """One magentic sample against a fake server playing ``fake``: (the workflow's result, the
    calls it recorded, the request bodies the server received, in order)."""
    with FakeOpenAIServer(responder=fake) as srv:
        run_config = RunConfig(
            mode="magentic",
            judge=ModelSettings(model="openai/local-judge", base_url=srv.base_url, timeout=5.0),
            personas=fake.personas,
            retry=FAST,
            **config,
        )
        pool = ModelPool(run_config, rubric, personas=resolve_personas(fake.personas))
        ctx = SampleContext("run", make_items(1)[0], 1, run_config, rubric, pool)

        async def run() -> Any:
            try:
                return await magentic_workflow(ctx)
            finally:
                await pool.close()

        result = asyncio.run(run())
        return result, ctx.calls, list(srv.requests)


def use_stock_autogen(monkeypatch: pytest.MonkeyPatch) -> None:
    """The team on AutoGen's own runtime, containers and handler lookup."""
    monkeypatch.setattr(
        _magentic_chair,
        "DiscussionRuntime",
        lambda: SingleThreadedAgentRuntime(ignore_unhandled_exceptions=False),
    )
    monkeypatch.delattr(_FixedHandlers, "_discover_handlers")
    monkeypatch.delattr(PanelGroupChat, "_create_participant_factory")


def outcome(result: Any, calls: list[Any]) -> dict[str, Any]:
    """What a discussion concluded and did, without ids and clock times."""
    return {
        "verdict": (result.verdict.status, result.verdict.values, result.verdict.error),
        "members": {n: (v.status, v.values) for n, v in result.members.items()},
        "transcript": [(agent, t.role, t.content) for agent, t in result.transcript],
        "calls": [(c["agent"], c["role"], c["status"]) for c in calls],
    }


@pytest.mark.parametrize(
    ("fake", "config"),
    [
        (PanelFake(personas="high_scorer,low_scorer,middle_scorer", satisfied_after=2), {}),
        (PanelFake(ledger="garbage_once"), {"rounds": 2}),
        (PanelFake(), {"planning": False, "blind_first_round": True}),
    ],
    ids=["planned-2-turns-each", "ledger-reasked", "fixed-agenda-blind"],
)
def test_same_discussion_as_on_autogens_stock_runtime(
    pdsqi9: Rubric, monkeypatch: pytest.MonkeyPatch, fake: PanelFake, config: dict[str, Any]
) -> None:
    ours, our_calls, our_requests = discuss(pdsqi9, fake, **config)
    assert ours.verdict.status == "ok"
    fresh = PanelFake(
        personas=fake.personas, satisfied_after=fake.satisfied_after, ledger=fake.ledger
    )
    with monkeypatch.context() as patch:
        use_stock_autogen(patch)
        stock, stock_calls, stock_requests = discuss(pdsqi9, fresh, **config)
    assert outcome(ours, our_calls) == outcome(stock, stock_calls)
    # Every request the model saw, byte for byte the same (prompts, schemas, order).
    assert our_requests == stock_requests
    # The chair's decision is asked for with the decision schema (shared across samples now).
    formats = [r.get("response_format") or {} for r in our_requests]
    finals = [
        f["json_schema"]
        for f in formats
        if (f.get("json_schema") or {}).get("name") == "pdsqi9_chair_decision"
    ]
    assert len(finals) == 1 and finals[0]["schema"] == decision_schema(pdsqi9)


def test_runtime_skips_serialising_when_nobody_listens(
    pdsqi9: Rubric, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not runtime_traced()  # no tracer provider set in the suite
    assert not logging.getLogger(EVENT_LOGGER_NAME).isEnabledFor(logging.INFO)
    serialised: list[Any] = []
    stock = SingleThreadedAgentRuntime._try_serialize

    def counting(self: Any, message: Any) -> str:
        serialised.append(message)
        return stock(self, message)

    monkeypatch.setattr(SingleThreadedAgentRuntime, "_try_serialize", counting)
    result, _, _ = discuss(pdsqi9, PanelFake())
    assert result.verdict.status == "ok"
    assert serialised == []


def test_event_log_gets_every_message_when_listened(pdsqi9: Rubric) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    events = logging.getLogger(EVENT_LOGGER_NAME)
    handler, level = Keep(logging.INFO), events.level
    events.setLevel(logging.INFO)
    events.addHandler(handler)
    try:
        result, _, _ = discuss(pdsqi9, PanelFake())
    finally:
        events.removeHandler(handler)
        events.setLevel(level)
    assert result.verdict.status == "ok"
    payloads = [r.msg.kwargs["payload"] for r in records if isinstance(r.msg, MessageEvent)]
    assert len(payloads) > 20 and all(payloads)
    decoded = [json.loads(p) for p in payloads if p != "Message could not be serialized"]
    # The task travels in the GroupChatStart message, as AutoGen serialises it.
    assert any("PANEL PROTOCOL" in json.dumps(d) for d in decoded)


def test_info_log_gets_every_publication_when_listened(pdsqi9: Rubric) -> None:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.name == ROOT_LOGGER_NAME:
                records.append(record.getMessage())

    core = logging.getLogger(ROOT_LOGGER_NAME)
    handler, level = Keep(logging.INFO), core.level
    core.setLevel(logging.INFO)
    core.addHandler(handler)
    try:
        result, _, _ = discuss(pdsqi9, PanelFake())
    finally:
        core.removeHandler(handler)
        core.setLevel(level)
    assert result.verdict.status == "ok"
    published = [r for r in records if r.startswith("Publishing message of type")]
    # Every turn is announced with its content, as AutoGen logs it.
    assert len(published) > 10
    assert any("GroupChatStart" in r and "PANEL PROTOCOL" in r for r in published)
    assert any("GroupChatAgentResponse" in r and "As low_scorer," in r for r in published)


class _Recorder(trace.NoOpTracer):
    def __init__(self) -> None:
        self.spans: list[tuple[str, dict[str, Any]]] = []

    def start_as_current_span(self, name: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        attributes = kwargs.get("attributes") or (args[2] if len(args) > 2 else None) or {}
        self.spans.append((name, dict(attributes)))
        return super().start_as_current_span(name, *args, **kwargs)


class _Provider(trace.NoOpTracerProvider):
    def __init__(self) -> None:
        self.tracer = _Recorder()

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return self.tracer


def test_runtime_traces_as_autogen_when_a_provider_is_set(
    pdsqi9: Rubric, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = _Provider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    assert runtime_traced()
    result, _, _ = discuss(pdsqi9, PanelFake())
    assert result.verdict.status == "ok"
    names = {name for name, _ in provider.tracer.spans}
    assert any(n.startswith("autogen publish") for n in names)
    assert any(n.startswith("autogen process") for n in names)
    # Delivery spans carry the serialised message, as on the stock runtime.
    messages = [a["message"] for _, a in provider.tracer.spans if "message" in a]
    assert messages and any("PANEL PROTOCOL" in m for m in messages)


def test_autogens_switch_turns_runtime_tracing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: _Provider())
    assert runtime_traced()
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")
    assert not runtime_traced()
    monkeypatch.delenv("AUTOGEN_DISABLE_RUNTIME_TRACING")
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.ProxyTracerProvider())
    assert not runtime_traced()
    assert isinstance(DiscussionRuntime(), SingleThreadedAgentRuntime)


@pytest.mark.parametrize(
    ("ours", "stock"),
    [(_PanelOrchestrator, MagenticOneOrchestrator), (_Member, ChatAgentContainer)],
)
def test_handlers_found_once_are_autogens(ours: type, stock: type) -> None:
    found = ours._discover_handlers()  # type: ignore[attr-defined]
    assert found is ours._discover_handlers()  # type: ignore[attr-defined]
    lookup = RoutedAgent.__dict__["_discover_handlers"].__func__  # AutoGen's, uncached

    def described(handlers: Any) -> list[tuple[str, tuple[str, ...]]]:
        return sorted(
            (h.__name__, tuple(sorted(t.__name__ for t in h.target_types))) for h in handlers
        )

    assert described(found) == described(lookup(ours))
    assert described(found) == described(lookup(stock))


def test_shared_decision_schema_is_the_decision_schema(pdsqi9: Rubric) -> None:
    for explanations in (False, True):
        shared = shared_decision_schema(pdsqi9, explanations=explanations)
        assert shared == decision_schema(pdsqi9, explanations=explanations)
        assert shared is shared_decision_schema(pdsqi9, explanations=explanations)
    assert shared_decision_schema(pdsqi9) != shared_decision_schema(pdsqi9, explanations=True)
