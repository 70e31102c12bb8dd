"""The direct client's short way from rendered turns to the wire (issue 27): what reaches the
server, the cache key and the usage sums are those of the long way through AutoGen messages."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from autogen_core.models import AssistantMessage, SystemMessage, UserMessage

from clinjudge.judges import JudgeModel, ModelSettings, ProviderFault
from clinjudge.judges.clients import CallConfig, reply_schema_for
from clinjudge.judges.clients._base_client import (
    TurnMessages,
    reply_usage,
    to_autogen_messages,
    to_openai_messages,
)
from clinjudge.judges.clients._cache import cache_key
from clinjudge.judges.clients._direct_client import DirectChatCompletionClient
from clinjudge.rubrics import ChatTurn, Rubric
from tests.fake_openai import FakeOpenAIServer

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
        assert isinstance(model.client, DirectChatCompletionClient)
        config = CallConfig(schema=reply_schema_for("grades", SCHEMA, shared=True), extra=extra)
        try:
            return [await model.generate(turns, config) for turns in conversations]
        finally:
            await model.close()

    return asyncio.run(go())


def test_turns_read_as_the_autogen_messages_they_stand_for() -> None:
    turns = [*TURNS, ChatTurn("tool", "a role of no one's")]
    mine = list(turns)
    messages = TurnMessages(mine)
    mine.append(ChatTurn("user", "added after the call was made"))
    assert len(messages) == 5
    # Written out here, not taken from the conversion under test.
    expected = [
        SystemMessage(content=TURNS[0].content),
        UserMessage(content=TURNS[1].content, source="user"),
        AssistantMessage(content=TURNS[2].content, source="judge"),
        UserMessage(content=TURNS[3].content, source="user"),
        UserMessage(content="a role of no one's", source="user"),
    ]
    assert list(messages) == expected
    assert messages[0] == expected[0] and messages[-1] == expected[-1]
    assert messages[1:3] == expected[1:3]


def test_turns_go_to_chat_format_as_their_autogen_messages_would() -> None:
    turns = [*TURNS, ChatTurn("tool", "a role of no one's")]
    short = to_openai_messages(TurnMessages(turns))
    assert short == to_openai_messages(to_autogen_messages(turns))
    assert short == [
        {"role": "system", "content": TURNS[0].content},
        {"role": "user", "content": TURNS[1].content},
        {"role": "assistant", "content": TURNS[2].content},
        {"role": "user", "content": TURNS[3].content},
        {"role": "user", "content": "a role of no one's"},
    ]


def test_the_cache_key_of_turns_is_that_of_their_autogen_messages() -> None:
    # Keys are stored across runs: the short way must not change one.
    settings = ModelSettings(model="openai/local-judge", base_url="http://127.0.0.1:9/v1")
    args = ((), None, "seed-1", {"max_tokens": 64})
    assert cache_key(settings, TurnMessages(TURNS), *args) == cache_key(
        settings, to_autogen_messages(TURNS), *args
    )


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


def test_the_client_sums_the_usage_of_its_calls() -> None:
    with FakeOpenAIServer() as srv:

        async def go() -> tuple[list[tuple[int, int]], tuple[int, int], tuple[int, int]]:
            client = DirectChatCompletionClient("local-judge", srv.base_url)
            try:
                results = [
                    await client.create([UserMessage(content="one two three", source="user")]),
                    await client.create(to_autogen_messages(TURNS)),
                ]
            finally:
                await client.close()
            last, total = client.actual_usage(), client.total_usage()
            each = [(r.usage.prompt_tokens, r.usage.completion_tokens) for r in results]
            return (
                each,
                (last.prompt_tokens, last.completion_tokens),
                (
                    total.prompt_tokens,
                    total.completion_tokens,
                ),
            )

        each, last, total = asyncio.run(go())
    # The fake server counts whitespace-separated words.
    assert each[0][0] == 3
    assert each[1][0] == sum(len(t.content.split()) for t in TURNS)
    assert last == each[1]
    assert total == (each[0][0] + each[1][0], each[0][1] + each[1][1])


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
        client = DirectChatCompletionClient("local-judge", srv.base_url)
        try:
            return await client.create([UserMessage(content="hi", source="user")])
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
    assert result.content == "ok"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (5, 1)


@pytest.mark.parametrize("body", [b'{"choices": [', b"<html>busy</html>", b"\xff\xfe{}"])
def test_a_reply_neither_reads_is_a_retryable_fault(body: bytes) -> None:
    with RawBodyServer(body) as srv, pytest.raises(ProviderFault) as info:
        _create_once(srv)
    assert info.value.reason.startswith("malformed response: body is not JSON")
    assert info.value.retryable
