"""Fault injection: 1000 items in single mode and 50 in magentic mode over HTTP.

The fake server draws a fault for each request from a seeded schedule covering every kind it
knows: 429 with and without Retry-After, 500/502/503, hangs past the client timeout, connection
resets, a cut-off JSON body, truncated replies, wrong keys, out-of-range values and empty
choices. Whatever the provider does, the invariants of SPEC §12 must hold:

* the run finishes (no crash) and is marked completed;
* every (item, sample) ends exactly once, ``ok`` or ``failed`` with a reason;
* no duplicate rows in any keyed table;
* one calls row per HTTP request, tokens on every successful attempt equal to what the server
  billed, an error reason on every failed one;
* retries are bounded: never more consecutive failed attempts than the retry policy allows,
  never more attempts per sample than (repairs + 1) x attempts.
"""

from __future__ import annotations

import random
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from clinjudge.judges.workflows import JUDGE_AGENT
from clinjudge.judges.workflows._magentic import ORCHESTRATOR_AGENT
from clinjudge.runs import FINAL_AGENT, RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import PDSQI9_KEYS, FakeOpenAIServer, Fault, _message_text
from tests.magentic_fake import PanelFake
from tests.survival.factories import FAST, make_config, run_in_process

# Faults answered with a completion the client accepts (the judge may still reject its content).
# Generous: on a loaded 2-core CI machine an ordinary reply can take a good part of a second,
# and a reply the server sent but the client gave up on would not count as answered.
CLIENT_TIMEOUT = 2.0
ANSWERED = {None, "truncated", "wrong_keys", "out_of_range"}
SCHEDULE: tuple[Fault, ...] = (
    Fault("rate_limit", retry_after=0.02),
    Fault("rate_limit"),  # no Retry-After: exponential backoff
    Fault("server_error"),
    Fault("bad_gateway"),
    Fault("unavailable"),
    Fault("hang", hang_seconds=2 * CLIENT_TIMEOUT),
    Fault("reset"),
    Fault("malformed_json"),
    Fault("truncated"),
    Fault("wrong_keys"),
    Fault("out_of_range"),
    Fault("empty_choices"),
)
KEYED = {
    "samples": "item_id, sample, agent",
    "judgments": "item_id, sample, agent, attribute",
    "messages": "item_id, sample, agent, seq",
    "calls": "call_id",
    "items": "item_id",
}


class SeededFaults:
    """A fault per request index from ``random.Random(seed)``; remembers what each request got."""

    def __init__(self, rate: float, seed: int):
        self.rate = rate
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.injected: dict[int, str | None] = {}
        self.billed_prompt: dict[int, int] = {}

    def __call__(self, index: int, body: dict[str, Any]) -> Fault | None:
        with self.lock:
            fault = self.rng.choice(SCHEDULE) if self.rng.random() < self.rate else None
            self.injected[index] = fault.kind if fault else None
            # What the fake server bills for a completion it answers (words of every message).
            words = sum(len(_message_text(m).split()) for m in body.get("messages", []))
            self.billed_prompt[index] = max(words, 1)
        return fault


def assert_no_duplicates(store: RunStore, run_id: str) -> None:
    for table, key in KEYED.items():
        dupes = store.query(
            f"SELECT {key}, count(*) AS n FROM {table} WHERE run_id = ? GROUP BY ALL HAVING n > 1",
            [run_id],
        )
        assert dupes == [], f"duplicate rows in {table}: {dupes[:3]}"


def assert_attempts_bounded(store: RunStore, run_id: str, max_per_sample: int) -> None:
    """No call chain retried beyond the policy; no sample beyond its total budget."""
    calls = store.query(
        "SELECT item_id, sample, agent, seq, status FROM calls WHERE run_id = ? ORDER BY ALL",
        [run_id],
    )
    chains: dict[tuple[str, int, str], list[str]] = defaultdict(list)
    for call in calls:
        chains[(call["item_id"], call["sample"], call["agent"])].append(call["status"])
    for key, statuses in chains.items():
        run = longest = 0
        for status in statuses:
            run = run + 1 if status == "error" else 0
            longest = max(longest, run)
        assert longest <= FAST.max_attempts, (key, statuses)
    per_sample = Counter((c["item_id"], c["sample"]) for c in calls)
    assert max(per_sample.values()) <= max_per_sample


def assert_calls_match_server(store: RunStore, run_id: str, plan: SeededFaults, requests: int):
    calls = store.query("SELECT * FROM calls WHERE run_id = ?", [run_id])
    # Every HTTP request is one recorded attempt, nothing more, nothing less.
    assert len(calls) == requests == len(plan.injected)
    ok = [c for c in calls if c["status"] == "ok"]
    failed = [c for c in calls if c["status"] != "ok"]
    answered = [i for i, kind in plan.injected.items() if kind in ANSWERED]
    assert len(ok) == len(answered)
    assert all(c["error"] for c in failed)
    # A reply without choices is billed: its usage is kept; no other failure carries tokens.
    billed = [c for c in failed if c["error"].endswith("no choices")]
    assert len(billed) == Counter(plan.injected.values())["empty_choices"]
    assert all(c["prompt_tokens"] >= 1 for c in billed)
    assert all(
        c["prompt_tokens"] is None and c["cost_usd"] is None for c in failed if c not in billed
    )
    # Tokens come from the provider's usage, exactly as billed, for every successful attempt.
    assert all(c["prompt_tokens"] >= 1 and c["completion_tokens"] >= 1 for c in ok)
    assert not any(c["tokens_estimated"] for c in ok)
    assert sum(c["prompt_tokens"] for c in ok) == sum(plan.billed_prompt[i] for i in answered)
    assert all(c["latency_s"] is not None and c["started_at"] is not None for c in calls)
    # A hang is recorded with the time it cost: the whole client timeout.
    assert all(c["latency_s"] >= 0.9 * CLIENT_TIMEOUT for c in failed if c["error"] == "timed out")
    errors = Counter(c["error"].split(":")[0] for c in failed)
    injected = Counter(plan.injected.values())
    expected = {
        "rate limited": injected["rate_limit"],
        "HTTP 500": injected["server_error"],
        "HTTP 502": injected["bad_gateway"],
        "HTTP 503": injected["unavailable"],
        "timed out": injected["hang"],
        "connection failed": injected["reset"],
        "malformed response": injected["malformed_json"] + injected["empty_choices"],
    }
    assert errors == {k: v for k, v in expected.items() if v}


def test_thousand_items_single_mode_survive_every_fault(tmp_path: Path) -> None:
    n_items = 1000
    data = write_jsonl(tmp_path / "items.jsonl", make_items(n_items))
    plan = SeededFaults(rate=0.3, seed=20251122)
    with FakeOpenAIServer(faults=plan) as srv:
        config = make_config(
            data, srv, tmp_path / "faults.duckdb", concurrency=32, judge={"timeout": CLIENT_TIMEOUT}
        )
        store, run_id, tally = run_in_process(config)
        requests = srv.request_count

    injected = Counter(plan.injected.values())
    assert all(injected[f.kind] >= 5 for f in SCHEDULE), injected  # every kind was exercised
    assert injected["rate_limit"] >= 20  # both flavours of 429 are in there
    assert store.get_run(run_id)["status"] == "completed"

    samples = store.query("SELECT * FROM samples WHERE run_id = ?", [run_id])
    assert len(samples) == n_items
    assert {s["agent"] for s in samples} == {JUDGE_AGENT}
    assert {s["item_id"] for s in samples} == {f"item-{n:04d}" for n in range(n_items)}
    for s in samples:
        assert s["status"] in ("ok", "failed")
        if s["status"] == "failed":
            assert s["error"], s  # failed with a reason
    assert tally.ok + tally.failed == n_items
    assert tally.ok == sum(s["status"] == "ok" for s in samples) >= 0.9 * n_items
    assert tally.failed > 0  # some samples exhausted their retries or repairs

    judgments = store.query(
        "SELECT status, count(*) AS n FROM judgments WHERE run_id = ? AND NOT final GROUP BY 1",
        [run_id],
    )
    assert sum(j["n"] for j in judgments) == n_items * len(PDSQI9_KEYS)
    finals = store.query(
        "SELECT count(DISTINCT item_id) AS items, count(*) AS n FROM judgments "
        "WHERE run_id = ? AND final AND agent = ?",
        [run_id, FINAL_AGENT],
    )
    assert finals == [{"items": n_items, "n": n_items * len(PDSQI9_KEYS)}]
    assert_no_duplicates(store, run_id)
    # Each sample: a call chain per (repair + 1) reply, each chain at most max_attempts.
    assert_attempts_bounded(store, run_id, (config.max_repairs + 1) * FAST.max_attempts)
    assert_calls_match_server(store, run_id, plan, requests)
    n_calls = store.query("SELECT sum(n_calls) AS n FROM samples WHERE run_id = ?", [run_id])
    assert n_calls == [{"n": requests}]
    store.close()


def test_fifty_items_magentic_mode_survive_faults(tmp_path: Path) -> None:
    n_items = 50
    data = write_jsonl(tmp_path / "items.jsonl", make_items(n_items))
    plan = SeededFaults(rate=0.08, seed=7)
    fake = PanelFake(personas="high_scorer,low_scorer")
    with FakeOpenAIServer(responder=fake, faults=plan) as srv:
        config = make_config(
            data,
            srv,
            tmp_path / "magentic.duckdb",
            mode="magentic",
            personas=fake.personas,
            concurrency=16,
            judge={"timeout": CLIENT_TIMEOUT},
        )
        store, run_id, tally = run_in_process(config)
        requests = srv.request_count

    assert store.get_run(run_id)["status"] == "completed"
    injected = Counter(plan.injected.values())
    assert len(set(injected) - {None}) >= 8, injected
    decisions = store.query(
        "SELECT * FROM samples WHERE run_id = ? AND agent = ?", [run_id, ORCHESTRATOR_AGENT]
    )
    assert len(decisions) == n_items
    assert all(d["status"] in ("ok", "failed") for d in decisions)
    assert all(d["error"] for d in decisions if d["status"] == "failed")
    assert tally.ok + tally.failed == n_items
    assert tally.ok >= n_items // 2
    members = store.query(
        "SELECT agent, count(*) AS n FROM samples WHERE run_id = ? AND agent <> ? GROUP BY 1",
        [run_id, ORCHESTRATOR_AGENT],
    )
    assert {m["agent"]: m["n"] for m in members} == {"high_scorer": n_items, "low_scorer": n_items}
    finals = store.query(
        "SELECT count(DISTINCT item_id) AS n FROM judgments WHERE run_id = ? AND final", [run_id]
    )
    assert finals == [{"n": n_items}]
    assert_no_duplicates(store, run_id)
    # A discussion makes many calls; still every one is recorded, each chain bounded.
    assert_attempts_bounded(store, run_id, 200)
    calls = store.query("SELECT * FROM calls WHERE run_id = ?", [run_id])
    assert len(calls) == requests == len(plan.injected)
    ok = [c for c in calls if c["status"] == "ok"]
    assert len(ok) == sum(kind in ANSWERED for kind in plan.injected.values())
    assert all(c["prompt_tokens"] >= 1 and not c["tokens_estimated"] for c in ok)
    assert all(c["error"] for c in calls if c["status"] != "ok")
    assert {c["agent"] for c in calls} == {ORCHESTRATOR_AGENT, "high_scorer", "low_scorer"}
    store.close()
