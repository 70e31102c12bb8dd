"""The sample runner end to end: fake server over HTTP, DuckDB store in a temp dir.

Checks the promises of SPEC §12: provider faults never crash a run and never lose or duplicate a
judgment (each sample ends ok or failed-with-reason), every attempt is recorded, a resumed run
does exactly the missing work, and the final score is the median of the valid samples.
"""

from __future__ import annotations

import asyncio
import random
import re
import statistics
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from clinjudge.judges import JudgeModel, ModelSettings
from clinjudge.judges.workflows import JUDGE_AGENT
from clinjudge.orchestration import (
    RetryPolicy,
    RunConfig,
    SampleRunner,
    create_run,
    execute_run,
    prepare_run,
)
from clinjudge.orchestration._sample_runner import WorkUnit
from clinjudge.orchestration._session import missing_work
from clinjudge.rubrics import JudgmentParseError, Rubric, parse_judgment
from clinjudge.runs import FINAL_AGENT, RunStore
from clinjudge.runs._store import FINAL_SAMPLE
from tests.factories import make_items, write_jsonl
from tests.fake_openai import PDSQI9_KEYS, FakeOpenAIServer, Fault

FAST = RetryPolicy(max_attempts=4, initial_wait=0.01, max_wait=0.05, jitter=0.01)
REPAIR_PREFIX = "Your reply could not be accepted"
TABLES = ("runs", "items", "samples", "judgments", "calls", "messages")


# -- helpers ------------------------------------------------------------------------------------


def item_number(body: dict[str, Any]) -> int:
    """Which synthetic item a request is about (from the rendered user prompt)."""
    for message in body["messages"]:
        if message["role"] == "user":
            found = re.search(r"Synthetic summary (\d+)", message["content"])
            if found:
                return int(found.group(1))
    raise AssertionError("request names no item")


def is_repair(body: dict[str, Any]) -> bool:
    return body["messages"][-1]["content"].startswith(REPAIR_PREFIX)


def make_config(
    data: Path,
    srv: FakeOpenAIServer,
    db: Path,
    *,
    timeout: float = 5.0,
    api_key_env: str | None = None,
    **kw: Any,
) -> RunConfig:
    judge = ModelSettings(
        model="openai/local-judge", base_url=srv.base_url, timeout=timeout, api_key_env=api_key_env
    )
    kw.setdefault("retry", FAST)
    return RunConfig(data=str(data), judge=judge, db=str(db), **kw)


def start_run(config: RunConfig) -> tuple[RunStore, str, Any]:
    prepared = prepare_run(config)
    store = RunStore(config.db)
    return store, create_run(store, prepared), prepared


def counts(store: RunStore, run_id: str) -> dict[str, int]:
    return {
        t: store.query(f"SELECT count(*) AS n FROM {t} WHERE run_id = ?", [run_id])[0]["n"]
        for t in TABLES
    }


def rows(store: RunStore, sql: str, run_id: str) -> list[dict[str, Any]]:
    return store.query(sql, [run_id])


def transcripts(store: RunStore, run_id: str) -> dict[tuple[str, int], list[dict[str, Any]]]:
    by_sample: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows(store, "SELECT * FROM messages WHERE run_id = ? ORDER BY seq", run_id):
        by_sample[(row["item_id"], row["sample"])].append(row)
    return by_sample


def sample_values(store: RunStore, run_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    values: dict[tuple[str, int], dict[str, Any]] = defaultdict(dict)
    for row in rows(store, "SELECT * FROM judgments WHERE run_id = ? AND NOT final", run_id):
        values[(row["item_id"], row["sample"])][row["attribute"]] = row["value"]
    return values


def parses(text: str, rubric: Rubric) -> bool:
    try:
        parse_judgment(text, rubric)
    except JudgmentParseError:
        return False
    return True


def assert_complete_and_consistent(
    store: RunStore, run_id: str, rubric: Rubric, n_items: int, n_samples: int
) -> list[dict[str, Any]]:
    """Invariants every finished run must satisfy, whatever the provider did."""
    samples = rows(store, "SELECT * FROM samples WHERE run_id = ?", run_id)
    keys = [(s["item_id"], s["sample"]) for s in samples]
    assert len(keys) == len(set(keys)) == n_items * n_samples
    items = {
        r["item_id"] for r in rows(store, "SELECT item_id FROM items WHERE run_id = ?", run_id)
    }
    assert set(keys) == {(i, s) for i in items for s in range(1, n_samples + 1)}
    assert {s["agent"] for s in samples} == {JUDGE_AGENT}

    calls = rows(store, "SELECT * FROM calls WHERE run_id = ?", run_id)
    calls_per_sample = Counter((c["item_id"], c["sample"]) for c in calls)
    values = sample_values(store, run_id)
    turns = transcripts(store, run_id)
    for s in samples:
        key = (s["item_id"], s["sample"])
        assert s["status"] in ("ok", "failed")
        assert s["n_calls"] == calls_per_sample[key] >= 1
        assert set(values[key]) == set(PDSQI9_KEYS)
        messages = turns[key]
        assert [m["seq"] for m in messages] == list(range(len(messages)))
        assert [m["role"] for m in messages[:2]] == ["system", "user"]
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        if s["status"] == "ok":
            assert s["error"] is None and s["raw_text"] is None
            assert messages[-1]["role"] == "assistant"
            parsed = parse_judgment(messages[-1]["content"], rubric)
            assert {k: (None if v is None else float(v)) for k, v in parsed.values.items()} == (
                values[key]
            )
        else:
            assert s["error"]
            assert all(v is None for v in values[key].values())
            # The last reply, if the provider ever gave one, is kept for inspection.
            assert s["raw_text"] == (replies[-1] if replies else None)
        # Every invalid reply that was not the last one was followed by a repair re-ask.
        for position, message in enumerate(messages[:-1]):
            if message["role"] == "assistant":
                assert not parses(message["content"], rubric)
                assert messages[position + 1]["role"] == "user"
                assert messages[position + 1]["content"].startswith(REPAIR_PREFIX)
    judgment_statuses = rows(
        store,
        "SELECT j.status AS j, s.status AS s FROM judgments j JOIN samples s USING "
        "(run_id, item_id, sample, agent) WHERE run_id = ? AND NOT j.final",
        run_id,
    )
    assert all(r["j"] == r["s"] for r in judgment_statuses)
    assert len(judgment_statuses) == n_items * n_samples * len(PDSQI9_KEYS)

    finals = rows(store, "SELECT * FROM judgments WHERE run_id = ? AND final", run_id)
    assert len(finals) == n_items * len(PDSQI9_KEYS)
    assert all(f["sample"] == FINAL_SAMPLE and f["agent"] == FINAL_AGENT for f in finals)
    assert Counter(f["item_id"] for f in finals) == {i: len(PDSQI9_KEYS) for i in items}
    run = store.get_run(run_id)
    assert run["status"] == "completed" and run["finished_at"] is not None
    return samples


# -- a clean run --------------------------------------------------------------------------------


def test_end_to_end_clean_run(fake_openai, pdsqi9, items_file, db_path, monkeypatch):
    secret = "sk-test-NEVER-STORED-9876"
    monkeypatch.setenv("CLINJUDGE_TEST_KEY", secret)
    config = make_config(
        items_file, fake_openai, db_path, samples=2, concurrency=4, api_key_env="CLINJUDGE_TEST_KEY"
    )
    store, run_id, prepared = start_run(config)
    tally = execute_run(store, run_id, prepared, show_progress=False)

    assert (tally.ok, tally.failed, tally.interrupted) == (12, 0, False)
    assert tally.cost_known is False  # local-judge has no price
    samples = assert_complete_and_consistent(store, run_id, pdsqi9, 6, 2)
    assert all(s["status"] == "ok" and s["n_calls"] == 1 for s in samples)
    assert counts(store, run_id) == {
        "runs": 1,
        "items": 6,
        "samples": 12,
        "judgments": 12 * 11 + 6 * 11,
        "calls": 12,
        "messages": 12 * 3,
    }

    calls = rows(store, "SELECT * FROM calls WHERE run_id = ?", run_id)
    assert len(calls) == fake_openai.request_count == 12
    for call in calls:
        assert call["status"] == "ok" and call["error"] is None
        assert call["prompt_tokens"] > 100 and call["completion_tokens"] > 10
        assert call["tokens_estimated"] is False
        assert call["latency_s"] > 0
        assert call["finish_reason"] == "stop"
        assert (call["role"], call["agent"], call["model"]) == (
            "judge",
            "judge",
            "openai/local-judge",
        )
        assert call["started_at"] is not None
    # Stored token counts are the API's (the fake server counts whitespace words).
    by_prompt = {item_number(b): b for b in fake_openai.requests}
    for call in calls:
        body = by_prompt[int(call["item_id"].split("-")[1])]
        assert call["prompt_tokens"] == sum(len(m["content"].split()) for m in body["messages"])

    # Both samples of an item got the same prompt, hence the same fake rating: final == sample.
    values = sample_values(store, run_id)
    finals = rows(store, "SELECT * FROM judgments WHERE run_id = ? AND final", run_id)
    for final in finals:
        assert final["status"] == "ok"
        assert final["value"] == values[(final["item_id"], 1)][final["attribute"]]
        assert final["value"] == values[(final["item_id"], 2)][final["attribute"]]

    run = store.get_run(run_id)
    assert secret not in str(run["config"]) and secret not in str(run["models"])
    store.close()
    assert secret.encode() not in db_path.read_bytes()
    assert oct(db_path.stat().st_mode & 0o777) == "0o600"


# -- every fault kind at once -------------------------------------------------------------------

RANDOM_KINDS = [
    Fault("rate_limit", retry_after=0.01),
    Fault("server_error"),
    Fault("bad_gateway"),
    Fault("unavailable"),
    Fault("reset"),
    Fault("malformed_json"),
    Fault("truncated"),
    Fault("wrong_keys"),
    Fault("out_of_range"),
    Fault("empty_choices"),
]
# Items whose every request gets the same fault, so their outcome is known in advance.
FORCED = {
    0: Fault("wrong_keys"),
    1: Fault("out_of_range"),
    2: Fault("server_error"),
    3: Fault("truncated"),
    4: Fault("rate_limit", retry_after=0.01),
    5: Fault("reset"),
}
N_HANGS = 3


class FaultMix:
    """Fault plan: forced items, a few hangs, and seeded random faults for the rest.

    Random draws are handed out in arrival order to the requests that are neither forced nor
    hung, so the first draws are always used whatever the concurrency does.
    """

    def __init__(self, rate: float, seed: int):
        rng = random.Random(seed)
        self.draws = [
            rng.choice(RANDOM_KINDS) if rng.random() < rate else None for _ in range(5000)
        ]
        self.used = 0
        self.injected: dict[int, str | None] = {}
        self.next_hang = 7
        self.lock = threading.Lock()

    def __call__(self, index: int, body: dict[str, Any]) -> Fault | None:
        forced = FORCED.get(item_number(body))
        with self.lock:
            if forced is not None:
                fault = forced
            elif index >= self.next_hang and self.next_hang < 7 + 25 * N_HANGS:
                fault = Fault("hang", hang_seconds=3)
                self.next_hang += 25
            else:
                fault = self.draws[self.used]
                self.used += 1
            self.injected[index] = fault.kind if fault else None
        return fault


def test_fault_mix_loses_and_duplicates_nothing(pdsqi9, tmp_path):
    n_items, n_samples = 60, 2
    data = write_jsonl(tmp_path / "items.jsonl", make_items(n_items))
    plan = FaultMix(rate=0.3, seed=1234)
    with FakeOpenAIServer(faults=plan) as srv:
        config = make_config(
            data, srv, tmp_path / "db" / "mix.duckdb", timeout=1.0, samples=n_samples, concurrency=8
        )
        store, run_id, prepared = start_run(config)
        tally = execute_run(store, run_id, prepared, show_progress=False)
        requests = srv.request_count

    samples = assert_complete_and_consistent(store, run_id, pdsqi9, n_items, n_samples)
    status = {(s["item_id"], s["sample"]): s for s in samples}
    assert tally.ok + tally.failed == n_items * n_samples
    assert tally.failed == sum(1 for s in samples if s["status"] == "failed")

    # Every attempt, failed or not, has exactly one calls row.
    calls = rows(store, "SELECT * FROM calls WHERE run_id = ?", run_id)
    assert len(calls) == requests == len(plan.injected)
    injected = Counter(plan.injected.values())
    assert all(injected[f.kind] > 0 for f in RANDOM_KINDS)
    assert injected["hang"] == N_HANGS

    errors = Counter(c["error"].split(":")[0] for c in calls if c["status"] == "error")
    assert errors == {
        k: v
        for k, v in {
            "rate limited": injected["rate_limit"],
            "HTTP 500": injected["server_error"],
            "HTTP 502": injected["bad_gateway"],
            "HTTP 503": injected["unavailable"],
            "timed out": injected["hang"],
            "connection failed": injected["reset"],
            "malformed response": injected["malformed_json"] + injected["empty_choices"],
        }.items()
        if v
    }
    ok_calls = [c for c in calls if c["status"] == "ok"]
    assert sum(c["finish_reason"] == "length" for c in ok_calls) == injected["truncated"]
    assert all(c["prompt_tokens"] > 0 and c["latency_s"] > 0 for c in ok_calls)
    assert all(c["error"] is None for c in ok_calls)
    # Only a billed reply (200 without choices) carries tokens among the failed attempts.
    failed_calls = [c for c in calls if c["status"] == "error"]
    billed = [c for c in failed_calls if c["error"].endswith("no choices")]
    assert len(billed) == injected["empty_choices"]
    assert all(c["prompt_tokens"] >= 1 for c in billed)
    assert all(c["prompt_tokens"] is None for c in failed_calls if c not in billed)

    # Forced items end as predicted.
    turns = transcripts(store, run_id)
    for sample in range(1, n_samples + 1):

        def get(n: int, sample: int = sample) -> dict[str, Any]:
            return status[(f"item-{n:04d}", sample)]

        for n, marker in ((0, "citations_score"), (1, '"accurate": 9')):
            s = get(n)
            assert s["status"] == "failed" and s["n_calls"] == 2
            assert s["error"].startswith("invalid reply after 1 repair(s)")
            assert marker in s["raw_text"]
            roles = [m["role"] for m in turns[(s["item_id"], sample)]]
            assert roles == ["system", "user", "assistant", "user", "assistant"]
        assert "finish_reason=length" in get(3)["error"]
        for n, reason in (
            (2, "provider: HTTP 500"),
            (4, "provider: rate limited"),
            (5, "provider: connection failed"),
        ):
            s = get(n)
            assert s["status"] == "failed" and s["error"].startswith(reason)
            assert s["n_calls"] == FAST.max_attempts
            assert s["raw_text"] is None
    # Randomly faulted items mostly recover through retries and repairs.
    others = [s for s in samples if int(s["item_id"].split("-")[1]) not in FORCED]
    assert sum(s["status"] == "ok" for s in others) >= 0.8 * len(others)
    repaired_ok = [
        s
        for s in others
        if s["status"] == "ok"
        and any(m["content"].startswith(REPAIR_PREFIX) for m in turns[(s["item_id"], s["sample"])])
    ]
    assert repaired_ok  # wrong keys / out of range / truncation got a re-ask that succeeded
    retried_ok = [s for s in others if s["status"] == "ok" and s["n_calls"] > 1]
    assert len(retried_ok) > len(repaired_ok)

    finals = rows(store, "SELECT * FROM judgments WHERE run_id = ? AND final", run_id)
    for final in finals:
        n = int(final["item_id"].split("-")[1])
        if n in FORCED:
            assert final["status"] == "failed" and final["value"] is None
            assert final["error"] == f"all {n_samples} sample(s) failed"
    store.close()


# -- median of samples --------------------------------------------------------------------------


class VaryingJudge:
    """Random valid ratings; item 1 always invalid; one sample of item 2 invalid twice."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.sent: dict[int, list[dict[str, Any]]] = defaultdict(list)
        self.first_seen: set[int] = set()

    def __call__(self, body: dict[str, Any]) -> str | dict[str, Any]:
        n = item_number(body)
        with self.lock:
            first = n not in self.first_seen
            self.first_seen.add(n)
            if n == 1 or (n == 2 and (first or is_repair(body))):
                return "Scores: all good, five out of five."
            abstraction = int(self.rng.random() < 0.6)
            reply: dict[str, Any] = {k: self.rng.randint(1, 5) for k in PDSQI9_KEYS[:7]}
            reply.update(
                abstraction=abstraction,
                synthesized=self.rng.randint(1, 5) if abstraction else None,
                voice_summ=self.rng.randint(0, 1),
                voice_note=self.rng.randint(0, 1),
            )
            self.sent[n].append(dict(reply))
            return {**reply, "rationale": "varied"}


def expected_final(samples: list[dict[str, Any]]) -> dict[str, float | None]:
    final: dict[str, float | None] = {}
    for key in PDSQI9_KEYS:
        numbers = [s[key] for s in samples if s[key] is not None]
        final[key] = statistics.median(numbers) if numbers else None
    if final["abstraction"] == 0:
        final["synthesized"] = None
    return final


def _as_tuple(values: dict[str, Any]) -> tuple:
    return tuple(None if values[k] is None else float(values[k]) for k in PDSQI9_KEYS)


@pytest.mark.parametrize("n_samples", [3, 4])
def test_final_is_median_of_valid_samples(pdsqi9, tmp_path, n_samples):
    n_items = 12
    data = write_jsonl(tmp_path / "items.jsonl", make_items(n_items))
    judge = VaryingJudge(seed=n_samples)
    with FakeOpenAIServer(responder=judge) as srv:
        config = make_config(
            data, srv, tmp_path / "median.duckdb", samples=n_samples, concurrency=8
        )
        store, run_id, prepared = start_run(config)
        execute_run(store, run_id, prepared, show_progress=False)

    assert_complete_and_consistent(store, run_id, pdsqi9, n_items, n_samples)
    values = sample_values(store, run_id)
    samples = rows(store, "SELECT * FROM samples WHERE run_id = ?", run_id)
    ok_by_item: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        if s["status"] == "ok":
            ok_by_item[s["item_id"]].append(values[(s["item_id"], s["sample"])])
    finals: dict[str, dict[str, Any]] = defaultdict(dict)
    for row in rows(store, "SELECT * FROM judgments WHERE run_id = ? AND final", run_id):
        finals[row["item_id"]][row["attribute"]] = row

    assert "item-0001" not in ok_by_item
    assert {r["status"] for r in finals["item-0001"].values()} == {"failed"}
    assert len(ok_by_item["item-0002"]) == n_samples - 1
    assert finals["item-0002"]["accurate"]["rationale"] == (
        f"median of {n_samples - 1} valid sample(s), 1 failed"
    )

    for n in range(n_items):
        item_id = f"item-{n:04d}"
        if n == 1:
            continue
        stored = ok_by_item[item_id]
        # What the server sent is exactly what was stored, sample for sample.
        assert sorted(map(_as_tuple, stored), key=repr) == sorted(
            map(_as_tuple, judge.sent[n]), key=repr
        )
        expected = expected_final(judge.sent[n])
        got = {k: finals[item_id][k]["value"] for k in PDSQI9_KEYS}
        assert got == pytest.approx(expected), item_id
        assert all(r["status"] == "ok" for r in finals[item_id].values())
    store.close()


# -- resume -------------------------------------------------------------------------------------


def test_missing_work_and_resume_do_exactly_what_is_left(fake_openai, pdsqi9, items_file, db_path):
    config = make_config(items_file, fake_openai, db_path, samples=2, concurrency=3)
    store, run_id, prepared = start_run(config)
    all_units = missing_work(store, run_id, prepared)
    assert [(u.item.id, u.sample) for u in all_units] == [
        (i.id, s) for s in (1, 2) for i in prepared.items
    ]

    done_first = [all_units[i] for i in (0, 3, 4, 7, 11)]
    model = JudgeModel(config.judge, prepared.rubric)
    runner = SampleRunner(store, run_id, prepared.rubric, config, model, show_progress=False)

    async def partial() -> None:
        try:
            await runner.run(done_first)
        finally:
            await model.close()

    asyncio.run(partial())
    assert fake_openai.request_count == 5
    left = missing_work(store, run_id, prepared)
    expected_left = [u for u in all_units if u not in done_first]
    assert [(u.item.id, u.sample) for u in left] == [(u.item.id, u.sample) for u in expected_left]
    # No final rows while samples are missing.
    assert not rows(store, "SELECT * FROM judgments WHERE run_id = ? AND final", run_id)

    tally = execute_run(store, run_id, prepared, show_progress=False)
    assert tally.ok == len(expected_left)
    assert fake_openai.request_count == 12
    assert missing_work(store, run_id, prepared) == []
    assert_complete_and_consistent(store, run_id, pdsqi9, 6, 2)
    before = counts(store, run_id)

    again = execute_run(store, run_id, prepared, show_progress=False)
    assert (again.ok, again.failed) == (0, 0)
    assert fake_openai.request_count == 12
    assert counts(store, run_id) == before
    store.close()


def test_interrupted_run_resumes_exactly_the_missing_samples(pdsqi9, items_file, db_path):
    with FakeOpenAIServer(latency=0.05) as srv:
        config = make_config(items_file, srv, db_path, samples=2, concurrency=2)
        store, run_id, prepared = start_run(config)
        model = JudgeModel(config.judge, prepared.rubric)
        runner = SampleRunner(
            store, run_id, prepared.rubric, config, model, show_progress=False, flush_every=1
        )

        async def interrupted() -> None:
            task = asyncio.create_task(runner.run(missing_work(store, run_id, prepared)))
            while runner.tally.ok < 3:
                await asyncio.sleep(0.01)
            task.cancel()
            try:
                with pytest.raises(asyncio.CancelledError):
                    await task
            finally:
                await model.close()

        asyncio.run(interrupted())
        assert runner.tally.interrupted
        stored = rows(store, "SELECT item_id, sample FROM samples WHERE run_id = ?", run_id)
        assert len(stored) == runner.tally.ok
        assert 3 <= len(stored) < 12
        left = missing_work(store, run_id, prepared)
        assert {(u.item.id, u.sample) for u in left} | {
            (r["item_id"], r["sample"]) for r in stored
        } == {(i.id, s) for i in prepared.items for s in (1, 2)}
        assert len(left) == 12 - len(stored)

        before = srv.request_count
        execute_run(store, run_id, prepared, show_progress=False)
        assert srv.request_count - before == len(left)
    assert_complete_and_consistent(store, run_id, pdsqi9, 6, 2)
    store.close()


def test_units_are_work_unit_values(items_file, fake_openai, db_path):
    config = make_config(items_file, fake_openai, db_path)
    store, run_id, prepared = start_run(config)
    units = missing_work(store, run_id, prepared)
    assert units[0] == WorkUnit(prepared.items[0], 1)
    store.close()
