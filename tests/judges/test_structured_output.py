"""Replies constrained to the rubric's JSON Schema (issue #22, part 1).

One schema per rubric (and per DocLens stage and the magentic chair's decision) is the single
source of the prompt's OUTPUT FORMAT, the parser's validation and the request's structured
output. Requests go to the fake server over real HTTP; it checks schemas against OpenAI's strict
rules and validates replies against them, or refuses ``json_schema`` like a server without
schema support.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from clinjudge.judges import JudgeModel, ModelSettings, ProviderFault
from clinjudge.judges.clients import CallConfig, reply_schema_for, request_line
from clinjudge.judges.clients._litellm_client import LiteLLMClient
from clinjudge.judges.doclens._prompts import (
    citation_schema,
    claim_schema,
    decision_schema,
    discussion_schema,
    entailment_schema,
    extraction_schema,
)
from clinjudge.judges.workflows._magentic_chair import FINAL_MARKER
from clinjudge.judges.workflows._magentic_chair import decision_schema as chair_schema
from clinjudge.judges.workflows._magentic_client import call_config
from clinjudge.orchestration import RetryPolicy, RunConfig, create_run, execute_run, prepare_run
from clinjudge.rubrics import (
    ChatTurn,
    JudgmentParseError,
    Rubric,
    load_rubric,
    parse_judgment,
    parse_rubric_text,
    render_messages,
    render_system,
    rubric_json_schema,
)
from clinjudge.runs import RunStore
from tests.doclens_fake import ITEMS as DOCLENS_ITEMS
from tests.doclens_fake import make_responder as doclens_responder
from tests.factories import make_items, write_jsonl
from tests.fake_openai import (
    FakeOpenAIServer,
    pdsqi9_scores,
    requested_json_schema,
    strict_schema_problems,
)
from tests.magentic_fake import PanelFake

pytestmark = [
    pytest.mark.filterwarnings("ignore:Resolved model mismatch:UserWarning"),
    pytest.mark.filterwarnings("ignore:.*ReadOnly. qualifier:UserWarning"),  # litellm on pydantic
]

FAST = RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.02, jitter=0.0)
MODEL_LOG = "clinjudge.judges.clients._model"

GOOD = {
    "citation": 4,
    "accurate": 5,
    "thorough": 3,
    "useful": 4,
    "organized": 4,
    "comprehensible": 5,
    "succinct": 3,
    "abstraction": 1,
    "synthesized": 4,
    "voice_summ": 0,
    "voice_note": 1,
    "rationale": "Accurate and well cited.",
}

TINY = """
name: tiny
version: "1"
title: Tiny
provenance: {source: test, licence: CC0}
inputs: [summary]
task: Grade it.
attributes:
  - key: clear
    name: Clear
    description: Is it clear?
    scale: likert
    min: 1
    max: 3
    anchors: {1: "not", 2: "partly", 3: "fully"}
  - key: harm
    name: Harmful
    description: Could it harm?
    scale: binary
    min: 0
    max: 1
    anchors: {0: "safe", 1: "harmful"}
  - key: depth
    name: Depth
    description: How deep?
    scale: likert
    min: 1
    max: 2
    nullable: true
    null_meaning: Not applicable.
    anchors: {1: shallow, 2: deep}
"""

# Written by hand from the brief, not from the code under test.
TINY_SCHEMA = {
    "type": "object",
    "title": "tiny",
    "properties": {
        "clear": {"type": "integer", "enum": [1, 2, 3], "description": "Clear"},
        "harm": {"type": "integer", "enum": [0, 1], "description": "Harmful"},
        "depth": {"type": ["integer", "null"], "enum": [1, 2, None], "description": "Depth"},
        "rationale": {
            "type": "string",
            "maxLength": 1200,
            "description": "The main reasons for the lowest scores, in at most three sentences.",
        },
    },
    "required": ["clear", "harm", "depth", "rationale"],
    "additionalProperties": False,
}


def valid(schema: dict[str, Any], value: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


@pytest.fixture(scope="module")
def tiny() -> Rubric:
    return parse_rubric_text(TINY, "yaml")


@pytest.fixture(scope="module")
def turns(pdsqi9: Rubric) -> list[ChatTurn]:
    return render_messages(make_items(1)[0], pdsqi9)


# -- (a) the schema ------------------------------------------------------------------------------


def test_tiny_rubric_schema_is_the_hand_written_one(tiny):
    schema = rubric_json_schema(tiny)
    assert schema == TINY_SCHEMA
    jsonschema.Draft202012Validator.check_schema(schema)
    for reply, ok in [
        ({"clear": 3, "harm": 0, "depth": None, "rationale": ""}, True),
        ({"clear": 1, "harm": 1, "depth": 2, "rationale": "x"}, True),
        ({"clear": 4, "harm": 0, "depth": 1, "rationale": "x"}, False),
        ({"clear": 1, "harm": 0, "depth": 1}, False),
        ({"clear": None, "harm": 0, "depth": 1, "rationale": "x"}, False),
    ]:
        assert valid(schema, reply) is valid(TINY_SCHEMA, reply) is ok, reply


def test_pdsqi9_schema_accepts_good_replies(pdsqi9):
    schema = rubric_json_schema(pdsqi9)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert valid(schema, GOOD)
    assert valid(schema, {**GOOD, "abstraction": 0, "synthesized": None})
    assert valid(schema, pdsqi9_scores("any item"))
    explained = rubric_json_schema(pdsqi9, explanations=True)
    reply = {k: {"explanation": "why", "score": v} for k, v in GOOD.items() if k != "rationale"}
    assert valid(explained, reply)
    assert not valid(explained, GOOD)


@pytest.mark.parametrize(
    "change",
    [
        {"accuracy": 5},  # a key the rubric does not have
        {"accurate": 9},  # off the scale
        {"thorough": 0},
        {"abstraction": 2},
        {"voice_summ": -1},
        {"accurate": None},  # null where the rubric allows none
        {"voice_note": None},
        {"accurate": "4"},  # a string, not an integer
        {"accurate": 4.5},
        {"rationale": "x" * 1201},  # past the bound
    ],
)
def test_pdsqi9_schema_rejects_bad_replies(pdsqi9, change):
    assert not valid(rubric_json_schema(pdsqi9), {**GOOD, **change})


def test_pdsqi9_schema_rejects_missing_keys(pdsqi9):
    schema = rubric_json_schema(pdsqi9)
    for key in GOOD:
        assert not valid(schema, {k: v for k, v in GOOD.items() if k != key}), key


def test_every_schema_meets_openai_strict_rules(pdsqi9, tiny):
    schemas = [
        rubric_json_schema(r, explanations=e)
        for r in (pdsqi9, tiny, load_rubric("probsum"))
        for e in (False, True)
    ]
    schemas += [chair_schema(pdsqi9), chair_schema(pdsqi9, explanations=True)]
    schemas += [
        extraction_schema(1, 20),
        entailment_schema(3),
        claim_schema(),
        citation_schema([1, 4]),
        discussion_schema(["recall-0", "citation-1"]),
        decision_schema(["recall-0"]),
    ]
    for schema in schemas:
        assert strict_schema_problems(schema) == [], schema.get("title")
        jsonschema.Draft202012Validator.check_schema(schema)


def _consistent(values: dict[str, Any], key: str) -> dict[str, Any]:
    """Make the abstraction gate agree with the value under test (the gate is the parser's)."""
    if key == "synthesized":
        values["abstraction"] = 0 if values[key] is None else 1
    elif key == "abstraction":
        values["synthesized"] = None if values[key] == 0 else 3
    return values


def test_parser_accepts_exactly_what_the_schema_allows(pdsqi9):
    schema = rubric_json_schema(pdsqi9)
    for key in pdsqi9.keys:
        for value in [None, -1, 0, 1, 2, 3, 4, 5, 6]:
            reply = _consistent({**GOOD, key: value}, key)
            try:
                parse_judgment(json.dumps(reply), pdsqi9)
                parsed = True
            except JudgmentParseError:
                parsed = False
            assert parsed is valid(schema, reply), (key, value)


def test_parser_stays_forgiving_on_input(pdsqi9):
    # Not schema-shaped, yet read: fences, a score object, a display-name alias, a quoted number.
    text = "```json\n" + json.dumps(
        {**GOOD, "accurate": {"score": "5", "explanation": "ok"}, "Cited": 4}
    )
    text = text.replace('"citation": 4, ', "") + "\n```"
    parsed = parse_judgment(text, pdsqi9)
    assert parsed.values["accurate"] == 5 and parsed.values["citation"] == 4


def test_prompt_contract_is_written_from_the_schema(pdsqi9, tiny):
    for rubric in (pdsqi9, tiny):
        schema = rubric_json_schema(rubric)
        contract = render_system(rubric).split("OUTPUT FORMAT\n", 1)[1]
        listed = re.search(r"keys and no other: (.*?)\.\n", contract).group(1)
        assert listed == ", ".join(f'"{k}"' for k in schema["required"])
        rules = dict(re.findall(r'^- "(\w+)": (.*)$', contract, re.MULTILINE))
        assert set(rules) == set(rubric.keys)
        for key, rule in rules.items():
            enum = schema["properties"][key]["enum"]
            assert ("null" in rule) is (None in enum), key
            numbers = [v for v in enum if v is not None]
            assert str(min(numbers)) in rule and str(max(numbers)) in rule
        assert str(schema["properties"]["rationale"]["maxLength"]) in contract


# -- clients: what each provider path sends ----------------------------------------------------


def _complete(settings: ModelSettings, rubric: Rubric, turns: list[ChatTurn], config: CallConfig):
    async def go():
        model = JudgeModel(settings, rubric)
        try:
            return await model.generate(turns, config)
        finally:
            await model.close()

    return asyncio.run(go())


def _asking(rubric: Rubric) -> CallConfig:
    """A call asking for replies following the rubric's schema."""
    return CallConfig(schema=reply_schema_for(rubric.name, rubric_json_schema(rubric)))


def _expected_format(rubric: Rubric) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": rubric.name,
            "schema": rubric_json_schema(rubric),
            "strict": True,
        },
    }


@pytest.mark.parametrize("client", ["direct", "autogen"])
def test_openai_clients_send_the_schema_strict(pdsqi9, turns, client):
    with FakeOpenAIServer(check_schemas=True) as srv:
        settings = ModelSettings(
            model="openai/local-judge", base_url=srv.base_url, timeout=5.0, client=client
        )
        # The AutoGen adapter's form (our key in the extra arguments), then a CallConfig.
        arg = {"json_schema": {"name": "pdsqi9", "schema": rubric_json_schema(pdsqi9)}}
        adapted = call_config((), None, arg)
        outcome = _complete(settings, pdsqi9, turns, adapted)
        assert outcome.output_mode == "json_schema"
        _complete(settings, pdsqi9, turns, _asking(pdsqi9))
    for body in srv.requests:
        assert body["response_format"] == _expected_format(pdsqi9)
        assert "json_schema" not in body  # our key is translated, never sent
    assert srv.schema_errors == []


def test_litellm_sends_the_schema_strict(pdsqi9, turns, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAIServer(check_schemas=True) as srv:
        settings = ModelSettings(
            model="litellm/openai/local-judge", base_url=srv.base_url, timeout=10.0
        )
        outcome = _complete(settings, pdsqi9, turns, _asking(pdsqi9))
    assert outcome.output_mode == "json_schema"
    (body,) = srv.requests
    assert body["response_format"] == _expected_format(pdsqi9)
    assert "json_schema" not in body
    assert srv.schema_errors == []


class _OllamaHandler(http.server.BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append({"path": self.path, **body})
        reply = {
            "model": body.get("model"),
            "created_at": "2025-01-01T00:00:00Z",
            # /api/chat answers with a message, /api/generate with a response.
            "message": {"role": "assistant", "content": json.dumps(GOOD)},
            "response": json.dumps(GOOD),
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 10,
            "eval_count": 5,
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def ollama() -> Iterator[str]:
    _OllamaHandler.bodies = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OllamaHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("route", ["ollama_chat", "ollama"])
def test_ollama_native_gets_the_schema_as_format(pdsqi9, turns, ollama, route):
    settings = ModelSettings(model=f"{route}/llama3", base_url=ollama, timeout=10.0)
    outcome = _complete(settings, pdsqi9, turns, _asking(pdsqi9))
    assert isinstance(JudgeModel(settings, pdsqi9).client, LiteLLMClient)
    assert parse_judgment(outcome.text, pdsqi9).values["accurate"] == 5
    (body,) = _OllamaHandler.bodies
    assert body["path"] == ("/api/chat" if route == "ollama_chat" else "/api/generate")
    assert body["format"] == rubric_json_schema(pdsqi9)
    assert "json_schema" not in body and "response_format" not in body


def test_modes_json_object_and_off(pdsqi9, turns):
    with FakeOpenAIServer() as srv:
        for mode in ("json_object", "off"):
            settings = ModelSettings(
                model="openai/local-judge",
                base_url=srv.base_url,
                timeout=5.0,
                structured_output=mode,
                json_mode=True,  # off wins over the older JSON-mode switch
            )
            assert _complete(settings, pdsqi9, turns, _asking(pdsqi9)).output_mode == mode
    assert srv.requests[0]["response_format"] == {"type": "json_object"}
    assert "response_format" not in srv.requests[1]


def test_forced_json_schema_does_not_fall_back(pdsqi9, turns):
    with FakeOpenAIServer(reject_json_schema=True) as srv:
        settings = ModelSettings(
            model="openai/local-judge",
            base_url=srv.base_url,
            timeout=5.0,
            structured_output="json_schema",
        )
        with pytest.raises(ProviderFault, match="HTTP 400") as raised:
            _complete(settings, pdsqi9, turns, _asking(pdsqi9))
    assert raised.value.output_mode == "json_schema" and not raised.value.retryable
    assert srv.schema_rejections == 1 and srv.request_count == 1


@pytest.mark.parametrize("client", ["direct", "autogen"])
def test_auto_falls_back_once_per_model_under_concurrency(pdsqi9, turns, caplog, client):
    caplog.set_level(logging.WARNING, logger=MODEL_LOG)
    with FakeOpenAIServer(reject_json_schema=True, latency=0.02) as srv:
        settings = ModelSettings(
            model="openai/local-judge", base_url=srv.base_url, timeout=5.0, client=client
        )

        async def go():
            model = JudgeModel(settings, pdsqi9)
            try:
                config = _asking(pdsqi9)
                return await asyncio.gather(*(model.generate(turns, config) for _ in range(6)))
            finally:
                await model.close()

        outcomes = asyncio.run(go())
    assert [o.output_mode for o in outcomes] == ["json_object"] * 6
    assert srv.schema_rejections == 1
    assert srv.request_count == 7  # one refused, six answered in JSON mode
    assert [r["response_format"]["type"] for r in srv.requests[1:]] == ["json_object"] * 6
    warnings = [r for r in caplog.records if r.name == MODEL_LOG and "json_schema" in r.message]
    assert len(warnings) == 1 and "json_object" in warnings[0].message


def test_batch_request_lines_carry_the_schema(pdsqi9, turns):
    config = _asking(pdsqi9)

    def line(**kw: Any) -> dict[str, Any]:
        settings = ModelSettings(model="openai/gpt-4o-mini", **kw)
        return request_line(settings, "id-1", turns, config)["body"]

    assert line()["response_format"] == _expected_format(pdsqi9)
    assert line(structured_output="json_object")["response_format"] == {"type": "json_object"}
    assert "response_format" not in line(structured_output="off", json_mode=True)
    plain = request_line(ModelSettings(model="openai/gpt-4o-mini", json_mode=True), "x", turns)
    assert plain["body"]["response_format"] == {"type": "json_object"}


# -- runs against the fake server: (b) schema sent, (c) fallback, (d) off ----------------------


def _run(tmp_path: Path, srv: FakeOpenAIServer, **settings: Any) -> tuple[RunStore, str, Any]:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(6))
    judge = ModelSettings(
        model="openai/local-judge", base_url=srv.base_url, timeout=5.0, **settings
    )
    config = RunConfig(
        data=str(data),
        db=str(tmp_path / "runs.duckdb"),
        judge=judge,
        samples=2,
        concurrency=4,
        retry=FAST,
    )
    prepared = prepare_run(config)
    store = RunStore(config.db)
    run_id = create_run(store, prepared)
    tally = execute_run(store, run_id, prepared, show_progress=False)
    return store, run_id, tally


def _calls(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    return store.query("SELECT * FROM calls WHERE run_id = ?", [run_id])


def _judgments(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    return store.query(
        "SELECT * FROM judgments WHERE run_id = ? AND agent = 'judge' AND status = 'ok'", [run_id]
    )


def test_run_sends_the_rubric_schema_strict(tmp_path, pdsqi9):
    with FakeOpenAIServer(check_schemas=True) as srv:
        store, run_id, tally = _run(tmp_path, srv)
    assert (tally.ok, tally.failed) == (12, 0)
    assert srv.request_count == 12 and srv.schema_errors == []
    for body in srv.requests:
        assert body["response_format"] == _expected_format(pdsqi9)
    assert Counter(c["output_mode"] for c in _calls(store, run_id)) == {"json_schema": 12}


def test_run_falls_back_to_json_mode_once(tmp_path, pdsqi9, caplog):
    caplog.set_level(logging.WARNING, logger=MODEL_LOG)
    with FakeOpenAIServer(reject_json_schema=True, latency=0.01) as srv:
        store, run_id, tally = _run(tmp_path, srv)
    assert (tally.ok, tally.failed) == (12, 0)
    assert srv.schema_rejections == 1 and srv.request_count == 13
    assert len(_judgments(store, run_id)) == 12 * len(pdsqi9.keys)
    calls = _calls(store, run_id)
    assert len(calls) == 12 and all(c["status"] == "ok" for c in calls)
    assert Counter(c["output_mode"] for c in calls) == {"json_object": 12}
    warnings = [r for r in caplog.records if r.name == MODEL_LOG and "json_schema" in r.message]
    assert len(warnings) == 1


def test_run_with_structured_output_off_sends_no_response_format(tmp_path, pdsqi9):
    with FakeOpenAIServer() as srv:
        store, run_id, tally = _run(tmp_path, srv, structured_output="off")
    assert (tally.ok, tally.failed) == (12, 0)
    assert all("response_format" not in body for body in srv.requests)
    assert Counter(c["output_mode"] for c in _calls(store, run_id)) == {"off": 12}


def test_calls_table_has_the_output_mode_column(tmp_path):
    with RunStore(str(tmp_path / "runs.duckdb")) as store:
        columns = {r["column_name"] for r in store.query("DESCRIBE calls")}
    assert "output_mode" in columns


# -- (e) DocLens stages and the magentic chair carry their own schemas -------------------------


def _verdicts_wrapped(body: dict[str, Any]) -> str:
    """The DocLens fake's replies, in the shape a schema-constrained server returns."""
    reply = json.loads(doclens_responder()(body))
    block = requested_json_schema(body)
    if isinstance(reply, list) and block and "verdicts" in block["schema"]["properties"]:
        reply = {"verdicts": reply}
    return json.dumps(reply)


def test_doclens_stages_carry_their_own_schemas(tmp_path):
    data = write_jsonl(tmp_path / "items.jsonl", DOCLENS_ITEMS)
    with FakeOpenAIServer(_verdicts_wrapped, check_schemas=True) as srv:
        judge = ModelSettings(model="openai/local-judge", base_url=srv.base_url, timeout=5.0)
        config = RunConfig(
            rubric="doclens",
            mode="magentic",
            data=str(data),
            db=str(tmp_path / "runs.duckdb"),
            judge=judge,
            retry=FAST,
            personas="scoring",
        )
        prepared = prepare_run(config)
        store = RunStore(config.db)
        run_id = create_run(store, prepared)
        tally = execute_run(store, run_id, prepared, show_progress=False)
    assert (tally.ok, tally.failed) == (2, 0)
    assert srv.schema_errors == []
    names = Counter(requested_json_schema(b)["name"] for b in srv.requests)
    assert {"doclens_claims", "doclens_verdicts", "doclens_citation_verdict"} <= set(names)
    assert {"doclens_discussion", "doclens_decision"} <= set(names)  # a panel disagreed
    assert all(b["response_format"]["json_schema"]["strict"] for b in srv.requests)
    modes = {c["output_mode"] for c in _calls(store, run_id) if c["role"] != "nli"}
    assert modes == {"json_schema"}


def test_magentic_chair_decision_carries_its_schema(tmp_path, pdsqi9):
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    fake = PanelFake(personas="high_scorer,low_scorer", final_scores=4)
    with FakeOpenAIServer(responder=fake) as srv:
        judge = ModelSettings(model="openai/local-judge", base_url=srv.base_url, timeout=5.0)
        config = RunConfig(
            mode="magentic",
            data=str(data),
            db=str(tmp_path / "runs.duckdb"),
            judge=judge,
            personas=fake.personas,
            retry=FAST,
        )
        prepared = prepare_run(config)
        store = RunStore(config.db)
        run_id = create_run(store, prepared)
        tally = execute_run(store, run_id, prepared, show_progress=False)
    assert (tally.ok, tally.failed) == (1, 0)
    final = [b for b in srv.requests if FINAL_MARKER in b["messages"][-1]["content"]]
    assert len(final) == 1
    block = requested_json_schema(final[0])
    assert block == {
        "name": "pdsqi9_chair_decision",
        "schema": chair_schema(pdsqi9),
        "strict": True,
    }
    assert list(block["schema"]["properties"])[0] == "reasoning"
    assert set(block["schema"]["required"]) == {"reasoning", *pdsqi9.keys, "rationale"}
    assert '"reasoning"' in final[0]["messages"][-1]["content"]
    # The discussion turns and the progress ledger keep their own formats.
    others = [b for b in srv.requests if b is not final[0]]
    assert others and all(requested_json_schema(b) is None for b in others)
