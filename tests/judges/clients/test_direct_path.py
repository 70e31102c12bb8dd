"""The direct client's way from rendered turns to the wire (issue 27): what reaches the server,
the messages the turns become, and the usage each reply reports."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from clinjudge.judges import JudgeModel, ModelSettings, ProviderFault
from clinjudge.judges.clients import CallConfig, ChatMessage, reply_schema_for
from clinjudge.judges.clients._direct_client import DirectClient
from clinjudge.judges.clients._messages import chat_messages, wire_messages
from clinjudge.judges.clients._replies import reply_usage
from clinjudge.rubrics import ChatTurn, Rubric
from tests.fake_openai import FakeOpenAIServer
from tests.model_requests import ask

TURNS = [
    ChatTurn("system", "You grade summaries. " * 40),
    ChatTurn("user", "Grade this summary."),
    ChatTurn("assistant", '{"accurate": 3}'),
    ChatTurn("user", "Your reply lacked a field; answer again."),
]

SCHEMA = {
    "type": "object",
    "properties": {"accurate": {"type": "integer"}},
    "required": ["accurate"],
    "additionalProperties": False,
}


class RecordingServer(FakeOpenAIServer):
    """The fake server, also recording each request's headers."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.headers: list[dict[str, str]] = []

    def _handle_chat(self, handler: Any, body: dict[str, Any]) -> None:
        self.headers.append({k.lower(): v for k, v in handler.headers.items()})
        super()._handle_chat(handler, body)


def _settings(srv: FakeOpenAIServer, **kw: Any) -> ModelSettings:
    kw.setdefault("timeout", 5.0)
    return ModelSettings(model="openai/local-judge", base_url=srv.base_url, **kw)


def _judge(
    settings: ModelSettings,
    rubric: Rubric,
    conversations: list[list[ChatTurn]],
    extra: dict[str, Any] | None = None,
) -> list[Any]:
    async def go() -> list[Any]:
        model = JudgeModel(settings, rubric)
        assert isinstance(model.client, DirectClient)
        config = CallConfig(schema=reply_schema_for("grades", SCHEMA, shared=True), extra=extra)
        try:
            return [await model.generate(turns, config) for turns in conversations]
        finally:
            await model.close()

    return asyncio.run(go())


def test_turns_become_messages_with_who_said_them() -> None:
    turns = [*TURNS, ChatTurn("tool", "a role of no one's")]
    # Written out here, not taken from the conversion under test.
    assert chat_messages(turns) == [
        ChatMessage("system", TURNS[0].content),
        ChatMessage("user", TURNS[1].content, "user"),
        ChatMessage("assistant", TURNS[2].content, "judge"),
        ChatMessage("user", TURNS[3].content, "user"),
        ChatMessage("user", "a role of no one's", "user"),
    ]
    assert chat_messages(TURNS[2:3], agent="scribe")[0].source == "scribe"


def test_turns_go_to_chat_format_without_who_said_them() -> None:
    turns = [*TURNS, ChatTurn("tool", "a role of no one's")]
    assert wire_messages(chat_messages(turns)) == [
        {"role": "system", "content": TURNS[0].content},
        {"role": "user", "content": TURNS[1].content},
        {"role": "assistant", "content": TURNS[2].content},
        {"role": "user", "content": TURNS[3].content},
        {"role": "user", "content": "a role of no one's"},
    ]


def test_every_call_sends_the_whole_request_with_its_headers(
    pdsqi9: Rubric, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIRECT_PATH_KEY", "sk-direct-path-7")
    conversations = [TURNS[:2], TURNS, TURNS[:2]]
    with RecordingServer() as srv:
        settings = _settings(srv, api_key_env="DIRECT_PATH_KEY", temperature=0.3, max_tokens=99)
        outcomes = _judge(settings, pdsqi9, conversations)
    assert [o.output_mode for o in outcomes] == ["json_schema"] * 3
    assert len(srv.requests) == 3
    for body, turns in zip(srv.requests, conversations, strict=True):
        assert body["model"] == "local-judge"
        assert body["messages"] == [{"role": t.role, "content": t.content} for t in turns]
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "grades", "schema": SCHEMA, "strict": True},
        }
        assert (body["temperature"], body["max_tokens"]) == (0.3, 99)
        assert "json_schema" not in body  # our key never goes out
    for headers in srv.headers:
        assert headers["content-type"] == "application/json"
        assert headers["authorization"] == "Bearer sk-direct-path-7"


def test_what_orjson_refuses_is_sent_whole_by_json(pdsqi9: Rubric) -> None:
    # An integer beyond 64 bits and a lone surrogate: orjson refuses both, json takes them,
    # and the parts serialized in advance (system prompt, schema) go out as before.
    odd_system = ChatTurn("system", "Rules \ud800 end.")
    conversations = [[odd_system, TURNS[1]], TURNS[:2], [odd_system, TURNS[1]]]
    with RecordingServer() as srv:
        _judge(_settings(srv), pdsqi9, conversations[:2], extra={"big_field": 2**70})
        _judge(_settings(srv), pdsqi9, conversations[2:])
    assert len(srv.requests) == 3
    for body, turns in zip(srv.requests, conversations, strict=True):
        assert body["messages"] == [{"role": t.role, "content": t.content} for t in turns]
        assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert [body.get("big_field") for body in srv.requests] == [2**70, 2**70, None]
    assert all(h["content-type"] == "application/json" for h in srv.headers)


def test_each_reply_reports_its_own_usage() -> None:
    with FakeOpenAIServer() as srv:

        async def go() -> list[tuple[int, int]]:
            client = DirectClient("local-judge", srv.base_url)
            try:
                replies = [
                    await ask(client, "one two three"),
                    await ask(client, *chat_messages(TURNS)),
                ]
            finally:
                await client.close()
            return [(r.prompt_tokens, r.completion_tokens) for r in replies]

        each = asyncio.run(go())
    # The fake server counts whitespace-separated words.
    assert each[0][0] == 3
    assert each[1][0] == sum(len(t.content.split()) for t in TURNS)
    assert all(completion > 0 for _, completion in each)


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 10, "completion_tokens": 2}, (10, 2, 0, 0)),
        (
            {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": None},
            (10, 2, 0, 0),
        ),
        (
            {
                "prompt_tokens": 10,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 4},
            },
            (10, 2, 4, 0),
        ),
        (
            {"prompt_tokens": 10, "completion_tokens": 2, "cache_read_input_tokens": 30},
            (10, 2, 10, 0),
        ),
        ({"prompt_tokens": 10.0, "completion_tokens": "2"}, (10, 2, 0, 0)),
        ({"completion_tokens": 2}, (0, 2, 0, 0)),
    ],
)
def test_reply_usage(usage: dict[str, Any], expected: tuple[int, int, int, int]) -> None:
    got = reply_usage(usage)
    assert got is not None
    assert (
        got.prompt_tokens,
        got.completion_tokens,
        got.cached_input_tokens,
        got.cache_write_tokens,
    ) == expected


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -1, "completion_tokens": 2},
        {"prompt_tokens": 10, "completion_tokens": 2**40},
        {"prompt_tokens": 1.5, "completion_tokens": 2},
        {"prompt_tokens": 10, "completion_tokens": "many"},
        {
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": -3},
        },
    ],
)
def test_broken_usage_is_a_retryable_fault(usage: dict[str, Any]) -> None:
    with pytest.raises(ProviderFault, match="malformed response: usage") as info:
        reply_usage(usage)
    assert info.value.retryable


class RawBodyServer(FakeOpenAIServer):
    """Answers every chat request with the same raw body."""

    def __init__(self, body: bytes):
        super().__init__()
        self.body = body

    def _handle_chat(self, handler: Any, body: dict[str, Any]) -> None:
        handler._send(200, self.body)


def _create_once(srv: FakeOpenAIServer) -> Any:
    async def go() -> Any:
        client = DirectClient("local-judge", srv.base_url)
        try:
            return await ask(client, "hi")
        finally:
            await client.close()

    return asyncio.run(go())


def test_a_reply_orjson_refuses_and_json_reads_is_still_read() -> None:
    # A NaN is not JSON to orjson; Python's json reads it, as this client always did.
    reply = {
        "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1},
        "score": float("nan"),
    }
    with RawBodyServer(json.dumps(reply).encode()) as srv:
        result = _create_once(srv)
    assert result.text == "ok"
    assert (result.prompt_tokens, result.completion_tokens) == (5, 1)


@pytest.mark.parametrize("body", [b'{"choices": [', b"<html>busy</html>", b"\xff\xfe{}"])
def test_a_reply_neither_reads_is_a_retryable_fault(body: bytes) -> None:
    with RawBodyServer(body) as srv, pytest.raises(ProviderFault) as info:
        _create_once(srv)
    assert info.value.reason.startswith("malformed response: body is not JSON")
    assert info.value.retryable
