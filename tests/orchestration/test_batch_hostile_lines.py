"""A batch output file written by a hostile or broken provider: each bad line costs only its own
request (a malformed reply, counted, retried, its reason stored) and the rest of the batch is
stored; usage and size are checked as a direct reply's are."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clinjudge.judges import ModelSettings
from clinjudge.orchestration import RetryPolicy, RunConfig, create_run, prepare_run
from clinjudge.orchestration._batch_run import execute_batch_run
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

N_ITEMS = 5

Mangle = Callable[[dict[str, Any]], str | None]


def _body(record: dict[str, Any]) -> dict[str, Any]:
    return record["response"]["body"]


def _set(path: str, value: Any) -> Mangle:
    """Put ``value`` at a dotted path of the reply body (``choices.0.message``...)."""

    def mangle(record: dict[str, Any]) -> None:
        node: Any = _body(record)
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(last) if isinstance(node, list) else last] = value

    return mangle  # type: ignore[return-value]


def _record(field: str, value: Any) -> Mangle:
    def mangle(record: dict[str, Any]) -> None:
        record[field] = value

    return mangle  # type: ignore[return-value]


def _raw(text: str) -> Mangle:
    def mangle(record: dict[str, Any]) -> str:
        return text.replace("CUSTOM_ID", record["custom_id"])

    return mangle


def _twice(record: dict[str, Any]) -> str:
    return json.dumps(record) + "\n" + json.dumps(record)


USAGE_PROMPT = "malformed response: usage prompt_tokens"

HOSTILE: dict[str, tuple[Mangle, str]] = {
    "choices a string": (_set("choices", "nope"), "malformed response: choices"),
    "choices an object": (_set("choices", {"0": {"message": {}}}), "malformed response: choices"),
    "choices empty": (_set("choices", []), "malformed response: choices"),
    "message a string": (_set("choices.0.message", "hi"), "malformed response: choices.0.message"),
    "content a number": (_set("choices.0.message.content", 5), "malformed response: choices.0"),
    "content an object": (_set("choices.0.message.content", {"a": 1}), "malformed response"),
    "finish_reason a list": (_set("choices.0.finish_reason", ["x"]), "malformed response"),
    "usage a string": (_set("usage", "lots"), "malformed response: usage"),
    "usage a list": (_set("usage", [1, 2]), "malformed response: usage"),
    "usage past int32": (_set("usage.prompt_tokens", 10**12), USAGE_PROMPT),
    "usage negative": (_set("usage.prompt_tokens", -10_000_000), USAGE_PROMPT),
    "usage a word": (_set("usage.completion_tokens", "many"), "malformed response: usage comp"),
    "cached tokens absurd": (
        _set("usage.prompt_tokens_details", {"cached_tokens": -5}),
        "malformed response: usage cached_tokens",
    ),
    "body a string": (_record("response", {"status_code": 200, "body": "x"}), "malformed"),
    "response a string": (_record("response", "x"), "malformed batch result: response"),
    "status code a string": (
        _record("response", {"status_code": "200", "body": {}}),
        "malformed batch result: response.status_code",
    ),
    "content a lone surrogate": (
        _raw(
            '{"custom_id": "CUSTOM_ID", "response": {"status_code": 200, "body": {"choices": '
            '[{"message": {"content": "\\ud800"}}]}}}'
        ),
        "malformed batch result: not valid JSON text",
    ),
    "two lines for one request": (_twice, "malformed batch result: 2 result lines"),
    "custom id not a string": (_record("custom_id", 7), "no result in the batch"),
    "not json": (_raw('{"custom_id": "CUSTOM_ID", "response": {'), "no result in the batch"),
}


def _run(
    tmp_path: Path, mangle: Mangle, *, always: bool, settings: dict[str, Any] | None = None
) -> tuple[RunStore, str, Any, FakeOpenAIServer]:
    """A batch run whose first output line is mangled (in the first batch only, or always)."""
    mangled: list[str] = []

    def hook(number: int, record: dict[str, Any]) -> str | None:
        is_reply = record.get("response") is not None and record["response"]["status_code"] == 200
        if number != 0 or not is_reply or (mangled and not always):
            return None
        mangled.append(record["custom_id"])
        record = json.loads(json.dumps(record))
        return mangle(record) or json.dumps(record, ensure_ascii=False)

    data = write_jsonl(tmp_path / "items.jsonl", make_items(N_ITEMS))
    server = FakeOpenAIServer()
    server.start()
    server.batch_api.result_hook = hook
    judge = ModelSettings(model="openai/gpt-4o-mini", base_url=server.base_url, **(settings or {}))
    config = RunConfig(
        data=str(data),
        judge=judge,
        db=str(tmp_path / "r.duckdb"),
        retry=RetryPolicy(max_attempts=2),
    )
    prepared = prepare_run(config)
    store = RunStore(config.db)
    run_id = create_run(store, prepared)
    tally = execute_batch_run(store, run_id, prepared, show_progress=False, poll_interval=0)
    return store, run_id, tally, server


def _samples(store: RunStore, run_id: str) -> dict[str, dict[str, Any]]:
    rows = store.query("SELECT * FROM samples WHERE run_id = ?", [run_id])
    assert len(rows) == len({r["item_id"] for r in rows}) == N_ITEMS  # each sample once
    return {r["item_id"]: r for r in rows}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_one_bad_line_fails_its_request_once_and_the_batch_is_stored(
    tmp_path: Path, name: str
) -> None:
    mangle, reason = HOSTILE[name]
    store, run_id, tally, server = _run(tmp_path, mangle, always=False)
    with store:
        try:
            assert (tally.ok, tally.failed) == (N_ITEMS, 0)
            assert store.get_run(run_id)["status"] == "completed"
            _samples(store, run_id)
            calls = store.query(
                "SELECT item_id, seq, status, error, cost_usd, prompt_tokens, output_mode "
                "FROM calls WHERE run_id = ? ORDER BY item_id, seq",
                [run_id],
            )
            bad = [c for c in calls if c["status"] == "error"]
            # The bad line failed its own request once (its reason kept); it went again.
            assert len(bad) == 1 and bad[0]["error"].startswith(reason), bad
            assert len(calls) == N_ITEMS + 1
            assert [c["seq"] for c in calls if c["item_id"] == bad[0]["item_id"]] == [0, 1]
            assert all(c["cost_usd"] is None or c["cost_usd"] >= 0 for c in calls)
            assert all(c["prompt_tokens"] is None or c["prompt_tokens"] >= 0 for c in calls)
            assert {c["output_mode"] for c in calls} == {"json_schema"}
            # The other four of the first batch were stored from it, never sent again.
            batches = store.query(
                "SELECT request_count FROM provider_batches WHERE run_id = ? ORDER BY attempt",
                [run_id],
            )
            assert [b["request_count"] for b in batches] == [N_ITEMS, 1]
            assert server.request_count == N_ITEMS + 1
        finally:
            server.stop()


def test_a_line_bad_every_time_fails_its_sample_with_the_reason(tmp_path: Path) -> None:
    store, run_id, tally, server = _run(tmp_path, _set("choices", "nope"), always=True)
    with store:
        try:
            assert (tally.ok, tally.failed) == (N_ITEMS - 1, 1)
            failed = [s for s in _samples(store, run_id).values() if s["status"] == "failed"]
            assert failed[0]["error"].startswith("provider: malformed response: choices")
            assert failed[0]["n_calls"] == 2  # max_attempts
            assert store.get_run(run_id)["status"] == "completed"
        finally:
            server.stop()


def test_a_reply_past_max_reply_bytes_fails_its_request(tmp_path: Path) -> None:
    huge = _set("choices.0.message.content", "x" * 200_000)
    store, run_id, tally, server = _run(
        tmp_path, huge, always=False, settings={"max_reply_bytes": 100_000}
    )
    with store:
        try:
            assert (tally.ok, tally.failed) == (N_ITEMS - 1, 1)
            failed = [s for s in _samples(store, run_id).values() if s["status"] == "failed"]
            assert "reply too large" in failed[0]["error"]
            longest = store.query(
                "SELECT max(length(coalesce(raw_text, ''))) AS n FROM samples WHERE run_id = ?",
                [run_id],
            )
            assert longest[0]["n"] < 100_000
        finally:
            server.stop()


def test_a_malformed_reply_still_billed_counts_its_cost(tmp_path: Path) -> None:
    store, run_id, tally, server = _run(tmp_path, _set("choices", []), always=False)
    with store:
        try:
            bad = store.query(
                "SELECT prompt_tokens, cost_usd FROM calls WHERE run_id = ? AND status = 'error'",
                [run_id],
            )
            assert bad[0]["prompt_tokens"] > 0 and bad[0]["cost_usd"] > 0
            total = store.query("SELECT sum(cost_usd) AS c FROM calls WHERE run_id = ?", [run_id])[
                0
            ]["c"]
            assert tally.cost_usd == pytest.approx(total)
        finally:
            server.stop()
