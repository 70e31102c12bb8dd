"""write_batch inserts without conflict handling first and, when a key exists, writes the
whole batch again ignoring existing rows (issue 27): the stored result is INSERT OR IGNORE's."""

from __future__ import annotations

import duckdb
import pytest

from clinjudge.runs import RunStore, StoreError


def _sample(item: str, status: str = "ok") -> dict[str, object]:
    return {"run_id": "r", "item_id": item, "sample": 1, "agent": "judge", "status": status}


def _judgment(item: str, value: object) -> dict[str, object]:
    return {
        "run_id": "r",
        "item_id": item,
        "sample": 1,
        "agent": "judge",
        "attribute": "accurate",
        "value": value,
        "final": False,
        "status": "ok",
    }


def _rows(store: RunStore, sql: str) -> list[tuple[object, ...]]:
    return store.con.execute(sql).fetchall()


def test_existing_keys_are_kept_and_the_rest_is_written(tmp_path):
    with RunStore(tmp_path / "s.duckdb") as store:
        store.write_batch({"samples": [_sample("a")], "judgments": [_judgment("a", 3)]})
        # "a" again (as a resumed run after a kill could send it), with other values, plus new
        # rows in two tables: the stored "a" rows stay as they were, the new ones are added.
        store.write_batch(
            {
                "samples": [_sample("a", "failed"), _sample("b")],
                "judgments": [_judgment("a", 1), _judgment("b", 4)],
            }
        )
        assert _rows(store, "SELECT item_id, status FROM samples ORDER BY 1") == [
            ("a", "ok"),
            ("b", "ok"),
        ]
        assert _rows(store, "SELECT item_id, value FROM judgments ORDER BY 1") == [
            ("a", 3.0),
            ("b", 4.0),
        ]


def test_a_key_twice_in_one_batch_keeps_the_first(tmp_path):
    with RunStore(tmp_path / "s.duckdb") as store:
        store.write_batch({"samples": [_sample("k"), _sample("k", "failed"), _sample("m")]})
        assert _rows(store, "SELECT item_id, status FROM samples ORDER BY 1") == [
            ("k", "ok"),
            ("m", "ok"),
        ]


def test_a_refused_batch_leaves_nothing_of_itself(tmp_path):
    with RunStore(tmp_path / "s.duckdb") as store:
        store.write_batch({"samples": [_sample("a")]})
        # An existing key sends the batch down the second path; a value the database refuses
        # there must still roll the whole batch back.
        with pytest.raises(duckdb.Error):
            store.write_batch(
                {
                    "samples": [_sample("a"), _sample("c")],
                    "judgments": [_judgment("c", "not a number")],
                }
            )
        assert _rows(store, "SELECT item_id FROM samples") == [("a",)]
        assert _rows(store, "SELECT count(*) FROM judgments") == [(0,)]
        # The store still takes writes, and insert_rows on its own still ignores existing keys.
        store.insert_rows("samples", [_sample("a", "failed"), _sample("d")])
        assert _rows(store, "SELECT item_id, status FROM samples ORDER BY 1") == [
            ("a", "ok"),
            ("d", "ok"),
        ]


_EVIL_SAMPLE = (
    "SELECT 'r' AS run_id, 'evil' AS item_id, 1 AS sample, 'judge' AS agent, 'ok' AS status"
)


@pytest.mark.parametrize(
    "kind, name",
    [("TABLE", "_clinjudge_incoming"), ("VIEW", "_CLINJUDGE_INCOMING")],
    ids=["table", "view in capitals"],
)
def test_a_database_with_a_table_named_like_the_incoming_rows_is_refused(tmp_path, kind, name):
    # Batches are read by DuckDB from a Python local of that name, which a table or view of
    # the database would take the place of: every insert would copy its rows instead.
    path = tmp_path / "s.duckdb"
    with RunStore(path):
        pass
    with duckdb.connect(str(path)) as con:
        con.execute(f"CREATE {kind} {name} AS {_EVIL_SAMPLE}")
    with pytest.raises(StoreError, match=r"(?i)_clinjudge_incoming.*reserves") as caught:
        RunStore(path)
    assert str(path) in str(caught.value)
    # Reading it changes nothing and writes nothing: allowed.
    with RunStore(path, read_only=True) as store:
        assert store.query("SELECT count(*) AS n FROM samples") == [{"n": 0}]
    # Without it the store writes the batch's own rows.
    with duckdb.connect(str(path)) as con:
        con.execute(f"DROP {kind} {name}")
    with RunStore(path) as store:
        store.write_batch({"samples": [_sample("a")]})
        assert _rows(store, "SELECT item_id FROM samples") == [("a",)]
