"""Connection limits (#40): a model's ``max_connections`` (its setting, else its provider's
``Provider.max_connections``) bounds the calls in flight at once to its server, shared by every
model and agent of the run whose ``connection_key`` is the same, on top of ``--concurrency``;
a retry's back-off holds no slot, and a run without a limit takes no extra slot.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from clinjudge.judges import CallOutcome, ModelSettings, ProviderFault
from clinjudge.judges.clients import (
    Completion,
    Generation,
    ModelConfigError,
    Provider,
    provider_for,
    register_provider,
)
from clinjudge.judges.clients.providers import _registry
from clinjudge.orchestration import RetryPolicy, RunConfig, create_run, execute_run, prepare_run
from clinjudge.orchestration._context import ModelPool, SampleContext
from clinjudge.orchestration._session import sharded_run_id
from clinjudge.rubrics import Rubric
from clinjudge.runs import RunStore
from tests.cli._helpers import invoke
from tests.factories import make_items, responder, write_jsonl
from tests.fake_openai import FakeOpenAIServer, pdsqi9_scores

FAST = RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.05, jitter=0.0)
HOLD_S = 0.03
"""How long the server holds each request, so that calls sent together overlap."""


class InFlight:
    """A fake server's responder that counts the requests it is answering at once (the most
    seen in ``peak``) and the model each names; the replies are ``reply``'s."""

    def __init__(self, reply: Any = None) -> None:
        self.reply = reply
        self.now = 0
        self.peak = 0
        self.models: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Any:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.models[body["model"]] += 1
        try:
            time.sleep(HOLD_S)
            if self.reply is not None:
                return self.reply(body)
            return pdsqi9_scores(body["messages"][-1]["content"])
        finally:
            with self._lock:
                self.now -= 1


def _run(tmp_path: Path, **config: Any) -> Any:
    """A run of ``config`` executed here; its tally."""
    data = write_jsonl(tmp_path / "items.jsonl", make_items(config.pop("items", 16)))
    run_config = RunConfig(data=str(data), db=str(tmp_path / "runs.duckdb"), retry=FAST, **config)
    prepared = prepare_run(run_config)
    with RunStore(run_config.db) as store:
        run_id = create_run(store, prepared)
        return execute_run(store, run_id, prepared, show_progress=False)


def _judge_cli(tmp_path: Path, server: FakeOpenAIServer, judge: dict[str, Any]) -> Any:
    """`judge run --concurrency 8` of 16 items with the judge settings of a config file."""
    data = write_jsonl(tmp_path / "items.jsonl", make_items(16))
    config = tmp_path / "run.yaml"
    settings = {"model": "openai/local-judge", "base_url": server.base_url, **judge}
    config.write_text(json.dumps({"judge": settings}), encoding="utf-8")
    return invoke(
        "run",
        "--data",
        str(data),
        "--config",
        str(config),
        "--db",
        str(tmp_path / "runs.duckdb"),
        "--concurrency",
        "8",
        "--no-progress",
    )


def test_max_connections_bounds_the_calls_in_flight_below_concurrency(tmp_path: Path) -> None:
    counter = InFlight()
    with FakeOpenAIServer(counter) as server:
        done = _judge_cli(tmp_path, server, {"max_connections": 2})
    assert done.exit_code == 0, done.stderr
    assert sum(counter.models.values()) == 16
    assert counter.peak == 2


def test_without_a_limit_the_calls_in_flight_reach_concurrency(tmp_path: Path) -> None:
    # The control: the same run reaches more than two at once when nothing limits it.
    counter = InFlight()
    with FakeOpenAIServer(counter) as server:
        done = _judge_cli(tmp_path, server, {})
    assert done.exit_code == 0, done.stderr
    assert counter.peak > 2


def test_models_at_one_server_share_the_strictest_limit(tmp_path: Path) -> None:
    # A panel: two members on the judge's model (limited to 2), one on another model at the
    # same server (no limit of its own): the server never has more than 2 at once.
    counter = InFlight(responder)
    with FakeOpenAIServer(counter) as server:
        url = server.base_url
        tally = _run(
            tmp_path,
            items=8,
            mode="panel",
            personas="scoring",
            concurrency=8,
            judge=ModelSettings(model="openai/local-judge", base_url=url, max_connections=2),
            roles={"low_scorer": ModelSettings(model="openai/other-judge", base_url=url + "/")},
        )
    assert (tally.ok, tally.failed) == (8, 0)
    assert counter.models == {"local-judge": 16, "other-judge": 8}
    assert counter.peak == 2


def test_servers_apart_keep_their_own_limits(tmp_path: Path) -> None:
    # The judge's server is limited to 1; a member's model on another server is not held by it.
    judge_side, member_side = InFlight(responder), InFlight(responder)
    with FakeOpenAIServer(judge_side) as one, FakeOpenAIServer(member_side) as two:
        tally = _run(
            tmp_path,
            items=8,
            mode="panel",
            personas="scoring",
            concurrency=8,
            judge=ModelSettings(model="openai/j", base_url=one.base_url, max_connections=1),
            roles={"low_scorer": ModelSettings(model="openai/m", base_url=two.base_url)},
        )
    assert (tally.ok, tally.failed) == (8, 0)
    assert judge_side.peak == 1 and member_side.peak > 1


class LimitedProvider(Provider):
    """A provider with a connection limit of its own: counts its calls in flight."""

    names = ("limited-test",)

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.now = 0
        self.peak = 0
        self.calls = 0

    def max_connections(self, settings: ModelSettings) -> int | None:
        return self.limit

    async def generate(self, call: Generation) -> Completion:
        self.now += 1
        self.peak = max(self.peak, self.now)
        self.calls += 1
        try:
            await asyncio.sleep(0.01)
        finally:
            self.now -= 1
        reply = pdsqi9_scores(call.messages[-1]["content"])
        return Completion(json.dumps(reply), prompt_tokens=10, completion_tokens=5)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Providers registered by a test are gone after it."""
    monkeypatch.setattr(_registry, "_PROVIDERS", dict(_registry._PROVIDERS))
    yield


@pytest.mark.parametrize(("hook", "setting"), [(2, None), (2, 3), (None, None)])
def test_a_providers_max_connections_is_honoured(
    tmp_path: Path, registry: None, hook: int | None, setting: int | None
) -> None:
    # The provider's hook bounds its calls; the model setting wins over it; without either,
    # only --concurrency does.
    provider = register_provider(LimitedProvider(hook))
    judge = ModelSettings(model="limited-test/m", max_connections=setting)
    tally = _run(tmp_path, items=24, concurrency=8, judge=judge)
    assert (tally.ok, provider.calls) == (24, 24)
    if setting or hook:
        assert provider.peak == (setting or hook)
    else:
        assert 3 < provider.peak <= 8


def test_a_provider_limit_that_is_no_positive_number_is_an_error(
    registry: None, pdsqi9: Rubric
) -> None:
    register_provider(LimitedProvider(0))
    config = RunConfig(data="x.jsonl", judge=ModelSettings(model="limited-test/m"))
    with pytest.raises(ModelConfigError, match="max_connections=0"):
        ModelPool(config, pdsqi9).connection_limit(config.judge)  # type: ignore[arg-type]


def _context(pdsqi9: Rubric, settings: ModelSettings, retry: RetryPolicy) -> SampleContext:
    config = RunConfig(data="x.jsonl", judge=settings, concurrency=8, retry=retry)
    pool = ModelPool(config, pdsqi9)
    [item] = make_items(1)
    return SampleContext("run", item, 1, config, pdsqi9, pool)


def _outcome() -> CallOutcome:
    return CallOutcome(
        text="{}",
        finish_reason="stop",
        prompt_tokens=1,
        completion_tokens=1,
        tokens_estimated=False,
        cost_usd=0.0,
        latency_s=0.0,
        result=Completion("{}", prompt_tokens=1, completion_tokens=1),
    )


def test_agent_clients_take_the_connection_slots(pdsqi9: Rubric) -> None:
    # The magentic workflow's agents call through SampleContext.chat (their AutoGen client's
    # create() in AgentClient).
    from autogen_core.models import UserMessage

    from clinjudge.judges.workflows._magentic_client import AgentClient

    settings = ModelSettings(model="openai/x", base_url="http://127.0.0.1:9/v1", max_connections=3)
    ctx = _context(pdsqi9, settings, FAST)
    model = ctx.models.model_for("judge", "judge")
    seen = [0, 0]  # now, most

    async def generate_chat(messages: Any, config: Any) -> CallOutcome:
        seen[0] += 1
        seen[1] = max(seen)
        await asyncio.sleep(0.005)
        seen[0] -= 1
        return _outcome()

    model.generate_chat = generate_chat  # type: ignore[method-assign]

    async def go() -> None:
        clients = [AgentClient(ctx.chat(f"agent{i}", "judge")) for i in range(8)]
        message = UserMessage(content="score it", source="user")
        await asyncio.gather(*(c.create([message]) for c in clients for _ in range(3)))

    asyncio.run(go())
    assert seen[1] == 3
    assert len(ctx.calls) == 24


def test_a_retry_waits_without_holding_a_connection_slot(pdsqi9: Rubric) -> None:
    # One connection: the first call fails and backs off for a while; the second call is
    # answered during that back-off, before the first call's retry.
    slow = RetryPolicy(max_attempts=2, initial_wait=0.3, max_wait=0.3, jitter=0.0)
    settings = ModelSettings(model="openai/x", base_url="http://127.0.0.1:9/v1", max_connections=1)
    ctx = _context(pdsqi9, settings, slow)
    model = ctx.models.model_for("judge", "judge")
    order: list[str] = []

    async def attempt(name: str, fail: list[bool]) -> CallOutcome:
        order.append(name)
        if fail:
            fail.pop()
            raise ProviderFault("HTTP 502: bad gateway", retryable=True)
        return _outcome()

    async def go() -> None:
        first_fails = [True]
        first = asyncio.create_task(
            ctx.send("a", "judge", model, lambda: attempt("first", first_fails))
        )
        await asyncio.sleep(0.05)
        second = asyncio.create_task(ctx.send("b", "judge", model, lambda: attempt("second", [])))
        await asyncio.gather(first, second)

    asyncio.run(go())
    assert order == ["first", "second", "first"]


def test_no_limit_takes_no_connection_slot(pdsqi9: Rubric) -> None:
    # The single judge's call function stays the direct one (no extra semaphore per call).
    settings = ModelSettings(model="openai/x", base_url="http://127.0.0.1:9/v1")
    ctx = _context(pdsqi9, settings, FAST)
    assert ctx.models.connection_limit(settings) is None
    call = ctx.call_fn("judge", "judge")
    assert getattr(call, "func", None) == ctx._call
    limited = settings.model_copy(update={"max_connections": 4})
    ctx = _context(pdsqi9, limited, FAST)
    assert getattr(ctx.call_fn("judge", "judge"), "func", None) is None


def test_the_connection_key_is_the_server_without_its_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def key(**settings: Any) -> str:
        model = ModelSettings(**{"model": "openai/x", **settings})
        return provider_for(model).connection_key(model)

    secret_url = "http://user:sk-pass-123@LocalHost:8000/v1/?api-key=abc-key-456"
    assert "sk-pass-123" not in key(base_url=secret_url)
    assert "abc-key-456" not in key(base_url=secret_url)
    # One server however it is spelt, whichever model or setting reaches it.
    plain = key(base_url="http://localhost:8000/v1")
    assert plain == key(base_url="HTTP://LOCALHOST:8000/v1/", model="openai/other", seed=3)
    assert plain != key(base_url="http://localhost:8001/v1")
    assert plain != key(base_url="http://localhost:8000/v1", model="azure/x")
    # No base_url: the endpoint the client reads from the environment, else the provider's own.
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    default = key()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    assert key() == plain != default


def test_the_setting_is_checked_and_named(tmp_path: Path) -> None:
    for bad in (0, -1, "two"):
        with pytest.raises(ValidationError, match="max_connections"):
            ModelSettings(model="openai/x", max_connections=bad)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    config = tmp_path / "run.yaml"
    config.write_text("judge:\n  model: mock/judge\n  max_connections: 0\n", encoding="utf-8")
    db = tmp_path / "runs.duckdb"
    done = invoke("run", "--data", str(data), "--config", str(config), "--db", str(db))
    assert done.exit_code == 2
    assert "judge.max_connections" in done.stderr and not db.exists()


def test_a_limit_changes_neither_stored_keys_nor_a_sharded_run_id(tmp_path: Path) -> None:
    # Per machine, like rpm: shards with different limits still join one run.
    items = make_items(3)
    plain = RunConfig(data="x.jsonl", judge=ModelSettings(model="mock/judge"))
    limited = RunConfig(data="x.jsonl", judge=ModelSettings(model="mock/judge", max_connections=2))
    assert sharded_run_id(plain, items) == sharded_run_id(limited, items)
    # Unset, the stored settings are those of before (an older run's config reads as None).
    assert "max_connections" not in plain.judge.public_dict()  # type: ignore[union-attr]
    stored = ModelSettings.model_validate({"model": "openai/x"})
    assert stored.max_connections is None
