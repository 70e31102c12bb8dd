"""Single-judge runs through the OpenAI/Azure batch API, against the fake server's Files and
Batches endpoints: happy path, partial failures, expiry, restarts at every step, prices."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from clinjudge.judges import (
    BatchClient,
    ModelConfigError,
    ModelSettings,
    ProviderFault,
    price_per_token,
)
from clinjudge.judges.clients import batch_price_per_token
from clinjudge.judges.clients._batch_lines import parse_result_line
from clinjudge.judges.clients._pricing import call_cost
from clinjudge.judges.clients._settings import Price
from clinjudge.orchestration import (
    ConfigError,
    RetryPolicy,
    RunConfig,
    check_batch_config,
    create_run,
    estimate_batch_run,
    estimate_run,
    prepare_run,
)
from clinjudge.orchestration._batch_run import execute_batch_run
from clinjudge.rubrics import render_messages
from clinjudge.runs import RunStore, _provider_batches, is_batch_run
from tests.factories import make_items, write_jsonl
from tests.fake_openai import PDSQI9_KEYS, FakeOpenAIServer, Fault, pdsqi9_scores

N_ITEMS = 5


def _config(tmp_path: Path, settings: ModelSettings, **extra: Any) -> RunConfig:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(N_ITEMS))
    return RunConfig(data=str(data), judge=settings, db=str(tmp_path / "runs.duckdb"), **extra)


def _openai(server: FakeOpenAIServer, model: str = "gpt-4o-mini") -> ModelSettings:
    return ModelSettings(model=f"openai/{model}", base_url=server.base_url)


def _start(config: RunConfig) -> tuple[RunStore, str, Any]:
    prepared = prepare_run(config)
    store = RunStore(config.db)
    return store, create_run(store, prepared), prepared


def _execute(store: RunStore, run_id: str, prepared: Any, client: Any = None) -> Any:
    return execute_batch_run(
        store, run_id, prepared, show_progress=False, client=client, poll_interval=0
    )


def _user_text(body: dict[str, Any]) -> str:
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


def _stored_vectors(store: RunStore, run_id: str) -> dict[tuple[str, int], tuple]:
    rows = store.query(
        "SELECT item_id, sample, attribute, value FROM judgments WHERE run_id = ? AND NOT final",
        [run_id],
    )
    vectors: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        vectors.setdefault((row["item_id"], row["sample"]), {})[row["attribute"]] = row["value"]
    return {k: tuple(v[a] for a in PDSQI9_KEYS) for k, v in vectors.items()}


def _assert_no_duplicates(store: RunStore, run_id: str, expected_samples: int) -> None:
    counts = store.query(
        """SELECT count(*) AS n, count(DISTINCT (item_id, sample)) AS d FROM samples
           WHERE run_id = ?""",
        [run_id],
    )[0]
    assert counts == {"n": expected_samples, "d": expected_samples}
    judgments = store.query(
        "SELECT count(*) AS n FROM judgments WHERE run_id = ? AND NOT final", [run_id]
    )[0]["n"]
    assert judgments == expected_samples * len(PDSQI9_KEYS)


def test_happy_path_stores_what_the_server_answered_at_batch_prices(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        config = _config(tmp_path, _openai(server), samples=2)
        store, run_id, prepared = _start(config)
        with store:
            tally = _execute(store, run_id, prepared)
            # One upload, one batch; each line is the request a single judge sends.
            assert len(server.batch_api.uploads) == 1 and len(server.batch_api.batches) == 1
            lines = server.batch_api.uploaded_lines()
            assert len(lines) == N_ITEMS * 2 == len({line["custom_id"] for line in lines})
            assert {line["url"] for line in lines} == {"/v1/chat/completions"}
            first = prepared.items[0]
            rendered = [
                {"role": t.role, "content": t.content}
                for t in render_messages(first, prepared.rubric)
            ]
            assert rendered in [line["body"]["messages"] for line in lines]
            assert {line["body"]["model"] for line in lines} == {"gpt-4o-mini"}
            assert lines[0]["body"]["temperature"] == 0.01
            # The reply schema a single judge's call carries, as strict structured output.
            formats = [line["body"]["response_format"] for line in lines]
            assert {f["type"] for f in formats} == {"json_schema"}
            assert all(f["json_schema"]["strict"] for f in formats)
            required = set(formats[0]["json_schema"]["schema"]["required"])
            assert set(prepared.rubric.keys) <= required

            assert (tally.ok, tally.failed) == (N_ITEMS * 2, 0)
            answered = Counter(
                tuple(pdsqi9_scores(_user_text(body))[k] for k in PDSQI9_KEYS)
                for body in server.requests
            )
            assert Counter(_stored_vectors(store, run_id).values()) == answered
            _assert_no_duplicates(store, run_id, N_ITEMS * 2)

            calls = store.query("SELECT * FROM calls WHERE run_id = ?", [run_id])
            assert len(calls) == N_ITEMS * 2 and {c["status"] for c in calls} == {"ok"}
            listed = ModelSettings(model="openai/gpt-4o-mini")
            for call in calls:
                full = call_cost(listed, call["prompt_tokens"], call["completion_tokens"])
                assert full and call["cost_usd"] == pytest.approx(full / 2)
                assert not call["tokens_estimated"]
            assert tally.cost_usd == pytest.approx(sum(c["cost_usd"] for c in calls))

            run = store.get_run(run_id)
            assert run["status"] == "completed"
            finals = store.query(
                "SELECT count(DISTINCT item_id) AS n FROM judgments WHERE run_id = ? AND final",
                [run_id],
            )
            assert finals[0]["n"] == N_ITEMS
            batches = store.query("SELECT * FROM provider_batches WHERE run_id = ?", [run_id])
            assert [(b["status"], b["ingested"], b["request_count"]) for b in batches] == [
                ("completed", True, N_ITEMS * 2)
            ]
            assert batches[0]["batch_id"] in server.batch_api.batches
            assert is_batch_run(store, run_id)


def _fails_for(text: str, kind: str = "server_error"):
    """A fault for every request whose conversation mentions ``text`` (repairs included)."""

    def plan(_index: int, body: dict[str, Any]) -> Fault | None:
        sent = " ".join(m["content"] for m in body["messages"])
        return Fault(kind) if text in sent else None  # type: ignore[arg-type]

    return plan


@pytest.mark.parametrize("page", [1000, 2], ids=["one page", "pages of two"])
def test_partial_failures_are_requeued_then_end_valid_or_failed_with_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    # Requests are read back (to send, to settle their results) a page at a time.
    monkeypatch.setattr(_provider_batches, "REQUEST_PAGE", page)
    # Request 1 fails once (HTTP 500), request 2 answers with the wrong keys once (repair);
    # item 3 always gets HTTP 500 and item 4 always gets out-of-range scores.
    transient = {1: Fault("server_error"), 2: Fault("wrong_keys")}
    always_500, always_bad = (
        _fails_for("Synthetic summary 3 "),
        _fails_for("Synthetic summary 4 ", "out_of_range"),
    )

    def plan(index: int, body: dict[str, Any]) -> Fault | None:
        return always_500(index, body) or always_bad(index, body) or transient.get(index)

    with FakeOpenAIServer(faults=plan) as server:
        retry = RetryPolicy(max_attempts=3)
        config = _config(tmp_path, _openai(server), retry=retry, max_repairs=1)
        store, run_id, prepared = _start(config)
        with store:
            tally = _execute(store, run_id, prepared)
            assert (tally.ok, tally.failed) == (3, 2)
            samples = {
                r["item_id"]: r
                for r in store.query("SELECT * FROM samples WHERE run_id = ?", [run_id])
            }
            assert samples["item-0003"]["status"] == "failed"
            assert samples["item-0003"]["error"].startswith("provider: HTTP 500")
            assert samples["item-0003"]["n_calls"] == 3  # max_attempts
            assert samples["item-0004"]["status"] == "failed"
            assert samples["item-0004"]["error"].startswith("invalid reply after 1 repair(s)")
            assert samples["item-0004"]["raw_text"]
            assert {samples[f"item-000{n}"]["status"] for n in range(3)} == {"ok"}
            _assert_no_duplicates(store, run_id, N_ITEMS)

            calls = store.query(
                "SELECT item_id, seq, status FROM calls WHERE run_id = ? ORDER BY item_id, seq",
                [run_id],
            )
            per_item = Counter(c["item_id"] for c in calls)
            assert per_item == {
                "item-0000": 1,
                "item-0001": 2,  # HTTP 500, then ok
                "item-0002": 2,  # wrong keys, then the repair
                "item-0003": 3,
                "item-0004": 2,
            }
            # The repair request carries the bad reply and a corrective turn.
            repair = [
                line
                for line in server.batch_api.uploaded_lines()
                if line["custom_id"].startswith("s1-c1-") and len(line["body"]["messages"]) == 4
            ]
            assert len(repair) == 2
            assert repair[0]["body"]["messages"][2]["role"] == "assistant"
            batches = store.query(
                "SELECT attempt, request_count FROM provider_batches WHERE run_id = ? "
                "ORDER BY attempt",
                [run_id],
            )
            assert [b["request_count"] for b in batches] == [5, 4, 1]
            # Failed samples are kept per attribute with the reason; finals still written.
            failed = store.query(
                "SELECT DISTINCT status, error FROM judgments "
                "WHERE run_id = ? AND item_id = 'item-0003' AND NOT final",
                [run_id],
            )
            assert failed[0]["status"] == "failed" and failed[0]["error"]
            assert store.get_run(run_id)["status"] == "completed"


def test_expired_requests_go_into_the_next_batch(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        server.batch_api.expire_after = 2
        config = _config(tmp_path, _openai(server))
        store, run_id, prepared = _start(config)
        with store:
            statuses: list[str] = []
            client = BatchClient(config.judge)  # type: ignore[arg-type]
            original = client.retrieve

            async def retrieve(batch_id: str) -> Any:
                state = await original(batch_id)
                if state.done:
                    statuses.append(state.status)
                    server.batch_api.expire_after = None if len(statuses) >= 2 else 2
                return state

            client.retrieve = retrieve  # type: ignore[method-assign]
            tally = _execute(store, run_id, prepared, client)
            assert statuses == ["expired", "expired", "completed"]
            assert (tally.ok, tally.failed) == (N_ITEMS, 0)
            _assert_no_duplicates(store, run_id, N_ITEMS)
            errors = store.query(
                "SELECT error FROM calls WHERE run_id = ? AND status = 'error'", [run_id]
            )
            assert len(errors) == 3 + 1
            assert all("batch_expired" in e["error"] for e in errors)


class _Crash(RuntimeError):
    pass


class _CrashingClient(BatchClient):
    """Dies at one step, the way a killed process would."""

    def __init__(self, settings: ModelSettings, step: str):
        super().__init__(settings)
        self.step = step

    async def create(self, input_file_id: str, metadata: dict[str, str]) -> Any:
        if self.step == "before_create":
            raise _Crash(self.step)
        state = await super().create(input_file_id, metadata)
        if self.step == "after_create":
            raise _Crash(self.step)  # the provider has the batch; we never stored its id
        return state

    async def poll(self, batch_id: str, **kwargs: Any) -> Any:
        if self.step == "poll":
            raise _Crash(self.step)
        return await super().poll(batch_id, **kwargs)

    async def results(self, state: Any) -> Any:
        results = await super().results(state)
        if self.step == "ingest":
            raise _Crash(self.step)
        return results


@pytest.mark.parametrize("step", ["before_create", "after_create", "poll", "ingest"])
def test_restart_resumes_the_stored_batch_without_resubmitting(tmp_path: Path, step: str) -> None:
    with FakeOpenAIServer() as server:
        config = _config(tmp_path, _openai(server), samples=2)
        store, run_id, prepared = _start(config)
        with store:
            with pytest.raises(_Crash):
                _execute(store, run_id, prepared, _CrashingClient(config.judge, step))  # type: ignore[arg-type]
            assert store.get_run(run_id)["status"] == "failed"
            assert len(server.batch_api.uploads) == 1
            assert store.query("SELECT count(*) AS n FROM samples WHERE run_id = ?", [run_id]) == [
                {"n": 0}
            ]
            tally = _execute(store, run_id, prepared)
            # The same upload and (once created) the same batch served the resumed run.
            assert len(server.batch_api.uploads) == 1
            assert len(server.batch_api.batches) == 1
            assert server.request_count == N_ITEMS * 2  # every request ran once
            assert (tally.ok, tally.failed) == (N_ITEMS * 2, 0)
            _assert_no_duplicates(store, run_id, N_ITEMS * 2)
            calls = store.query("SELECT count(*) AS n FROM calls WHERE run_id = ?", [run_id])
            assert calls == [{"n": N_ITEMS * 2}]
            assert store.get_run(run_id)["status"] == "completed"
            # Nothing left to do: running again submits nothing.
            again = _execute(store, run_id, prepared)
            assert again.requests == 0 and len(server.batch_api.uploads) == 1


def test_interrupt_while_polling_marks_the_run_interrupted(tmp_path: Path) -> None:
    class Interrupted(BatchClient):
        async def poll(self, batch_id: str, **kwargs: Any) -> Any:
            raise KeyboardInterrupt

    with FakeOpenAIServer() as server:
        config = _config(tmp_path, _openai(server))
        store, run_id, prepared = _start(config)
        with store:
            with pytest.raises(KeyboardInterrupt):
                _execute(store, run_id, prepared, Interrupted(config.judge))  # type: ignore[arg-type]
            assert store.get_run(run_id)["status"] == "interrupted"
            stored = store.query("SELECT batch_id, ingested FROM provider_batches")
            assert len(stored) == 1 and stored[0]["batch_id"] and not stored[0]["ingested"]


def test_azure_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_TEST_KEY", "not-a-real-key")
    with FakeOpenAIServer() as server:
        settings = ModelSettings(
            model="azure/my-deployment",
            base_url=server.base_url.removesuffix("/v1"),
            api_key_env="AZURE_TEST_KEY",
            price_as="gpt-4o-mini",
        )
        config = _config(tmp_path, settings)
        store, run_id, prepared = _start(config)
        with store:
            tally = _execute(store, run_id, prepared)
            assert (tally.ok, tally.failed) == (N_ITEMS, 0)
            lines = server.batch_api.uploaded_lines()
            assert {line["url"] for line in lines} == {"/chat/completions"}
            assert {line["body"]["model"] for line in lines} == {"my-deployment"}
            batch = next(iter(server.batch_api.batches.values()))
            assert batch["endpoint"] == "/chat/completions"


def test_batch_prices() -> None:
    listed = ModelSettings(model="openai/gpt-4o-mini")
    full = price_per_token(listed)
    assert full is not None
    assert batch_price_per_token(listed) == pytest.approx((full[0] / 2, full[1] / 2))
    # Azure entries in the price map have no batch prices: half the list price.
    azure = ModelSettings(model="azure/gpt-4o-mini")
    azure_full = price_per_token(azure)
    assert azure_full is not None
    assert batch_price_per_token(azure) == pytest.approx((azure_full[0] / 2, azure_full[1] / 2))
    # A configured price is what the user pays for these calls.
    priced = ModelSettings(model="openai/x", price=Price(input_per_mtok=1, output_per_mtok=2))
    assert batch_price_per_token(priced) == pytest.approx((1e-6, 2e-6))
    assert batch_price_per_token(ModelSettings(model="openai/unknown-model-xyz")) is None


def test_dry_run_estimate_is_at_batch_prices(tmp_path: Path) -> None:
    config = _config(tmp_path, ModelSettings(model="openai/gpt-4o-mini"))
    prepared = prepare_run(config)
    direct, batch = estimate_run(prepared), estimate_batch_run(prepared)
    assert direct.cost_usd and batch.cost_usd == pytest.approx(direct.cost_usd / 2)
    assert batch.prompts == direct.prompts and "batch" in batch.note


def test_bad_combinations_fail_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    base = ModelSettings(model="openai/gpt-4o-mini", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="mode single only"):
        check_batch_config(RunConfig(mode="magentic", judge=base))
    with pytest.raises(ModelConfigError, match="openai/ or azure/"):
        check_batch_config(RunConfig(judge=ModelSettings(model="anthropic/claude-x")))
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY"):
        check_batch_config(RunConfig(judge=ModelSettings(model="openai/gpt-4o-mini")))
    check_batch_config(
        RunConfig(judge=ModelSettings(model="openai/gpt-4o-mini")), credentials=False
    )
    check_batch_config(RunConfig(judge=base))


def test_custom_ids_survive_any_item_id(tmp_path: Path) -> None:
    items = make_items(2)
    items[0] = items[0].model_copy(update={"id": "a:b|c/" + "x" * 300})
    data = write_jsonl(tmp_path / "odd.jsonl", items)
    with FakeOpenAIServer() as server:
        config = RunConfig(data=str(data), judge=_openai(server), db=str(tmp_path / "o.duckdb"))
        store, run_id, prepared = _start(config)
        with store:
            tally = _execute(store, run_id, prepared)
            assert (tally.ok, tally.failed) == (2, 0)
            assert all(len(line["custom_id"]) <= 64 for line in server.batch_api.uploaded_lines())
            stored = {r["item_id"] for r in store.query("SELECT item_id FROM samples")}
            assert stored == {items[0].id, items[1].id}


def test_result_lines_map_to_retryable_or_final_faults() -> None:
    def line(response: Any = None, error: Any = None) -> str:
        return json.dumps({"custom_id": "c", "response": response, "error": error})

    ok = parse_result_line(line({"status_code": 200, "body": {"choices": [{"message": {}}]}}))
    assert ok is not None and ok.result is not None and ok.fault is None
    bad = {"status_code": 400, "body": {"error": {"message": "bad max_tokens"}}}
    rejected = parse_result_line(line(bad))
    assert rejected is not None and rejected.fault is not None
    assert not rejected.fault.retryable and "bad max_tokens" in rejected.fault.reason
    limited = parse_result_line(line({"status_code": 429, "body": {"error": {"message": "x"}}}))
    assert limited is not None and limited.fault is not None and limited.fault.retryable
    expired = parse_result_line(line(error={"code": "batch_expired", "message": "late"}))
    assert expired is not None and expired.fault is not None and expired.fault.retryable
    assert parse_result_line("") is None and parse_result_line("not json") is None


def test_poll_backs_off_and_outlasts_brief_outages() -> None:
    script: list[Any] = [
        "in_progress",
        httpx.ConnectError("down"),
        httpx.ConnectError("still down"),
        "in_progress",
        "finalizing",
        "completed",
    ]

    async def retrieve(batch_id: str) -> Any:
        step = script.pop(0)
        if isinstance(step, Exception):
            raise step
        counts = SimpleNamespace(total=1, completed=1, failed=0)
        return SimpleNamespace(
            id=batch_id,
            status=step,
            input_file_id="f",
            output_file_id=None,
            error_file_id=None,
            request_counts=counts,
            errors=None,
            created_at=1,
        )

    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    stub = SimpleNamespace(batches=SimpleNamespace(retrieve=retrieve))
    client = BatchClient(ModelSettings(model="openai/gpt-4o-mini"), stub, sleep=sleep)
    seen: list[str] = []
    state = asyncio.run(
        client.poll("b1", interval=1, max_interval=4, on_update=lambda s: seen.append(s.status))
    )
    assert state.status == "completed" and state.done
    assert seen == ["in_progress", "in_progress", "finalizing", "completed"]
    assert waits == [1, 2, 4, 4, 4]  # doubling, capped

    # A lasting outage ends the wait with a fault (the stored batch id lets --resume continue).
    script[:] = [httpx.ConnectError("down")] * 3
    client.max_poll_failures = 3
    with pytest.raises(ProviderFault, match="connection failed"):
        asyncio.run(client.poll("b1", interval=0))
