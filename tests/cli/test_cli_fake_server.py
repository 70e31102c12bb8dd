"""`judge run` against the fake OpenAI-compatible server over real HTTP."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from clinjudge.rubrics import Rubric
from tests.cli._helpers import invoke, query, scalar
from tests.factories import make_items, write_jsonl
from tests.fake_openai import PDSQI9_KEYS, FakeOpenAIServer, pdsqi9_scores
from tests.ratings_data import ratings_matching, write_ratings


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


# -- issue #28: what a real model exposed ---------------------------------------------------------


def _run(srv: FakeOpenAIServer, data: Path, db: Path, *extra: str):
    return invoke(
        "run", "--data", str(data), "--model", "openai/local-judge", "--base-url",
        srv.base_url, "--db", str(db), "--no-progress", *extra,
    )  # fmt: skip


def test_timeouts_are_retried_once_and_the_summary_names_the_setting(
    tmp_path: Path, db_path: Path
) -> None:
    data = write_jsonl(tmp_path / "one.jsonl", make_items(1))
    config = tmp_path / "fast.yaml"
    config.write_text("retry: {initial_wait: 0.01, max_wait: 0.02, jitter: 0.0}\n")
    with FakeOpenAIServer(latency=1.5) as srv:
        result = _run(srv, data, db_path, "--timeout", "0.3", "--config", str(config))
        requests = srv.request_count
    assert result.exit_code == 1, result.stderr
    assert requests == 2  # the call and one retry, not max_attempts (6)
    stderr = " ".join(result.stderr.split())
    assert "2 model call(s) timed out: calls take longer than --timeout 0.3 s" in stderr
    assert "raise --timeout" in stderr
    assert "lower --concurrency (now 8" in stderr


def test_identical_samples_are_flagged(tmp_path: Path, db_path: Path) -> None:
    # A greedy server: the same prompt always gets the same reply.
    data = write_jsonl(tmp_path / "two.jsonl", make_items(2))
    with FakeOpenAIServer() as srv:
        result = _run(srv, data, db_path, "--samples", "3")
    assert result.exit_code == 0, result.stderr
    stderr = " ".join(result.stderr.split())
    assert "warning: every item's samples are identical replies (2 item(s)" in stderr
    assert "docs/models.md" in stderr


def test_samples_that_differ_are_not_flagged(tmp_path: Path, db_path: Path) -> None:
    data = write_jsonl(tmp_path / "two.jsonl", make_items(2))
    count = iter(range(10_000))

    def sampling(body: dict) -> dict:
        return pdsqi9_scores(f"{_last_user_text(body)} {next(count)}")

    with FakeOpenAIServer(sampling) as srv:
        result = _run(srv, data, db_path, "--samples", "3")
    assert result.exit_code == 0, result.stderr
    assert "identical replies" not in result.stderr


@pytest.mark.parametrize(
    ("model", "approximate"),
    [("openai/SmolLM2-135M-Instruct", True), ("anthropic/claude-sonnet-4-5", True),
     ("openai/gpt-4o-mini", False)],
)  # fmt: skip
def test_dry_run_says_when_token_counts_are_approximate(
    tmp_path: Path, model: str, approximate: bool
) -> None:
    data = write_jsonl(tmp_path / "two.jsonl", make_items(2))
    result = invoke(
        "run", "--data", str(data), "--model", model, "--base-url", "http://127.0.0.1:9/v1",
        "--db", str(tmp_path / "dry.duckdb"), "--dry-run",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stderr.split())
    assert "o200k_base" in out
    assert ("token counts are approximate" in out) is approximate
    if approximate:
        assert f"the tokenizer of {model} is unknown" in out


def test_judge_agree_warns_about_identical_samples(tmp_path: Path, db_path: Path) -> None:
    data = write_jsonl(tmp_path / "two.jsonl", make_items(2))
    with FakeOpenAIServer() as srv:
        run_id = _run(srv, data, db_path, "--samples", "2").stdout.strip()
    ratings = write_ratings(tmp_path / "ratings.jsonl", ratings_matching(db_path, run_id))
    assert invoke("ratings", "import", str(ratings), "--db", str(db_path)).exit_code == 0
    result = invoke("agree", run_id, "--boot", "20", "--db", str(db_path))
    assert result.exit_code == 0, result.stderr
    stderr = " ".join(result.stderr.split())
    assert "warning: every item's samples are identical replies" in stderr
    as_json = json.loads(invoke("agree", run_id, "--json", "--db", str(db_path)).stdout)
    assert any(n.startswith("judge samples: every item's samples") for n in as_json["notes"])
