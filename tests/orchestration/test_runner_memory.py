"""A long run keeps no per-item objects: what a finished sample leaves is bounded by the
concurrency and the write buffer, not by the number of samples (issue 27: memory flat in the
number of items). Counted with the garbage collector, not timed. Also: the run bounds DuckDB's
cache while it writes and gives the store's memory limit back afterwards, and a batch too big
for the bound is still written."""

from __future__ import annotations

import gc
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from clinjudge.judges import SampleVerdict
from clinjudge.orchestration._context import SampleContext
from clinjudge.orchestration._sample_runner import SampleRunner
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.orchestration._runner_hooks import after_each_sample, run_on_fake_server


def _live(kinds: tuple[type, ...]) -> Counter[str]:
    gc.collect()
    return Counter(type(o).__name__ for o in gc.get_objects() if isinstance(o, kinds))


def test_a_long_run_keeps_no_objects_per_finished_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = 240
    concurrency, flush_every = 4, 16
    data = write_jsonl(tmp_path / "items.jsonl", make_items(items))
    counts: dict[int, Counter[str]] = {}
    buffered: dict[int, int] = {}

    def count(runner: SampleRunner) -> None:
        done = runner.tally.ok + runner.tally.failed
        if done in (60, items - 20):
            counts[done] = _live((SampleContext, SampleVerdict))
            buffered[done] = sum(len(rows) for rows in runner._buffer.values())

    # A small buffer, so that several batches are written between the two counts.
    after_each_sample(monkeypatch, count, flush_every=flush_every)
    tally, stored = run_on_fake_server(
        tmp_path,
        data,
        concurrency,
        "SELECT count(*) FROM samples WHERE run_id = ? AND sample > 0",
    )
    if isinstance(tally, Exception):
        raise tally
    assert tally.ok == items and stored == (items,)
    early, late = counts[60], counts[items - 20]
    # At most one context and verdict per sample in flight (the one being accepted included):
    # none left behind by the 160 samples finished between the two counts. (How many are in
    # flight at either count depends on scheduling, so the two counts are not compared.)
    for kind in ("SampleContext", "SampleVerdict"):
        assert early[kind] <= concurrency + 1, (kind, early)
        assert late[kind] <= concurrency + 1, (kind, late)
    # Rows wait in the buffer only until their batch is written.
    rows_per_sample = buffered[60] / max(1, (60 % flush_every) or flush_every)
    assert buffered[items - 20] <= (flush_every + concurrency) * max(rows_per_sample, 1) * 2
    assert _live((SampleContext, SampleVerdict))["SampleContext"] == 0


def _limit(store: RunStore) -> str:
    row = store.con.execute("SELECT current_setting('memory_limit')").fetchone()
    assert row is not None
    return str(row[0])


def test_bounded_cache_is_given_back_and_never_refuses_a_batch(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.duckdb") as store:
        before = _limit(store)
        with store.bounded_cache("64MB"):
            bounded = _limit(store)
            assert bounded != before
            with store.bounded_cache("32MB"):  # nested: the outer bound stays
                assert _limit(store) == bounded
            assert _limit(store) == bounded
            # A bound too small for the batch: DuckDB refuses it, the store lifts the bound
            # and writes it (the refused try was rolled back: no row twice).
            store.con.execute("SET memory_limit = '1MB'")
            rows = [
                {
                    "run_id": "r",
                    "item_id": f"i{n}",
                    "sample": 1,
                    "agent": "judge",
                    "seq": 0,
                    "role": "system",
                    "content": "x" * 4000 + str(n),
                }
                for n in range(3000)
            ]
            store.write_batch({"messages": rows})
            assert _limit(store) == before  # lifted
            count = store.con.execute("SELECT count(*) FROM messages").fetchone()
            assert count == (3000,)
        assert _limit(store) == before


def test_a_write_over_the_limit_without_a_bound_still_fails(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.duckdb") as store:
        store.con.execute("SET memory_limit = '1MB'")
        rows = [
            {
                "run_id": "r",
                "item_id": f"i{n}",
                "sample": 1,
                "agent": "judge",
                "seq": 0,
                "role": "system",
                "content": "x" * 4000 + str(n),
            }
            for n in range(3000)
        ]
        with pytest.raises(duckdb.OutOfMemoryException):
            store.write_batch({"messages": rows})
        assert store.con.execute("SELECT count(*) FROM messages").fetchone() == (0,)
