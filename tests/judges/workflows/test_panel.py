"""`--mode panel` end to end: personas score independently against the fake server over HTTP.

The fake server's responder recognises each persona by its system message and answers a fixed
rating per persona, so the panel's median and mean are known in advance.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clinjudge.cli import app
from clinjudge.judges import ModelSettings
from clinjudge.judges.workflows import workflow_for
from clinjudge.judges.workflows._panel import (
    PANEL_AGENT,
    PANEL_MEMBER_ROLE,
    aggregate_members,
    panel_personas,
)
from clinjudge.orchestration import RetryPolicy, RunConfig, create_run, execute_run, prepare_run
from clinjudge.runs import FINAL_AGENT, RunStore
from tests.factories import RATINGS, make_items, persona_of, responder, write_jsonl
from tests.fake_openai import PDSQI9_KEYS, FakeOpenAIServer, Fault

FAST = RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.05, jitter=0.01)
PERSONAS = ["high_scorer", "low_scorer", "middle_scorer"]
N_ITEMS = 3


# One fixed rating per persona (gate-valid for PDSQI-9).
def expected(names: list[str], how: str) -> dict[str, float | None]:
    """The panel value per attribute from the given members' ratings."""
    gate = statistics.median(RATINGS[n]["abstraction"] for n in names)
    values: dict[str, float | None] = {}
    combine = statistics.median if how == "median" else statistics.fmean
    for key in PDSQI9_KEYS:
        numbers = [RATINGS[n][key] for n in names if RATINGS[n][key] is not None]
        values[key] = float(combine(numbers)) if numbers else None
    if gate == 0:
        values["synthesized"] = None
    return values


@pytest.fixture
def panel_server() -> Any:
    with FakeOpenAIServer(responder) as server:
        yield server


def run_panel(
    tmp_path: Path, server: FakeOpenAIServer, **kw: Any
) -> tuple[RunStore, str, dict[str, Any]]:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(N_ITEMS))
    judge = ModelSettings(model="openai/local-judge", base_url=server.base_url, timeout=5.0)
    kw.setdefault("retry", FAST)
    config = RunConfig(
        data=str(data),
        judge=judge,
        db=str(tmp_path / "runs.duckdb"),
        mode="panel",
        personas="scoring",
        **kw,
    )
    prepared = prepare_run(config)
    store = RunStore(config.db)
    run_id = create_run(store, prepared)
    tally = execute_run(store, run_id, prepared, show_progress=False)
    return store, run_id, {"tally": tally, "config": config}


def judgments(store: RunStore, run_id: str, agent: str) -> dict[tuple[str, int], dict[str, Any]]:
    by_sample: dict[tuple[str, int], dict[str, Any]] = {}
    for row in store.query(
        "SELECT * FROM judgments WHERE run_id = ? AND agent = ?", [run_id, agent]
    ):
        by_sample.setdefault((row["item_id"], row["sample"]), {})[row["attribute"]] = row
    return by_sample


def test_panel_mode_is_registered() -> None:
    agent, _ = workflow_for("panel")
    assert agent == PANEL_AGENT == "panel"
    assert [p.name for p in panel_personas("scoring")] == PERSONAS


def test_panel_median_end_to_end(tmp_path: Path, panel_server: FakeOpenAIServer) -> None:
    store, run_id, info = run_panel(tmp_path, panel_server)
    assert (info["tally"].ok, info["tally"].failed) == (N_ITEMS, 0)
    # One independent call per persona per item, each led by its own persona's instructions.
    assert panel_server.request_count == N_ITEMS * len(PERSONAS)
    assert Counter(persona_of(b) for b in panel_server.requests) == dict.fromkeys(PERSONAS, N_ITEMS)
    for body in panel_server.requests:
        system = body["messages"][0]["content"]
        persona = panel_personas("scoring")[PERSONAS.index(persona_of(body))]
        assert system.startswith(persona.system_message)
        assert "OUTPUT FORMAT" in system[len(persona.system_message) :]

    # Each member's own judgment is stored under its persona name.
    for name in PERSONAS:
        member = judgments(store, run_id, name)
        assert len(member) == N_ITEMS
        for values in member.values():
            assert {k: r["value"] for k, r in values.items()} == {
                k: None if v is None else float(v) for k, v in RATINGS[name].items()
            }
            assert all(r["status"] == "ok" and not r["final"] for r in values.values())

    # The panel verdict is the per-attribute median, with the spread in the rationale.
    want = expected(PERSONAS, "median")
    panel = judgments(store, run_id, PANEL_AGENT)
    assert len(panel) == N_ITEMS
    for values in panel.values():
        assert {k: r["value"] for k, r in values.items()} == want
        assert values["accurate"]["rationale"] == "median of 3 members; spread 4"
        assert values["synthesized"]["rationale"] == "median of 3 members; spread 3"
        assert values["abstraction"]["rationale"] == "median of 3 members; spread 1"
    finals = judgments(store, run_id, FINAL_AGENT)
    assert len(finals) == N_ITEMS
    for values in finals.values():
        assert {k: r["value"] for k, r in values.items()} == want

    # Samples: one per member plus the panel's; calls recorded per member agent and role.
    samples = store.query("SELECT * FROM samples WHERE run_id = ?", [run_id])
    assert Counter(s["agent"] for s in samples) == dict.fromkeys([PANEL_AGENT, *PERSONAS], N_ITEMS)
    calls = store.query("SELECT * FROM calls WHERE run_id = ?", [run_id])
    assert Counter(c["agent"] for c in calls) == dict.fromkeys(PERSONAS, N_ITEMS)
    assert {c["role"] for c in calls} == {PANEL_MEMBER_ROLE}
    assert all(c["status"] == "ok" and c["prompt_tokens"] > 100 for c in calls)
    member_samples = [s for s in samples if s["agent"] in PERSONAS]
    assert all(s["n_calls"] == 1 for s in member_samples)
    assert all(s["n_calls"] == len(PERSONAS) for s in samples if s["agent"] == PANEL_AGENT)

    # The transcript holds every member's turns under its name.
    messages = store.query(
        "SELECT * FROM messages WHERE run_id = ? AND item_id = ? ORDER BY seq",
        [run_id, "item-0000"],
    )
    assert [m["agent"] for m in messages] == [n for n in PERSONAS for _ in range(3)]
    assert [m["role"] for m in messages] == ["system", "user", "assistant"] * 3
    store.close()


def test_panel_mean(tmp_path: Path, panel_server: FakeOpenAIServer) -> None:
    store, run_id, _ = run_panel(tmp_path, panel_server, panel_aggregate="mean")
    want = expected(PERSONAS, "mean")
    assert want["accurate"] == pytest.approx(10 / 3)
    for values in judgments(store, run_id, PANEL_AGENT).values():
        got = {k: r["value"] for k, r in values.items()}
        assert got == pytest.approx(want)
        assert values["accurate"]["rationale"] == "mean of 3 members; spread 4"
    store.close()


def test_member_models_from_roles(tmp_path: Path, panel_server: FakeOpenAIServer) -> None:
    other = ModelSettings(model="openai/other-judge", base_url=panel_server.base_url, timeout=5.0)
    store, run_id, _ = run_panel(tmp_path, panel_server, roles={"low_scorer": other})
    models = {
        (r["agent"], r["model"])
        for r in store.query("SELECT agent, model FROM calls WHERE run_id = ?", [run_id])
    }
    assert models == {
        ("high_scorer", "openai/local-judge"),
        ("low_scorer", "openai/other-judge"),
        ("middle_scorer", "openai/local-judge"),
    }
    assert Counter(b["model"] for b in panel_server.requests)["other-judge"] == N_ITEMS
    store.close()


def test_failing_member_leaves_a_panel_verdict(tmp_path: Path) -> None:
    def faults(_index: int, body: dict[str, Any]) -> Fault | None:
        return Fault("server_error") if persona_of(body) == "low_scorer" else None

    with FakeOpenAIServer(responder, faults=faults) as server:
        store, run_id, info = run_panel(tmp_path, server)
    assert (info["tally"].ok, info["tally"].failed) == (N_ITEMS, 0)
    samples = {
        (s["item_id"], s["agent"]): s
        for s in store.query("SELECT * FROM samples WHERE run_id = ?", [run_id])
    }
    for n in range(N_ITEMS):
        low = samples[(f"item-{n:04d}", "low_scorer")]
        assert low["status"] == "failed" and low["error"].startswith("provider")
        assert low["n_calls"] == FAST.max_attempts
        assert samples[(f"item-{n:04d}", PANEL_AGENT)]["status"] == "ok"
    want = expected(["high_scorer", "middle_scorer"], "median")
    assert want["accurate"] == 4.5
    for values in judgments(store, run_id, PANEL_AGENT).values():
        assert {k: r["value"] for k, r in values.items()} == want
        assert values["accurate"]["rationale"] == "median of 2 members; spread 1"
        assert all(r["status"] == "ok" for r in values.values())
    low_calls = store.query(
        "SELECT status FROM calls WHERE run_id = ? AND agent = 'low_scorer'", [run_id]
    )
    assert len(low_calls) == N_ITEMS * FAST.max_attempts
    assert {c["status"] for c in low_calls} == {"error"}
    store.close()


def test_all_members_failing_fails_the_panel(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder, faults=lambda i, b: Fault("server_error")) as server:
        store, run_id, info = run_panel(tmp_path, server)
    assert (info["tally"].ok, info["tally"].failed) == (0, N_ITEMS)
    all_failed = "all 3 panel members failed"
    assert info["tally"].errors == {all_failed: N_ITEMS}
    panel = store.query(
        "SELECT * FROM samples WHERE run_id = ? AND agent = ?", [run_id, PANEL_AGENT]
    )
    assert len(panel) == N_ITEMS
    # The members' reason is carried up, grouped: not only on the members' own rows.
    reason = f"{all_failed}: 3 × provider: HTTP 500"
    assert all(s["status"] == "failed" and s["error"].startswith(reason) for s in panel)
    members = store.query(
        "SELECT * FROM samples WHERE run_id = ? AND agent <> ?", [run_id, PANEL_AGENT]
    )
    assert len(members) == N_ITEMS * len(PERSONAS)
    assert all(s["status"] == "failed" for s in members)
    finals = store.query("SELECT * FROM judgments WHERE run_id = ? AND final", [run_id])
    assert len(finals) == N_ITEMS * len(PDSQI9_KEYS)
    assert all(f["status"] == "failed" and f["value"] is None for f in finals)
    store.close()


def test_aggregate_members_gate_and_even_count(pdsqi9) -> None:
    low, high = RATINGS["low_scorer"], RATINGS["high_scorer"]
    # Two members, one says no abstraction needed: a tie on the gate counts as needed.
    values, notes = aggregate_members(pdsqi9, [low, high])
    assert values["abstraction"] == 0.5
    assert values["synthesized"] == 5.0
    assert values["accurate"] == 3.0
    assert notes["synthesized"] == "median of 2 members; spread 0"
    # A majority saying no abstraction nulls the gated attribute, with mean as with median.
    for how in ("median", "mean"):
        values, notes = aggregate_members(pdsqi9, [low, low, high], how)
        assert values["synthesized"] is None
        assert notes["synthesized"].endswith("; null")
    values, _ = aggregate_members(pdsqi9, [low, low, high], "mean")
    assert values["accurate"] == pytest.approx(7 / 3)
    with pytest.raises(ValueError, match="aggregate"):
        aggregate_members(pdsqi9, [low], "mode")


def test_panel_calls_in_flight_never_exceed_concurrency(tmp_path: Path) -> None:
    import threading
    import time

    lock = threading.Lock()
    in_flight = [0, 0]  # now, most seen

    def slow(body: dict[str, Any]) -> dict[str, Any]:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        time.sleep(0.05)
        with lock:
            in_flight[0] -= 1
        return responder(body)

    with FakeOpenAIServer(slow) as server:
        store, _run_id, info = run_panel(tmp_path, server, concurrency=2, samples=2)
    store.close()
    assert info["tally"].ok == N_ITEMS * 2
    # 3 members x 2 samples in flight would be 6 without the run-wide bound.
    assert in_flight[1] == 2


def test_truncated_members_give_their_reason_to_the_panel(tmp_path: Path) -> None:
    # Issue #28: the summary said "all panel members failed (first: all panel members failed)";
    # the members' real reason was only in their own rows.
    data = write_jsonl(tmp_path / "items.jsonl", make_items(N_ITEMS))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer(responder, faults=lambda i, b: Fault("truncated")) as server:
        result = CliRunner().invoke(
            app,
            [
                "run", "--mode", "panel", "--data", str(data), "--model", "openai/local-judge",
                "--base-url", server.base_url, "--db", str(db), "--no-progress",
            ],
            env={"COLUMNS": "250"},
        )  # fmt: skip
        caps = Counter(body.get("max_tokens") for body in server.requests)
    assert result.exit_code == 1, result.output
    # Every member was re-asked once, with twice the room.
    assert caps == {400: N_ITEMS * len(PERSONAS), 800: N_ITEMS * len(PERSONAS)}
    reason = "all 3 panel members failed: 3 × reply truncated at the token limit (max_tokens 800)"
    with RunStore(db, read_only=True) as store:
        panel = store.query("SELECT error FROM samples WHERE agent = ?", [PANEL_AGENT])
    assert [s["error"] for s in panel] == [reason] * N_ITEMS
    summary = " ".join(result.output.split())
    assert (
        f"failed: {N_ITEMS} x all 3 panel members failed (first: 3 × reply truncated at the "
        "token limit (max_tokens 800))"
    ) in summary
