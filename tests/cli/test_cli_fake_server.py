"""`judge run` against the fake OpenAI-compatible server over real HTTP."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from clinjudge.rubrics import Rubric
from tests.cli._helpers import invoke, query, scalar
from tests.fake_openai import PDSQI9_KEYS, FakeOpenAIServer, pdsqi9_scores


def _last_user_text(body: dict) -> str:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    content = users[-1]["content"]
    return content if isinstance(content, str) else "\n".join(p["text"] for p in content)


def test_run_against_fake_server(
    fake_openai: FakeOpenAIServer,
    items_file: Path,
    db_path: Path,
    pdsqi9: Rubric,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local endpoint needs no key
    result = invoke(
        "run",
        "--data",
        str(items_file),
        "--model",
        "openai/local-judge",
        "--base-url",
        fake_openai.base_url,
        "--db",
        str(db_path),
        "--samples",
        "2",
        "--concurrency",
        "4",
        "--no-progress",
    )
    assert result.exit_code == 0, result.stderr
    run_id = result.stdout.strip()
    assert "SIMULATED" not in result.stderr
    assert "12 samples ok, 0 failed" in result.stderr

    # One request per (item, sample); every request went to the configured model.
    assert fake_openai.request_count == 12
    assert {r["model"] for r in fake_openai.requests} == {"local-judge"}

    run = query(db_path, "SELECT status, simulated FROM runs WHERE run_id = ?", [run_id])
    assert run == [("completed", False)]

    # 11 validated values per item and sample.
    per_sample = query(
        db_path,
        """
        SELECT item_id, sample, count(*), count(*) FILTER (WHERE status = 'ok')
        FROM judgments WHERE NOT final GROUP BY ALL""",
    )
    assert len(per_sample) == 12
    assert all(n == ok == 11 for _, _, n, ok in per_sample)
    assert {s for _, s, _, _ in per_sample} == {1, 2}

    # Stored values are exactly what the server answered, gate included.
    stored = query(
        db_path,
        """
        SELECT item_id, sample, attribute, value FROM judgments WHERE NOT final""",
    )
    vectors: dict[tuple, dict] = {}
    for item, sample, attribute, value in stored:
        vectors.setdefault((item, sample), {})[attribute] = value
    got = Counter(tuple(v[k] for k in PDSQI9_KEYS) for v in vectors.values())
    answered = [pdsqi9_scores(_last_user_text(body)) for body in fake_openai.requests]
    want = Counter(
        tuple(None if a[k] is None else float(a[k]) for k in PDSQI9_KEYS) for a in answered
    )
    assert got == want
    for values in vectors.values():
        assert (values["synthesized"] is None) == (values["abstraction"] == 0)
        for attribute in pdsqi9.attributes:
            value = values[attribute.key]
            assert value is None or attribute.min <= value <= attribute.max

    # Calls carry tokens and latency; finals exist for every item.
    calls = query(
        db_path,
        """
        SELECT model, status, prompt_tokens, completion_tokens, tokens_estimated, latency_s
        FROM calls WHERE run_id = ?""",
        [run_id],
    )
    assert len(calls) == 12
    for model, status, prompt, completion, estimated, latency in calls:
        assert (model, status, estimated) == ("openai/local-judge", "ok", False)
        assert prompt > 0 and completion > 0
        assert latency > 0
    # Token counts are the server's usage figures, not estimates.
    prompt_words = sum(
        max(sum(len(m["content"].split()) for m in body["messages"]), 1)
        for body in fake_openai.requests
    )
    reply_words = sum(max(len(json.dumps(a).split()), 1) for a in answered)
    assert sum(c[2] for c in calls) == prompt_words
    assert sum(c[3] for c in calls) == reply_words
    assert scalar(db_path, "SELECT count(DISTINCT item_id) FROM judgments WHERE final") == 6
    assert scalar(db_path, "SELECT count(*) FROM messages") >= 12 * 2
