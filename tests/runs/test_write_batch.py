"""write_batch inserts without conflict handling first and, when a key exists, writes the
whole batch again ignoring existing rows (issue 27): the stored result is INSERT OR IGNORE's."""

from __future__ import annotations

import duckdb
import pytest

from clinjudge.runs import RunStore


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
