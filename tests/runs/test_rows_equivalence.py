"""The store's row builders (``runs/_rows.py``) build the rows they always did (issue 27 made
them cheaper): every row equals, key by key (in key order, except a calls row's, which the
store reads by column name), what the builders as they were before made, copied below as the
reference, on generated verdicts, calls and faults."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import clinjudge.runs._rows as rows_module
from clinjudge.judges import CallOutcome, ProviderFault, SampleVerdict
from clinjudge.rubrics import ChatTurn, Rubric, load_rubric
from clinjudge.runs import SampleKey, call_row, verdict_rows, workflow_rows
from clinjudge.runs._rows import judgment_rows

NOW = datetime(2026, 11, 27, 1, 2, 3, 456789, tzinfo=UTC)


def fixed_now() -> datetime:
    return NOW


# -- the reference: the builders as they were -----------------------------------------------------


def ref_columns(key: SampleKey) -> dict[str, Any]:
    return {"run_id": key.run_id, "item_id": key.item_id, "sample": key.sample, "agent": key.agent}


def ref_call_row(
    key: SampleKey,
    seq: int,
    *,
    role: str,
    model: str,
    started: datetime,
    outcome: CallOutcome | None,
    fault: ProviderFault | None,
) -> dict[str, Any]:
    row = {
        "call_id": f"{key.run_id}/{key.item_id}/{key.sample}/{key.agent}/{seq}",
        **ref_columns(key),
        "seq": seq,
        "role": role,
        "model": model,
        "started_at": started,
        "status": "ok" if outcome else "error",
        "error": fault.reason if fault else None,
        "latency_s": max((fixed_now() - started).total_seconds(), 0.0),
    }
    if fault is not None:
        row["output_mode"] = fault.output_mode
    if fault is not None and fault.usage is not None:
        row.update(
            prompt_tokens=fault.usage[0],
            completion_tokens=fault.usage[1],
            tokens_estimated=False,
            cost_usd=fault.cost_usd,
        )
    if outcome is not None:
        row.update(
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=outcome.completion_tokens,
            tokens_estimated=outcome.tokens_estimated,
            cost_usd=outcome.cost_usd,
            latency_s=outcome.latency_s,
            finish_reason=outcome.finish_reason,
            cached=outcome.cached,
            output_mode=outcome.output_mode,
            cached_input_tokens=outcome.cached_input_tokens,
            cache_write_tokens=outcome.cache_write_tokens,
            cache_saving_usd=outcome.cache_saving_usd,
            max_tokens=outcome.max_tokens,
        )
    return row


def ref_judgment_rows(key: SampleKey, rubric: Rubric, verdict: SampleVerdict) -> list[dict]:
    columns = ref_columns(key)
    ok = verdict.status == "ok"
    return [
        {
            **columns,
            "attribute": attribute,
            "value": verdict.values.get(attribute) if ok else None,
            "final": False,
            "status": verdict.status,
            "error": verdict.error,
            "rationale": verdict.rationales.get(attribute) or verdict.rationale,
            "raw_value": verdict.coerced.get(attribute) if ok else None,
        }
        for attribute in rubric.keys
    ]


def ref_sample_row(key: SampleKey, verdict: SampleVerdict, calls: list[dict]) -> dict[str, Any]:
    ok = verdict.status == "ok"
    return {
        **ref_columns(key),
        "status": verdict.status,
        "error": verdict.error,
        "raw_text": None if ok else verdict.raw_text,
        "rationale": verdict.rationale,
        "n_calls": len(calls),
        "latency_s": sum(c.get("latency_s") or 0.0 for c in calls),
        "finished_at": fixed_now(),
    }


def ref_transcript_rows(key: SampleKey, turns: list[tuple[str, ChatTurn]]) -> list[dict]:
    return [
        {**ref_columns(key), "agent": agent, "seq": seq, "role": turn.role, "content": turn.content}
        for seq, (agent, turn) in enumerate(turns)
    ]


def ref_verdict_rows(
    key: SampleKey, rubric: Rubric, verdict: SampleVerdict, calls: list[dict]
) -> dict[str, list[dict]]:
    turns = [(key.agent, turn) for turn in verdict.transcript]
    return {
        "calls": calls,
        "messages": ref_transcript_rows(key, turns),
        "samples": [ref_sample_row(key, verdict, calls)],
        "judgments": ref_judgment_rows(key, rubric, verdict),
    }


def ref_workflow_rows(
    key: SampleKey,
    rubric: Rubric,
    verdict: SampleVerdict,
    members: dict[str, SampleVerdict],
    transcript: list[tuple[str, ChatTurn]],
    calls: list[dict],
) -> dict[str, list[dict]]:
    rows = ref_verdict_rows(key, rubric, verdict, calls)
    if transcript:
        rows["messages"] = ref_transcript_rows(key, transcript)
    for member, member_verdict in members.items():
        member_key = SampleKey(key.run_id, key.item_id, key.sample, member)
        own_calls = [c for c in calls if c["agent"] == member]
        rows["samples"].append(ref_sample_row(member_key, member_verdict, own_calls))
        rows["judgments"].extend(ref_judgment_rows(member_key, rubric, member_verdict))
    return rows


# -- generated inputs -----------------------------------------------------------------------------


def exact(value: Any) -> Any:
    """A row or rows as (key, type, value) in order: equal only when keys, order, types and
    values all are (0 == 0.0 == False would pass a plain comparison)."""
    if isinstance(value, dict):
        return [(k, type(v).__name__, exact(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [exact(v) for v in value]
    return value


TEXTS = ["", "Short.", "Reasons with 'quotes' and <tags>.", "Überprüft \u2028 ok", None]


def random_verdict(rng: random.Random, rubric: Rubric) -> SampleVerdict:
    keys = rubric.keys
    status = rng.choice(["ok", "ok", "ok", "failed"])
    values: dict[str, int | None] = {}
    for key in keys:
        if rng.random() < 0.9:  # sometimes a key is missing from the values
            values[key] = rng.choice([None, 0, 1, 2, 3, 4, 5])
    rationales = {}
    if rng.random() < 0.4:
        rationales = {k: rng.choice(TEXTS[:4]) for k in keys if rng.random() < 0.6}
    coerced = {}
    if rng.random() < 0.3:
        coerced = {k: rng.randint(0, 5) for k in keys if rng.random() < 0.3}
    turns = [
        ChatTurn(rng.choice(["system", "user", "assistant"]), rng.choice(TEXTS[:4]))
        for _ in range(rng.randint(0, 5))
    ]
    return SampleVerdict(
        status,
        values=values if status == "ok" or rng.random() < 0.5 else {},
        rationales=rationales,
        rationale=rng.choice(TEXTS),
        error=None if status == "ok" and rng.random() < 0.8 else rng.choice(["parse: bad", "x"]),
        raw_text=rng.choice(TEXTS),
        transcript=turns,
        coerced=coerced,
    )


def random_outcome(rng: random.Random) -> CallOutcome:
    return CallOutcome(
        text="{}",
        finish_reason=rng.choice(["stop", "length"]),
        prompt_tokens=rng.randint(0, 5000),
        completion_tokens=rng.randint(0, 500),
        tokens_estimated=rng.random() < 0.2,
        cost_usd=rng.choice([None, 0.0, rng.random() / 100]),
        latency_s=rng.choice([0.0, rng.random(), rng.randint(0, 3)]),
        cached=rng.random() < 0.2,
        output_mode=rng.choice([None, "json_schema", "json_object", "off"]),
        cached_input_tokens=rng.randint(0, 100),
        cache_write_tokens=rng.randint(0, 100),
        cache_saving_usd=rng.choice([None, -0.001, 0.002]),
        max_tokens=rng.choice([None, 400, 1]),
    )


def random_fault(rng: random.Random) -> ProviderFault:
    fault = ProviderFault(rng.choice(["timeout", "rate_limit: 429", "bad json"]), retryable=True)
    if rng.random() < 0.5:
        fault.usage = (rng.randint(0, 900), rng.randint(0, 90))
        fault.cost_usd = rng.choice([None, 0.003])
    if rng.random() < 0.5:
        fault.output_mode = rng.choice(["json_schema", "off"])
    return fault


def random_calls(rng: random.Random, key: SampleKey, agents: list[str]) -> list[dict[str, Any]]:
    calls = []
    for seq in range(rng.choice([0, 1, 1, 1, 2, 3])):
        agent = rng.choice(agents)
        outcome = random_outcome(rng) if rng.random() < 0.75 else None
        fault = None if outcome is not None and rng.random() < 0.9 else random_fault(rng)
        started = NOW - timedelta(seconds=rng.choice([0.0, 0.25, 3.0, -1.0]))
        calls.append(
            ref_call_row(
                SampleKey(key.run_id, key.item_id, key.sample, agent),
                seq,
                role="judge",
                model="openai/x",
                started=started,
                outcome=outcome,
                fault=fault,
            )
        )
        if rng.random() < 0.1:
            calls[-1]["latency_s"] = rng.choice([None, 0, 2])  # a row from elsewhere
    return calls


RUBRICS = [load_rubric("pdsqi9"), load_rubric("probsum")]


@pytest.fixture(autouse=True)
def _fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows_module, "now", fixed_now)


def test_call_rows_equal_the_reference():
    rng = random.Random(2711)
    for n in range(3000):
        key = SampleKey(f"run-{n % 3}", f"item/{n}", rng.randint(0, 9), rng.choice(["judge", "a"]))
        outcome = random_outcome(rng) if rng.random() < 0.7 else None
        fault = random_fault(rng) if outcome is None or rng.random() < 0.15 else None
        started = NOW - timedelta(seconds=rng.choice([0.0, 0.5, 30.0, -2.0]))
        args = {"role": "judge", "model": "m", "started": started, "outcome": outcome}
        seq = rng.randint(0, 4)
        expected = ref_call_row(key, seq, fault=fault, **args)
        # The store reads a call row by column name: keys, types and values must match,
        # their order need not (a reply with a fault lists output_mode later than before).
        got = call_row(key, seq, fault=fault, **args)
        assert sorted(exact(got)) == sorted(exact(expected))


def test_sample_rows_equal_the_reference():
    rng = random.Random(2712)
    compared = 0
    for n in range(2000):
        rubric = RUBRICS[n % len(RUBRICS)]
        key = SampleKey("run", f"i{n}", rng.randint(1, 5), "judge")
        verdict = random_verdict(rng, rubric)
        calls = random_calls(rng, key, ["judge"])
        expected = ref_verdict_rows(key, rubric, verdict, calls)
        assert exact(verdict_rows(key, rubric, verdict, calls)) == exact(expected)
        assert exact(judgment_rows(key, rubric, verdict)) == exact(expected["judgments"])
        compared += len(expected["judgments"])
    assert compared > 15000


def test_workflow_rows_equal_the_reference():
    rng = random.Random(2713)
    for n in range(1500):
        rubric = RUBRICS[n % len(RUBRICS)]
        key = SampleKey("run", f"i{n}", rng.randint(1, 5), rng.choice(["judge", "panel"]))
        members = {
            name: random_verdict(rng, rubric)
            for name in rng.sample(["a", "b", "c"], rng.randint(0, 3))
        }
        agents = [key.agent, *members]
        transcript = [
            (rng.choice(agents), ChatTurn(rng.choice(["user", "assistant"]), rng.choice(TEXTS[:4])))
            for _ in range(rng.choice([0, 0, 2, 6]))
        ]
        verdict = random_verdict(rng, rubric)
        calls = random_calls(rng, key, agents)
        expected = ref_workflow_rows(key, rubric, verdict, members, transcript, calls)
        got = workflow_rows(key, rubric, verdict, members, transcript, calls)
        assert exact(got) == exact(expected)
        assert got["calls"] is calls  # the runner's call rows go in as they are
