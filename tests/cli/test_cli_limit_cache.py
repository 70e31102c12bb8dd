"""Trying a paid model on a few items first: --limit [--shuffle], and the --cache."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.cli._helpers import invoke, query, scalar
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer


@pytest.fixture
def ten_items(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "ten.jsonl", make_items(10))


def _run(data: Path, db: Path, *extra: str) -> str:
    result = invoke(
        "run", "--data", str(data), "--model", "mock/judge", "--db", str(db), "--no-progress",
        *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


def _items(db: Path, run_id: str) -> list[str]:
    rows = query(db, "SELECT item_id FROM items WHERE run_id = ? ORDER BY position", [run_id])
    return [r[0] for r in rows]


def test_limit_takes_the_first_items(ten_items: Path, db_path: Path) -> None:
    run_id = _run(ten_items, db_path, "--limit", "3")
    assert _items(db_path, run_id) == ["item-0000", "item-0001", "item-0002"]
    assert scalar(db_path, "SELECT n_items FROM runs") == 3
    assert scalar(db_path, "SELECT count(DISTINCT item_id) FROM judgments WHERE final") == 3


def test_limit_shuffle_is_a_seeded_sample(ten_items: Path, db_path: Path) -> None:
    first = _items(db_path, _run(ten_items, db_path, "--limit", "4", "--shuffle", "--seed", "7"))
    again = _items(db_path, _run(ten_items, db_path, "--limit", "4", "--shuffle", "--seed", "7"))
    other = _items(db_path, _run(ten_items, db_path, "--limit", "4", "--shuffle", "--seed", "8"))
    assert first == again
    assert len(first) == len(set(first)) == 4
    assert first != other
    expected = sorted(random.Random(7).sample(range(10), 4))
    assert first == [f"item-{k:04d}" for k in expected]


def test_shuffle_needs_limit(ten_items: Path, db_path: Path) -> None:
    result = invoke("run", "--data", str(ten_items), "--db", str(db_path), "--shuffle")
    assert result.exit_code == 2
    assert "--limit" in result.stderr


def test_cache_answers_repeats_without_calling_the_server(
    fake_openai: FakeOpenAIServer, items_file: Path, db_path: Path
) -> None:
    args = [
        "run", "--data", str(items_file), "--model", "openai/local-judge",
        "--base-url", fake_openai.base_url, "--db", str(db_path), "--samples", "2",
        "--no-progress", "--cache",
    ]  # fmt: skip
    first = invoke(*args)
    assert first.exit_code == 0, first.stderr
    assert fake_openai.request_count == 12
    second = invoke(*args)
    assert second.exit_code == 0, second.stderr
    assert fake_openai.request_count == 12  # every reply came from the cache
    first_id, second_id = first.stdout.strip(), second.stdout.strip()
    calls = query(
        db_path,
        "SELECT cached, cost_usd, prompt_tokens > 0 FROM calls WHERE run_id = ?",
        [second_id],
    )
    assert len(calls) == 12
    assert set(calls) == {(True, 0.0, True)}
    assert set(query(db_path, "SELECT cached FROM calls WHERE run_id = ?", [first_id])) == {
        (False,)
    }
    # The cached run has exactly the scores of the first one.
    scores = "SELECT item_id, sample, attribute, value FROM judgments WHERE run_id = ? ORDER BY ALL"
    assert query(db_path, scores, [first_id]) == query(db_path, scores, [second_id])


def test_without_cache_every_request_goes_out(
    fake_openai: FakeOpenAIServer, items_file: Path, db_path: Path
) -> None:
    args = [
        "run", "--data", str(items_file), "--model", "openai/local-judge",
        "--base-url", fake_openai.base_url, "--db", str(db_path), "--no-progress",
    ]  # fmt: skip
    assert invoke(*args, "--cache").exit_code == 0
    assert invoke(*args).exit_code == 0
    assert fake_openai.request_count == 12
    # A different sample number is a different request: a cached run with 2 samples sends the
    # second sample's requests.
    assert invoke(*args, "--cache", "--samples", "2").exit_code == 0
    assert fake_openai.request_count == 18


def test_summary_counts_cache_hits_apart_from_model_calls(
    fake_openai: FakeOpenAIServer, items_file: Path, db_path: Path
) -> None:
    args = [
        "run", "--data", str(items_file), "--model", "openai/local-judge",
        "--base-url", fake_openai.base_url, "--db", str(db_path), "--no-progress", "--cache",
    ]  # fmt: skip
    first = invoke(*args)
    assert first.exit_code == 0, first.stderr
    assert "; 6 model calls; cost" in first.stderr  # nothing cached yet: no cache clause
    # Sample 1 of each item is in the cache; sample 2 is a new request.
    before = fake_openai.request_count
    second = invoke(*args, "--samples", "2")
    assert second.exit_code == 0, second.stderr
    sent = fake_openai.request_count - before
    run_id = second.stdout.strip()
    cached = scalar(db_path, "SELECT count(*) FROM calls WHERE run_id = ? AND cached", [run_id])
    assert (sent, cached) == (6, 6)
    assert f"; {sent} model calls, {cached} replies from the response cache; cost" in (
        second.stderr
    )
