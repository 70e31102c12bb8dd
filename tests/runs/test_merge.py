"""Sharded runs (`--shard i/n`) and merging run databases into one."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import duckdb
import pytest

from clinjudge.orchestration import ConfigError, RunConfig
from clinjudge.orchestration._execute import execute_run
from clinjudge.orchestration._session import create_run, parse_shard, prepare_run, shard_of
from clinjudge.runs import RunStore, StoreError, merge_databases
from tests.factories import make_items, write_jsonl

# Values compared between a merged sharded run and one unsharded run (no timings, no run id).
_JUDGMENTS = (
    "SELECT item_id, sample, agent, attribute, value, final, status FROM judgments "
    "WHERE run_id = ? ORDER BY ALL"
)
_SAMPLES = (
    "SELECT item_id, sample, agent, status, raw_text FROM samples WHERE run_id = ? ORDER BY ALL"
)


def _rows(db: Path, sql: str, params: list[Any] | None = None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _run(data: Path, db: Path, shard: str | None = None, name: str | None = "exp") -> str:
    config = RunConfig.model_validate(
        {
            "data": str(data),
            "db": str(db),
            "name": name,
            "samples": 2,
            "shard": shard,
            "judge": {"model": "mock/judge"},
        }
    )
    prepared = prepare_run(config)
    with RunStore(db) as store:
        run_id = create_run(store, prepared)
        execute_run(store, run_id, prepared, show_progress=False)
    return run_id


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "items.jsonl", make_items(12))


@pytest.fixture
def shards(data: Path, tmp_path: Path) -> tuple[str, list[Path]]:
    paths = [tmp_path / f"shard_{i}.duckdb" for i in (1, 2)]
    ids = {_run(data, path, f"{i}/2") for i, path in enumerate(paths, start=1)}
    assert len(ids) == 1, "every shard of one run shares the run id"
    return ids.pop(), paths


def test_parse_shard_accepts_and_rejects() -> None:
    assert parse_shard("1/4") == (1, 4)
    assert parse_shard("4/4") == (4, 4)
    for bad in ("0/4", "5/4", "1/0", "a/b", "3"):
        with pytest.raises(ConfigError, match="shard"):
            parse_shard(bad)


def test_bad_shard_fails_before_anything_is_written(data: Path, tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    with pytest.raises(ConfigError, match="1 <= i <= n"):
        _run(data, db, "3/2")
    assert not db.exists()


def test_shard_of_is_a_stable_sha256_partition() -> None:
    ids = [item.id for item in make_items(200)]
    shards = [shard_of(i, 4) for i in ids]
    assert set(shards) == {1, 2, 3, 4}
    assert shards == [shard_of(i, 4) for i in ids]
    # Fixed values: the partition must not depend on the process (unlike Python's hash()).
    assert [shard_of(f"item-{n:04d}", 3) for n in range(6)] == [
        shard_of(f"item-{n:04d}", 3) for n in range(6)
    ]
    import hashlib

    expected = int.from_bytes(hashlib.sha256(b"item-0000").digest()[:8], "big") % 7 + 1
    assert shard_of("item-0000", 7) == expected


def test_shards_split_items_disjointly(shards: tuple[str, list[Path]], data: Path) -> None:
    run_id, paths = shards
    per_shard = [
        {r[0] for r in _rows(p, "SELECT item_id FROM items WHERE run_id = ?", [run_id])}
        for p in paths
    ]
    assert not per_shard[0] & per_shard[1]
    assert per_shard[0] | per_shard[1] == {i.id for i in make_items(12)}
    for path, ids in zip(paths, per_shard, strict=True):
        row = _rows(path, "SELECT n_items, status, config FROM runs WHERE run_id = ?", [run_id])
        assert row[0][0] == len(ids)
        assert row[0][1] == "completed"
        assert '"shard"' in row[0][2]


def test_sharded_run_id_depends_on_settings_not_on_machine(data: Path, tmp_path: Path) -> None:
    a = _run(data, tmp_path / "a.duckdb", "1/3")
    b = _run(data, tmp_path / "b.duckdb", "2/3")
    other_name = _run(data, tmp_path / "c.duckdb", "1/3", name="other")
    assert a == b
    assert a.startswith("exp-")
    assert other_name != a and other_name.startswith("other-")
    # Rerunning the same shard into the same database continues the run, nothing doubles.
    again = _run(data, tmp_path / "a.duckdb", "1/3")
    assert again == a
    assert _rows(tmp_path / "a.duckdb", "SELECT count(*) FROM runs")[0][0] == 1


def test_merged_shards_equal_one_unsharded_run(
    shards: tuple[str, list[Path]], data: Path, tmp_path: Path
) -> None:
    run_id, paths = shards
    full_db = tmp_path / "full.duckdb"
    full_id = _run(data, full_db, None)
    merged = tmp_path / "merged" / "all.duckdb"
    summary = merge_databases(paths, merged)
    assert summary.conflicts == 0
    assert summary.runs == [run_id]
    assert stat.S_IMODE(merged.stat().st_mode) == 0o600

    run = _rows(merged, "SELECT status, n_items, n_samples, finished_at FROM runs")
    assert run[0][:3] == ("completed", 12, 2)
    assert run[0][3] is not None
    shard_rows = _rows(merged, "SELECT shard, status FROM run_shards ORDER BY shard")
    assert shard_rows == [("1/2", "completed"), ("2/2", "completed")]

    items = "SELECT item_id, position, summary FROM items WHERE run_id = ? ORDER BY item_id"
    assert _rows(merged, items, [run_id]) == _rows(full_db, items, [full_id])
    assert _rows(merged, _JUDGMENTS, [run_id]) == _rows(full_db, _JUDGMENTS, [full_id])
    assert _rows(merged, _SAMPLES, [run_id]) == _rows(full_db, _SAMPLES, [full_id])
    for table in ("calls", "messages"):
        count = f"SELECT count(*) FROM {table} WHERE run_id = ?"
        assert _rows(merged, count, [run_id]) == _rows(full_db, count, [full_id])

    # The merged run resumes as one run: nothing is missing.
    from clinjudge.orchestration._session import load_stored_run, missing_work

    with RunStore(merged) as store:
        full, prepared = load_stored_run(store, run_id)
        assert len(prepared.items) == 12
        assert missing_work(store, full, prepared) == []


def test_merge_is_idempotent(shards: tuple[str, list[Path]], tmp_path: Path) -> None:
    _, paths = shards
    merged = tmp_path / "all.duckdb"
    merge_databases(paths, merged)
    counts = {t: _rows(merged, f"SELECT count(*) FROM {t}")[0][0] for t in _TABLES}
    runs = _rows(merged, "SELECT * FROM runs")
    again = merge_databases([*paths, *paths], merged)
    assert again.conflicts == 0
    assert all(t.added == 0 for t in again.tables.values())
    assert {t: _rows(merged, f"SELECT count(*) FROM {t}")[0][0] for t in _TABLES} == counts
    assert _rows(merged, "SELECT * FROM runs") == runs

    # Merging a merged database into another one also adds nothing new.
    other = tmp_path / "other.duckdb"
    merge_databases([paths[0]], other)
    partial = _rows(other, "SELECT status, n_items FROM runs")[0]
    assert partial[0] == "incomplete"  # shard 2/2 is not there yet
    merge_databases([merged], other)
    assert _rows(other, "SELECT status, n_items FROM runs")[0] == ("completed", 12)


_TABLES = ("runs", "items", "samples", "judgments", "calls", "messages", "run_shards")


def test_unfinished_shard_keeps_the_run_unfinished(
    shards: tuple[str, list[Path]], tmp_path: Path
) -> None:
    run_id, paths = shards
    con = duckdb.connect(str(paths[1]))
    con.execute("UPDATE runs SET status = 'interrupted', finished_at = NULL")
    con.close()
    merged = tmp_path / "all.duckdb"
    merge_databases(paths, merged)
    assert _rows(merged, "SELECT status, finished_at FROM runs") == [("interrupted", None)]
    # Once the shard completes, merging it again completes the run.
    con = duckdb.connect(str(paths[1]))
    con.execute("UPDATE runs SET status = 'completed', finished_at = now()")
    con.close()
    merge_databases([paths[1]], merged)
    status, finished = _rows(merged, "SELECT status, finished_at FROM runs")[0]
    assert status == "completed" and finished is not None


def test_conflicts_are_reported_and_first_row_kept(
    shards: tuple[str, list[Path]], tmp_path: Path
) -> None:
    run_id, paths = shards
    altered = tmp_path / "altered.duckdb"
    altered.write_bytes(paths[0].read_bytes())
    con = duckdb.connect(str(altered))
    con.execute("UPDATE judgments SET value = value + 1 WHERE final AND value IS NOT NULL")
    n_final = con.execute("SELECT count(*) FROM judgments WHERE final AND value IS NOT NULL")
    n_final = n_final.fetchone()[0]
    con.close()
    merged = tmp_path / "all.duckdb"
    merge_databases(paths, merged)
    before = _rows(merged, _JUDGMENTS, [run_id])
    summary = merge_databases([altered], merged)
    assert summary.tables["judgments"].conflicts == n_final
    assert summary.conflicts == n_final
    assert summary.tables["judgments"].added == 0
    examples = summary.tables["judgments"].examples
    assert 0 < len(examples) <= 5 and run_id in examples[0] and "altered.duckdb" in examples[0]
    assert _rows(merged, _JUDGMENTS, [run_id]) == before


def test_human_ratings_and_unknown_tables_are_copied(tmp_path: Path) -> None:
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    for path, score in ((a, 4.0), (b, 2.0)):
        with RunStore(path) as store:
            store.insert_rows(
                "human_ratings",
                [
                    {"item_id": "x", "rater_id": "r1", "attribute": "accurate", "score": score},
                    {"item_id": str(path.stem), "rater_id": "r1", "attribute": "a", "score": 1.0},
                ],
            )
            store.con.execute("CREATE TABLE notes_extra (run_id VARCHAR, claim VARCHAR)")
            store.con.execute("INSERT INTO notes_extra VALUES ('r', ?)", [path.stem])
    merged = tmp_path / "all.duckdb"
    summary = merge_databases([a, b], merged)
    assert summary.tables["human_ratings"].conflicts == 1
    assert _rows(merged, "SELECT score FROM human_ratings WHERE item_id = 'x'") == [(4.0,)]
    assert _rows(merged, "SELECT count(*) FROM human_ratings") == [(3,)]
    assert _rows(merged, "SELECT claim FROM notes_extra ORDER BY claim") == [("a",), ("b",)]
    merge_databases([a, b], merged)  # no key: rows already present are not copied again
    assert _rows(merged, "SELECT count(*) FROM notes_extra") == [(2,)]


def test_merge_errors(tmp_path: Path, shards: tuple[str, list[Path]]) -> None:
    with pytest.raises(StoreError, match="no such database"):
        merge_databases([tmp_path / "missing.duckdb"], tmp_path / "all.duckdb")
    with pytest.raises(StoreError, match="into itself"):
        merge_databases([shards[1][0]], shards[1][0])
    with pytest.raises(StoreError, match="nothing to merge"):
        merge_databases([], tmp_path / "all.duckdb")
