"""Tests of the fake OpenAI-compatible server itself, over real HTTP."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fake_openai import (
    LIKERT_KEYS,
    PDSQI9_KEYS,
    FakeOpenAIServer,
    Fault,
    make_fake_openai_fixture,
    pdsqi9_scores,
    random_faults,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
USER_TEXT = "Summarize: 67M with CHF exacerbation, diuresed, discharged on furosemide."

server = make_fake_openai_fixture("server")


@pytest.fixture
def client(server: FakeOpenAIServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=5.0) as c:
        yield c


def _ask(client: openai.OpenAI, text: str = USER_TEXT, **kwargs: Any) -> Any:
    return client.chat.completions.create(
        model=kwargs.pop("model", "judge-model"),
        messages=[{"role": "user", "content": text}],
        **kwargs,
    )


def _assert_valid_pdsqi9(reply: dict[str, Any]) -> None:
    assert set(PDSQI9_KEYS) <= set(reply)
    assert set(reply) - set(PDSQI9_KEYS) == {"rationale"}
    for key in LIKERT_KEYS:
        assert reply[key] in range(1, 6), key
    assert reply["abstraction"] in (0, 1)
    if reply["abstraction"] == 0:
        assert reply["synthesized"] is None
    else:
        assert reply["synthesized"] in range(1, 6)
    assert reply["voice_summ"] in (0, 1)
    assert reply["voice_note"] in (0, 1)
    assert isinstance(reply["rationale"], str) and reply["rationale"]


# -- pure helpers ---------------------------------------------------------------------


def test_pdsqi9_scores_deterministic_valid_and_varied() -> None:
    assert pdsqi9_scores("abc") == pdsqi9_scores("abc")
    replies = [pdsqi9_scores(f"note {i}") for i in range(200)]
    for reply in replies:
        _assert_valid_pdsqi9(reply)
    assert {r["abstraction"] for r in replies} == {0, 1}
    assert {r["accurate"] for r in replies} == {1, 2, 3, 4, 5}
    assert len({json.dumps(r) for r in replies}) > 150


def test_fault_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError):
        Fault("explode")  # type: ignore[arg-type]


def test_random_faults_deterministic_per_index() -> None:
    a, b = random_faults(0.5, seed=7), random_faults(0.5, seed=7)
    plan_a = [a(i, {}) for i in range(200)]
    plan_b = [b(i, {}) for i in reversed(range(200))][::-1]  # order of asking does not matter
    assert plan_a == plan_b
    kinds = {f.kind for f in plan_a if f is not None}
    assert kinds == {"rate_limit", "server_error", "truncated", "malformed_json"}
    assert 60 < sum(f is not None for f in plan_a) < 140
    assert all(f.retry_after == 0.05 for f in plan_a if f is not None and f.kind == "rate_limit")
    assert all(random_faults(0.0, 1)(i, {}) is None for i in range(50))
    assert all(random_faults(1.0, 1)(i, {}) is not None for i in range(50))


# -- normal replies -------------------------------------------------------------------


def test_default_reply_is_valid_pdsqi9(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model="gpt-judge-1",
        messages=[
            {"role": "system", "content": "You are a careful clinical rater."},
            {"role": "user", "content": USER_TEXT, "name": "rater"},
        ],
        response_format={"type": "json_object"},
        seed=3,
        temperature=0.0,
        top_p=1.0,
        max_completion_tokens=300,
    )
    assert resp.object == "chat.completion"
    assert resp.id
    assert resp.model == "gpt-judge-1"
    choice = resp.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    reply = json.loads(choice.message.content or "")
    _assert_valid_pdsqi9(reply)
    assert reply == pdsqi9_scores(USER_TEXT)
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == len(USER_TEXT.split()) + 6
    assert resp.usage.completion_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    # extras are accepted and recorded verbatim
    body = server.requests[0]
    assert body["seed"] == 3 and body["response_format"] == {"type": "json_object"}
    assert body["messages"][1]["name"] == "rater"
    assert server.request_count == 1


def test_list_content_parts_feed_default_responder(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": [{"type": "text", "text": USER_TEXT}]}],
    )
    assert json.loads(resp.choices[0].message.content or "") == pdsqi9_scores(USER_TEXT)


def test_custom_responder_str_and_dict() -> None:
    def responder(body: dict[str, Any]) -> str | dict[str, Any]:
        text = body["messages"][-1]["content"]
        return {"echo": text} if text.startswith("{") else f"plain:{text}"

    with (
        FakeOpenAIServer(responder) as srv,
        openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0) as c,
    ):
        assert _ask(c, "hi").choices[0].message.content == "plain:hi"
        assert json.loads(_ask(c, "{x").choices[0].message.content or "") == {"echo": "{x"}


def test_chat_completions_without_v1_prefix_and_models(server: FakeOpenAIServer) -> None:
    root = server.base_url.removesuffix("/v1")
    with httpx.Client(base_url=root) as h:
        r = h.post("/chat/completions", json={"model": "m", "messages": []})
        assert r.status_code == 200
        assert r.json()["usage"]["total_tokens"] > 0
        assert h.get("/v1/models").json()["data"][0]["id"] == "fake-model"
        assert h.get("/nope").status_code == 404
        assert h.post("/v1/chat/completions", content=b"{not json").status_code == 400


def test_models_list_via_sdk(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["fake-model"]


def test_stream_is_rejected(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        _ask(client, stream=True)


# -- faults ---------------------------------------------------------------------------


def test_rate_limit_with_retry_after(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    server.script([Fault("rate_limit", retry_after=0.25), Fault("rate_limit")])
    with pytest.raises(openai.RateLimitError) as info:
        _ask(client)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "0.25"
    assert info.value.code == "rate_limit_exceeded"
    with pytest.raises(openai.RateLimitError) as info:
        _ask(client)
    assert "retry-after" not in info.value.response.headers


@pytest.mark.parametrize(
    ("kind", "status"), [("server_error", 500), ("bad_gateway", 502), ("unavailable", 503)]
)
def test_http_error_faults(
    server: FakeOpenAIServer, client: openai.OpenAI, kind: Any, status: int
) -> None:
    server.script([Fault(kind, retry_after=1.0)])
    with pytest.raises(openai.InternalServerError) as info:
        _ask(client)
    assert info.value.status_code == status
    assert info.value.response.headers["retry-after"] == "1"
    assert isinstance(info.value.body, dict) and info.value.body["type"] == "server_error"
    assert _ask(client).choices[0].finish_reason == "stop"  # next request is fine


def test_hang_times_out_client(server: FakeOpenAIServer) -> None:
    server.script([Fault("hang", hang_seconds=1.5)])
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=0.5) as c:
        t0 = time.monotonic()
        with pytest.raises((openai.APITimeoutError, openai.APIConnectionError)):
            _ask(c)
        assert time.monotonic() - t0 < 1.4


def test_hang_ends_with_closed_socket_and_no_response(server: FakeOpenAIServer) -> None:
    server.script([Fault("hang", hang_seconds=0.2)])
    with httpx.Client(base_url=server.base_url, timeout=5.0) as h:
        with pytest.raises(httpx.RemoteProtocolError):
            h.post("/chat/completions", json={"model": "m", "messages": []})
        assert h.post("/chat/completions", json={"model": "m", "messages": []}).status_code == 200


def test_stop_is_fast_with_hanging_request_in_flight() -> None:
    srv = FakeOpenAIServer(faults=[Fault("hang", hang_seconds=30.0)]).start()
    errors: list[BaseException] = []

    def call() -> None:
        try:
            httpx.post(srv.base_url + "/chat/completions", json={"messages": []}, timeout=10.0)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion below
            errors.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    deadline = time.monotonic() + 3.0
    while srv.request_count == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.request_count == 1
    t0 = time.monotonic()
    srv.stop()
    assert time.monotonic() - t0 < 1.5
    worker.join(timeout=3.0)
    assert not worker.is_alive()
    assert errors and isinstance(errors[0], httpx.TransportError)


def test_reset_is_a_connection_error(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    server.script([Fault("reset"), Fault("reset")])
    with pytest.raises(openai.APIConnectionError) as info:
        _ask(client)
    assert not isinstance(info.value, openai.APITimeoutError)
    with httpx.Client(base_url=server.base_url) as h, pytest.raises(httpx.TransportError) as raw:
        h.post("/chat/completions", json={"messages": []})
    assert "reset" in str(raw.value).lower() or isinstance(raw.value, httpx.RemoteProtocolError)
    assert _ask(client).choices[0].finish_reason == "stop"


def test_malformed_json(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    server.script([Fault("malformed_json"), Fault("malformed_json")])
    with pytest.raises(Exception) as info:  # noqa: B017 - the SDK's exact type is not promised
        _ask(client)
    assert not isinstance(info.value, openai.APIStatusError)
    with httpx.Client(base_url=server.base_url) as h:
        r = h.post("/chat/completions", json={"messages": []})
    assert r.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.content)


def test_truncated(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    server.script([Fault("truncated")])
    resp = _ask(client)
    full = json.dumps(pdsqi9_scores(USER_TEXT))
    content = resp.choices[0].message.content or ""
    assert resp.choices[0].finish_reason == "length"
    assert full.startswith(content) and 0.5 * len(full) < len(content) < 0.7 * len(full)
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)


def test_wrong_keys(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    server.script([Fault("wrong_keys")])
    reply = json.loads(_ask(client).choices[0].message.content or "")
    assert "accuracy_score" in reply
    assert not set(reply) & set(PDSQI9_KEYS)
    assert len(reply) == len(PDSQI9_KEYS) + 1


def test_out_of_range(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    server.script([Fault("out_of_range")])
    reply = json.loads(_ask(client).choices[0].message.content or "")
    assert set(reply) == set(PDSQI9_KEYS) | {"rationale"}
    likert = [reply[k] for k in LIKERT_KEYS]
    assert 9 in likert and 0 in likert


def test_empty_choices(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    server.script([Fault("empty_choices")])
    resp = _ask(client)
    assert resp.choices == []
    assert resp.usage is not None and resp.usage.total_tokens > 0


def test_fault_sequence_indexed_by_request_number() -> None:
    faults = [None, Fault("server_error"), None, Fault("truncated")]
    with (
        FakeOpenAIServer(faults=faults) as srv,
        openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0) as c,
    ):
        assert _ask(c).choices[0].finish_reason == "stop"
        with pytest.raises(openai.InternalServerError):
            _ask(c)
        assert _ask(c).choices[0].finish_reason == "stop"
        assert _ask(c).choices[0].finish_reason == "length"
        assert _ask(c).choices[0].finish_reason == "stop"  # past the end: no fault
        assert srv.request_count == 5


def test_fault_callable_gets_index_and_body() -> None:
    seen: list[tuple[int, str]] = []

    def plan(index: int, body: dict[str, Any]) -> Fault | None:
        seen.append((index, body["model"]))
        return Fault("unavailable") if body["model"] == "bad" else None

    with (
        FakeOpenAIServer(faults=plan) as srv,
        openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0) as c,
    ):
        _ask(c, model="good")
        with pytest.raises(openai.InternalServerError) as info:
            _ask(c, model="bad")
        assert info.value.status_code == 503
    assert seen == [(0, "good"), (1, "bad")]


def test_script_consumed_in_order_before_faults() -> None:
    with (
        FakeOpenAIServer(faults=lambda i, b: Fault("truncated")) as srv,
        openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0) as c,
    ):
        srv.script(["first", {"second": 2}])
        srv.script([Fault("server_error"), "fourth"])
        assert _ask(c, "a").choices[0].message.content == "first"
        assert json.loads(_ask(c, "b").choices[0].message.content or "") == {"second": 2}
        with pytest.raises(openai.InternalServerError):
            _ask(c, "c")
        resp = _ask(c, "d")
        assert (resp.choices[0].message.content, resp.choices[0].finish_reason) == (
            "fourth",
            "stop",
        )
        assert _ask(c, "e").choices[0].finish_reason == "length"  # queue empty: faults apply
        texts = [r["messages"][0]["content"] for r in srv.requests]
        assert texts == ["a", "b", "c", "d", "e"]


def test_latency_is_settable_and_applies_to_faults(
    server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    server.latency = 0.2
    server.script([Fault("server_error")])
    t0 = time.monotonic()
    with pytest.raises(openai.InternalServerError):
        _ask(client)
    _ask(client)
    assert time.monotonic() - t0 >= 0.4
    server.latency = 0.0
    t0 = time.monotonic()
    _ask(client)
    assert time.monotonic() - t0 < 0.2


# -- connections and concurrency ------------------------------------------------------


def test_keep_alive_reuses_one_connection(server: FakeOpenAIServer) -> None:
    with httpx.Client(base_url=server.base_url) as h:
        for i in range(60):
            body = {"model": "m", "messages": [{"role": "user", "content": str(i)}]}
            r = h.post("/chat/completions", json=body)
            assert r.status_code == 200
            assert json.loads(r.json()["choices"][0]["message"]["content"]) == pdsqi9_scores(str(i))
    assert server.connections_opened == 1
    assert server.request_count == 60


def test_concurrent_requests_all_recorded(server: FakeOpenAIServer) -> None:
    server.latency = 0.05
    n_threads, per_thread = 16, 5
    failures: list[int] = []

    def worker(h: httpx.Client, t: int) -> None:
        for i in range(per_thread):
            body = {"model": "m", "messages": [{"role": "user", "content": f"{t}-{i}"}]}
            if h.post("/chat/completions", json=body).status_code != 200:
                failures.append(t)

    limits = httpx.Limits(max_connections=n_threads)
    with httpx.Client(base_url=server.base_url, limits=limits) as h:
        threads = [threading.Thread(target=worker, args=(h, t)) for t in range(n_threads)]
        t0 = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert not failures
    assert time.monotonic() - t0 < 2.0  # sequential would take 4 s
    seen = sorted(r["messages"][0]["content"] for r in server.requests)
    assert seen == sorted(f"{t}-{i}" for t in range(n_threads) for i in range(per_thread))


def test_restart_after_stop() -> None:
    srv = FakeOpenAIServer()
    with srv:
        first = srv.base_url
    with pytest.raises(RuntimeError):
        _ = srv.base_url
    with srv, httpx.Client(base_url=srv.base_url) as h:
        assert h.get("/models").status_code == 200
    assert first.startswith("http://127.0.0.1:")


# -- subprocess mode ------------------------------------------------------------------


def test_subprocess_mode_prints_ready_and_serves() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_openai", "--port", "0", "--latency", "0.01"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 15.0)
        assert ready, "server did not print READY in time"
        line = proc.stdout.readline().strip()
        word, base_url = line.split(" ", 1)
        assert word == "READY" and base_url.startswith("http://127.0.0.1:")
        assert base_url.endswith("/v1")
        with openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=5.0) as c:
            _assert_valid_pdsqi9(json.loads(_ask(c).choices[0].message.content or ""))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5.0) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
