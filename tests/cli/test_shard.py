"""`judge run --shard i/n` and `judge db merge` from the command line."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.cli._helpers import invoke, query, scalar
from tests.fake_openai import FakeOpenAIServer

_VALUES = (
    "SELECT item_id, sample, attribute, value, final, status FROM judgments "
    "WHERE run_id = ? ORDER BY ALL"
)


def _run(items_file: Path, db: Path, *extra: str) -> str:
    result = invoke(
        "run", "--data", str(items_file), "--db", str(db), "--samples", "2", "--no-progress", *extra
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("spec", ["0/2", "3/2", "2/0", "x/2"])
def test_bad_shard_is_a_usage_error(items_file: Path, db_path: Path, spec: str) -> None:
    result = invoke(
        "run", "--data", str(items_file), "--model", "mock/judge", "--db", str(db_path),
        "--shard", spec, "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "shard" in result.stderr
    assert not db_path.exists()


def test_mock_shards_merge_into_the_unsharded_run(items_file: Path, tmp_path: Path) -> None:
    mock = ("--model", "mock/judge", "--name", "exp")
    shard_dbs = [tmp_path / f"shard_{i}.duckdb" for i in (1, 2)]
    ids = {_run(items_file, db, *mock, "--shard", f"{i}/2") for i, db in enumerate(shard_dbs, 1)}
    assert len(ids) == 1
    run_id = ids.pop()
    full_db = tmp_path / "full.duckdb"
    full_id = _run(items_file, full_db, *mock)

    merged = tmp_path / "all.duckdb"
    result = invoke("db", "merge", *map(str, shard_dbs), "--into", str(merged))
    assert result.exit_code == 0, result.stderr
    assert run_id in result.stderr
    assert "conflicting row" not in result.stderr
    assert stat.S_IMODE(merged.stat().st_mode) == 0o600
    assert query(merged, "SELECT status, n_items FROM runs") == [("completed", 6)]
    assert query(merged, _VALUES, [run_id]) == query(full_db, _VALUES, [full_id])

    # Twice: nothing added; `judge runs` and `judge export` see one run.
    again = invoke("db", "merge", *map(str, shard_dbs), "--into", str(merged))
    assert again.exit_code == 0
    assert scalar(merged, "SELECT count(*) FROM judgments") == scalar(
        full_db, "SELECT count(*) FROM judgments"
    )
    listed = invoke("runs", "list", "--db", str(merged))
    assert listed.exit_code == 0 and run_id in listed.stdout


def test_conflicts_are_reported_and_strict_fails(items_file: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    run_id = _run(items_file, a, "--model", "mock/judge", "--shard", "1/1")
    b.write_bytes(a.read_bytes())
    import duckdb

    con = duckdb.connect(str(b))
    con.execute("UPDATE judgments SET value = value + 1 WHERE final AND value IS NOT NULL")
    con.close()
    merged = tmp_path / "all.duckdb"
    result = invoke("db", "merge", str(a), str(b), "--into", str(merged))
    assert result.exit_code == 0
    assert "conflicting row(s)" in result.stderr and "first-seen row was kept" in result.stderr
    assert run_id in result.stderr
    strict = invoke("db", "merge", str(b), "--into", str(merged), "--strict")
    assert strict.exit_code == 1


def test_merge_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = invoke("db", "merge", str(tmp_path / "nope.duckdb"), "--into", str(tmp_path / "x"))
    assert result.exit_code == 2
    assert "no such database" in result.stderr


def test_fake_server_shards_merge(
    fake_openai: FakeOpenAIServer,
    items_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    remote = ("--model", "openai/local-judge", "--base-url", fake_openai.base_url)
    shard_dbs = [tmp_path / f"s{i}.duckdb" for i in (1, 2, 3)]
    ids = {
        _run(
            items_file, db, *remote, "--name", "vllm", "--shard", f"{i}/3", "--concurrency", str(i)
        )
        for i, db in enumerate(shard_dbs, 1)
    }
    assert len(ids) == 1
    run_id = ids.pop()
    assert fake_openai.request_count == 12  # 6 items x 2 samples, each sent once overall
    full_db = tmp_path / "full.duckdb"
    full_id = _run(items_file, full_db, *remote)
    merged = tmp_path / "all.duckdb"
    assert invoke("db", "merge", *map(str, shard_dbs), "--into", str(merged)).exit_code == 0
    assert query(merged, "SELECT status, n_items, simulated FROM runs") == [("completed", 6, False)]
    assert query(merged, _VALUES, [run_id]) == query(full_db, _VALUES, [full_id])
    for table in ("samples", "calls", "messages"):
        sql = f"SELECT count(*) FROM {table} WHERE run_id = ?"
        assert scalar(merged, sql, [run_id]) == scalar(full_db, sql, [full_id])
