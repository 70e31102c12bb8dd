"""A run's items are read a chunk at a time, never held all at once (issue 27: memory flat in
the number of items): while the data is checked, while the run is created and while it is
judged, live ``Item`` objects stay bounded by the chunk, not by the number of items. The items
a run selects (shards, limit, shuffle) and the order of its work are those of the reference
procedures written here; a record that goes bad after the check leaves nothing written.
"""

from __future__ import annotations

import gc
import hashlib
import os
import random
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import clinjudge.inputs._records as records_module
from clinjudge.inputs import InputError
from clinjudge.judges import ModelSettings
from clinjudge.orchestration import (
    CircuitBreakerOpen,
    RetryPolicy,
    RunConfig,
    _session,
    create_run,
    estimate_run,
    execute_run,
    load_stored_run,
    prepare_run,
)
from clinjudge.orchestration._run_items import ITEM_CHUNK
from clinjudge.orchestration._sample_runner import SampleRunner
from clinjudge.orchestration._session import missing_work
from clinjudge.rubrics import Item
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.orchestration._runner_hooks import after_each_sample, run_on_fake_server

MOCK = ModelSettings(model="mock/judge")

# What a chunk may leave alive besides itself: the chunk being read while the last one is
# still referenced, the workers' units in flight, the test's own few.
BOUND = 2 * ITEM_CHUNK + 16


def _live_items() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Item)


def test_a_run_never_holds_all_its_items(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    count = 1500
    data = write_jsonl(tmp_path / "items.jsonl", make_items(count))
    seen: dict[str, int] = {}

    # While the data is checked: counted at the 1,200th item's rubric check.
    check = records_module.check_rubric_inputs
    checks = Counter[str]()

    def counting_check(where, item, rubric, problems):  # type: ignore[no-untyped-def]
        checks["n"] += 1
        if checks["n"] == 1200:
            seen.setdefault("check", _live_items())
        check(where, item, rubric, problems)

    monkeypatch.setattr(records_module, "check_rubric_inputs", counting_check)

    # While the run is created: counted at the 1,200th item's row.
    row = _session.item_row
    rows = Counter[str]()

    def counting_row(run_id, position, item, rubric):  # type: ignore[no-untyped-def]
        rows["n"] += 1
        if rows["n"] == 1200:
            seen["create"] = _live_items()
        return row(run_id, position, item, rubric)

    monkeypatch.setattr(_session, "item_row", counting_row)

    # While it is judged: counted when 1,200 samples are done.
    def count_judged(runner: SampleRunner) -> None:
        if runner.tally.ok + runner.tally.failed == 1200:
            seen["judge"] = _live_items()

    after_each_sample(monkeypatch, count_judged)

    def count_prepared() -> None:
        seen["prepared"] = _live_items()

    tally, stored = run_on_fake_server(
        tmp_path,
        data,
        4,
        "SELECT count(*) FROM samples WHERE run_id = ? AND sample > 0",
        on_prepared=count_prepared,
    )
    if isinstance(tally, Exception):
        raise tally
    assert tally.ok == count and stored == (count,)
    assert set(seen) == {"check", "prepared", "create", "judge"}
    # Held all at once (before streaming), each count would be 1,200 to 1,500.
    assert seen["prepared"] <= 16, seen
    for phase in ("check", "create", "judge"):
        assert seen[phase] <= BOUND, seen


@pytest.mark.parametrize("same_stamp", [True, False])
@pytest.mark.parametrize("staged", [True, False], ids=["staged", "read_again"])
def test_a_record_gone_bad_after_the_check_writes_nothing(
    tmp_path: Path, same_stamp: bool, staged: bool
) -> None:
    items = make_items(2000)
    data = write_jsonl(tmp_path / "items.jsonl", items)
    db = tmp_path / "runs.duckdb"
    config = RunConfig(data=str(data), judge=MOCK, db=str(db))
    # A shuffled sample (here: every item) is drawn after the check, so creation reads the
    # file again; otherwise the rows built during the check are written.
    prepared = prepare_run(config) if staged else prepare_run(config, limit=2000, shuffle=True)
    before = os.stat(data)
    # Line 1,990 loses its summary, well past the first chunks written.
    text = data.read_text()
    lines = text.splitlines(keepends=True)
    lines[1989] = lines[1989].replace('"summary"', '"summarx"' if same_stamp else '"s"')
    data.write_text("".join(lines))
    if same_stamp:
        # The same size and time: only reading the records again finds it, mid-transaction.
        os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    if staged and same_stamp:
        # Not read again: what is written is what was checked, line 1,990 as it was.
        with RunStore(db) as store:
            run_id = create_run(store, prepared)
            stored = store.con.execute(
                "SELECT count(*), max(CASE WHEN position = 1989 THEN summary END) FROM items "
                "WHERE run_id = ?",
                [run_id],
            ).fetchone()
        assert stored == (2000, items[1989].summary)
        return
    with RunStore(db) as store, pytest.raises(InputError) as caught:
        create_run(store, prepared)
    message = str(caught.value)
    if same_stamp:
        assert f"{data}:line 1990: field summary" in message, message
    else:
        assert "changed since its items were checked" in message
    with RunStore(db) as store:
        assert store.con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
        assert store.con.execute("SELECT count(*) FROM items").fetchone() == (0,)


def test_an_item_swapped_after_the_check_writes_nothing(tmp_path: Path) -> None:
    items = make_items(700)
    data = write_jsonl(tmp_path / "items.jsonl", items)
    db = tmp_path / "runs.duckdb"
    prepared = prepare_run(RunConfig(data=str(data), judge=MOCK, db=str(db)))
    # Valid, the same length, but another item at line 650.
    swapped = [*items[:649], items[649].model_copy(update={"id": "item-x649"}), *items[650:]]
    write_jsonl(data, swapped)
    with RunStore(db) as store, pytest.raises(InputError, match="changed since"):
        create_run(store, prepared)
    with RunStore(db) as store:
        assert store.con.execute("SELECT count(*) FROM items").fetchone() == (0,)


def test_a_late_bad_record_is_reported_with_file_line_and_field(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3000))
    with data.open("a") as handle:
        handle.write('{"id": "late", "notes": ["n"], "summary": 7}\n')
        handle.write("not json\n")
    with pytest.raises(InputError) as caught:
        prepare_run(RunConfig(data=str(data), judge=MOCK, db=str(tmp_path / "x.duckdb")))
    problems = caught.value.problems
    assert problems[0].startswith(f"{data}:line 3001: field summary")
    assert problems[1].startswith(f"{data}:line 3002: not valid JSON")
    assert not (tmp_path / "x.duckdb").exists()


def _reference_shard(item_id: str, n: int) -> int:
    # sha256 of the id, first 8 bytes big-endian, modulo n, 1-based.
    return int(hashlib.sha256(item_id.encode()).hexdigest()[:16], 16) % n + 1


@pytest.mark.parametrize(
    ("shard", "limit", "shuffle"),
    [
        (None, None, False),
        ("2/3", None, False),
        (None, 40, True),
        ("3/3", 25, False),
        ("1/3", 30, True),
    ],
)
def test_shards_limits_and_shuffles_select_the_reference_items(
    tmp_path: Path, shard: str | None, limit: int | None, shuffle: bool
) -> None:
    items = make_items(600)
    data = write_jsonl(tmp_path / "items.jsonl", items)
    config = RunConfig(
        data=str(data),
        judge=MOCK,
        db=str(tmp_path / "runs.duckdb"),
        shard=shard,
        seed=11,
        samples=2,
    )
    # The reference: shard by id hash, then the first `limit`, or `limit` drawn with the seed
    # from the shard's items, kept in dataset order.
    chosen = list(range(len(items)))
    if shard:
        i, n = (int(x) for x in shard.split("/"))
        chosen = [p for p in chosen if _reference_shard(items[p].id, n) == i]
    if limit is not None:
        picks = (
            sorted(random.Random(11).sample(range(len(chosen)), limit)) if shuffle else range(limit)
        )
        chosen = [chosen[k] for k in picks]
    prepared = prepare_run(config, limit=limit, shuffle=shuffle)
    assert len(prepared.items) == len(chosen)
    assert list(prepared.items) == [items[p] for p in chosen]
    if shard:
        assert prepared.run_id == _session.sharded_run_id(config, items, prepared.personas)
    with RunStore(config.db) as store:
        run_id = create_run(store, prepared)
        stored = store.con.execute(
            "SELECT item_id, position FROM items WHERE run_id = ? ORDER BY position", [run_id]
        ).fetchall()
        assert stored == [(items[p].id, p) for p in chosen]
        work = [(u.item, u.sample) for u in missing_work(store, run_id, prepared)]
        assert work == [(items[p], s) for s in (1, 2) for p in chosen]
        full_id, again = load_stored_run(store, run_id)
        assert list(again.items) == [items[p] for p in chosen]
        assert again.items[-1] == items[chosen[-1]]
    assert estimate_run(prepared).prompts == 2 * len(chosen)


def test_a_resumed_run_judges_the_missing_samples_in_reference_order(tmp_path: Path) -> None:
    items = make_items(ITEM_CHUNK + 60)
    data = write_jsonl(tmp_path / "items.jsonl", items)
    config = RunConfig(data=str(data), judge=MOCK, db=str(tmp_path / "runs.duckdb"), samples=2)
    prepared = prepare_run(config)
    with RunStore(config.db) as store:
        run_id = create_run(store, prepared)
        execute_run(store, run_id, prepared, show_progress=False)
        # Drop some samples (across the chunk boundary), as a run stopped midway would lack.
        gone = [(items[k].id, s) for s, k in [(1, 3), (1, ITEM_CHUNK + 1), (2, 0), (2, 300)]]
        for item_id, sample in gone:
            for table in ("samples", "judgments"):
                store.con.execute(
                    f"DELETE FROM {table} WHERE run_id = ? AND item_id = ? AND sample = ?",
                    [run_id, item_id, sample],
                )
        full_id, stored = load_stored_run(store, run_id)
        work = [(u.item.id, u.sample) for u in missing_work(store, full_id, stored)]
        assert work == sorted(gone, key=lambda g: (g[1], [i.id for i in items].index(g[0])))
        assert [u.item for u in missing_work(store, full_id, stored)][1] == items[ITEM_CHUNK + 1]
        execute_run(store, full_id, stored, show_progress=False)
        assert missing_work(store, full_id, stored) == []


def test_a_run_stopped_midway_leaves_the_database_closed(tmp_path: Path) -> None:
    # The breaker stops the run inside the first chunk; its exception (kept here, as a
    # notebook keeps the last one) references the runner's frames and so the unfinished item
    # reading, whose connection is the store's cursor: closing the store must release the file.
    data = write_jsonl(tmp_path / "items.jsonl", make_items(ITEM_CHUNK + 40))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    judge = ModelSettings(
        model="openai/local-judge", base_url=f"http://127.0.0.1:{port}/v1", timeout=2
    )
    config = RunConfig(
        data=str(data),
        judge=judge,
        db=str(tmp_path / "runs.duckdb"),
        concurrency=2,
        retry=RetryPolicy(max_attempts=1, initial_wait=0.01, max_wait=0.01, jitter=0.0),
        max_consecutive_failures=3,
    )
    prepared = prepare_run(config)
    with RunStore(config.db) as store:
        run_id = create_run(store, prepared)
        with pytest.raises(CircuitBreakerOpen) as caught:
            execute_run(store, run_id, prepared, show_progress=False)
    assert caught.value is not None
    # Another process can open the file for writing: nothing here holds it.
    opened = subprocess.run(
        [sys.executable, "-c", f"import duckdb; duckdb.connect({config.db!r}).close()"],
        capture_output=True,
        text=True,
    )
    assert opened.returncode == 0, opened.stderr
