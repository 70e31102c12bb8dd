"""A hostile or misconfigured endpoint cannot redirect the prompt or flood memory.

Each client path clinjudge builds for ``openai/`` models (our direct aiohttp client and
autogen-ext's OpenAI client over the openai SDK) is pointed at :class:`HostileServer`:

* a ``307`` to another origin fails the call, naming the Location, and the other origin never
  receives a request (the prompt is clinical text);
* a reply body past ``max_reply_bytes`` fails the call while it is being read: the server
  manages to send only a small multiple of the cap, not the whole body;
* both faults are final (not retried), so a run stores one call per sample with the reason.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clinjudge.judges import ModelSettings, ProviderFault
from clinjudge.judges.clients._faults import classify_fault
from clinjudge.judges.clients._model import build_client
from clinjudge.rubrics import load_rubric
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer
from tests.model_requests import ask
from tests.survival._hostile_server import HostileServer
from tests.survival.factories import make_config, run_in_process

# (model, client): our direct client, autogen-ext's OpenAI client, and litellm's two kinds of
# route (the openai SDK for OpenAI-compatible providers, its own httpx handler for others).
CLIENTS = [
    ("openai/local-judge", "direct"),
    ("openai/local-judge", "autogen"),
    ("litellm/openai/local-judge", "auto"),
    ("litellm/anthropic/claude-judge", "auto"),
]
IDS = ["direct", "autogen", "litellm-openai", "litellm-anthropic"]
# Every other provider whose litellm route is handed our guarded httpx handler.
HANDLER_ROUTES = [
    "litellm/ollama_chat/llama3",
    "litellm/ollama/llama3",
    "litellm/mistral/mistral-large-latest",
    "litellm/openrouter/meta-llama/llama-3-70b",
    "litellm/huggingface/meta-llama/Llama-3-8B",
    "litellm/bedrock/anthropic.claude-3-haiku-20240307-v1:0",
    "litellm/databricks/dbrx-instruct",
]
CAP = 256 * 1024
RUBRIC = load_rubric("pdsqi9")


@pytest.fixture(autouse=True)
def _provider_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # litellm refuses to send without credentials; none of these reaches a real provider.
    for name in ("ANTHROPIC_API_KEY", "MISTRAL_API_KEY", "OPENROUTER_API_KEY",
                 "HUGGINGFACE_API_KEY", "DATABRICKS_API_KEY", "AWS_SECRET_ACCESS_KEY"):  # fmt: skip
        monkeypatch.setenv(name, "not-a-real-key")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOTAREALKEY")
    monkeypatch.setenv("AWS_REGION_NAME", "us-east-1")


def _call(base_url: str, route: tuple[str, str], **settings: object) -> ProviderFault:
    """One chat call through the client clinjudge builds; the fault it ends with."""
    name, client = route
    if name.startswith("litellm/anthropic"):
        base_url = base_url.removesuffix("/v1")  # litellm appends /v1/messages
    model = ModelSettings(model=name, base_url=base_url, client=client, timeout=20, **settings)
    built = build_client(model, load_rubric("pdsqi9"))

    async def go() -> ProviderFault:
        try:
            await ask(built, "Summary: patient well.")
        except Exception as exc:  # noqa: BLE001 - the fault is what we inspect
            return classify_fault(exc)
        finally:
            await built.close()
        raise AssertionError("the call succeeded against a hostile endpoint")

    return asyncio.run(go())


@pytest.mark.parametrize(
    "client", CLIENTS + [(m, "auto") for m in HANDLER_ROUTES], ids=IDS + HANDLER_ROUTES
)
def test_redirect_is_refused_and_the_other_origin_gets_nothing(client: tuple[str, str]) -> None:
    with FakeOpenAIServer() as elsewhere:
        target = elsewhere.base_url + "/chat/completions"
        with HostileServer("redirect", location=target) as hostile:
            fault = _call(hostile.base_url, client)
        assert elsewhere.request_count == 0
    assert "redirect refused" in fault.reason and "307" in fault.reason
    assert target in fault.reason
    assert not fault.retryable


def test_a_litellm_route_that_cannot_be_guarded_says_so(caplog: pytest.LogCaptureFixture) -> None:
    from clinjudge.judges.clients._litellm_client import GUARDED_HANDLER_PROVIDERS

    assert "watsonx" not in GUARDED_HANDLER_PROVIDERS
    model = ModelSettings(model="litellm/watsonx/ibm/granite-13b", base_url="http://127.0.0.1:9")
    built = build_client(model, RUBRIC)

    async def go() -> None:
        with caplog.at_level("WARNING", logger="clinjudge"):
            try:
                await ask(built, "hi")
            except Exception:  # noqa: BLE001 - nothing listens there; the warning is the point
                pass
            finally:
                await built.close()

    asyncio.run(go())
    assert any(
        "watsonx" in r.getMessage() and "cannot refuse redirects" in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.parametrize("client", CLIENTS, ids=IDS)
@pytest.mark.parametrize("declare_length", [False, True])
def test_reply_body_is_capped_while_reading(client: tuple[str, str], declare_length: bool) -> None:
    total = 200 * CAP  # 50 MiB offered
    with HostileServer("huge", body_bytes=total, declare_length=declare_length) as hostile:
        fault = _call(hostile.base_url, client, max_reply_bytes=CAP)
        sent = hostile.bytes_sent
    assert "reply too large" in fault.reason and str(CAP) in fault.reason
    assert not fault.retryable
    # Socket buffers let the server write ahead of the reader, but far from the whole body.
    assert sent < total // 4, sent


@pytest.mark.parametrize("client", CLIENTS, ids=IDS)
def test_compressed_reply_is_capped_after_decompression(client: tuple[str, str]) -> None:
    with HostileServer("gzip_bomb", body_bytes=64 << 20) as hostile:  # ~64 KiB on the wire
        fault = _call(hostile.base_url, client, max_reply_bytes=CAP)
    assert "reply too large" in fault.reason and not fault.retryable


@pytest.mark.parametrize("client", CLIENTS[:3], ids=IDS[:3])
def test_ordinary_compressed_reply_still_works(client: tuple[str, str]) -> None:
    name, kind = client
    model = ModelSettings(model=name, base_url="", client=kind, timeout=20, max_reply_bytes=CAP)
    with HostileServer("gzip_completion") as hostile:
        built = build_client(model.model_copy(update={"base_url": hostile.base_url}), RUBRIC)

        async def go() -> str:
            try:
                result = await ask(built, "hi")
            finally:
                await built.close()
            return result.text

        assert asyncio.run(go()) == "compressed hello"


def test_default_cap_is_a_few_megabytes() -> None:
    default = ModelSettings(model="openai/x").max_reply_bytes
    assert 1 << 20 <= default <= 64 << 20


def test_run_stores_the_redirect_as_a_final_failure(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer() as elsewhere:
        location = elsewhere.base_url + "/chat/completions"
        with HostileServer("redirect", location=location) as hostile:
            config = make_config(data, hostile, db)  # type: ignore[arg-type]
            store, run_id, tally = run_in_process(config)
            store.close()
            requests = hostile.requests
        assert elsewhere.request_count == 0
    assert tally.failed == 2 and requests == 2  # one request per sample: never retried
    with RunStore(db, read_only=True) as store:
        rows = store.query("SELECT error FROM calls WHERE run_id = ?", [run_id])
    assert len(rows) == 2 and all(location in r["error"] for r in rows)
