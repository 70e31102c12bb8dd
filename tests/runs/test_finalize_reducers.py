"""A run's reducer (``RunConfig.reduce``, ``--reduce``) makes its final scores, in DuckDB
(``finalize_run``) and in Python (``final_rows``) alike; the default, the median, leaves the
rows, the stored config and a sharded run's id as they were (the median's rows are checked
against an independently written median in tests/runs/test_finalize_sql.py).

The rules for another reducer: gates follow the median of the valid samples, as for the
median; every attribute left standing is the reducer's value over the samples that gave a
number; the rationale reads "<reducer> of N valid sample(s)" (plus ", K failed")."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import clinjudge
from clinjudge.orchestration import ConfigError, RunConfig
from clinjudge.rubrics import Rubric, get_reducer, reducer_names
from clinjudge.runs import RunStore, finalize_run
from tests.factories import make_items, write_jsonl
from tests.runs.test_finalize_sql import (
    BACKWARDS,
    RUBRICS,
    Item,
    Values,
    _check_run,
    python_path_rows,
    random_item,
    reference_rows,
    store_item,
    stored_finals,
)
from tests.runs.test_finalize_sql import _same as same_rows

OTHERS = [name for name in reducer_names() if name != "median"]


def reduced_reference(name: str):
    """The final rows of one item by the rules above: the median reference's gates, nulls and
    texts, with the reducer's values (its Python form) where the median stands."""

    def rows(rubric: Rubric, run_id: str, item_id: str, samples: Item) -> list[tuple]:
        valid = [s for s in samples if s is not None]
        out = []
        for row in reference_rows(rubric, run_id, item_id, samples):
            key, median, status, rationale = row[4], row[5], row[7], row[9]
            if status != "ok":
                out.append(row)
                continue
            numbers = [float(v) for s in valid if (v := s.get(key)) is not None]
            value = None if median is None else get_reducer(name)(numbers)
            assert rationale.startswith("median of ")
            text = name + rationale.removeprefix("median")
            out.append((*row[:5], value, *row[6:9], text))
        return out

    return rows


def python_rows(name: str):
    """``final_rows`` with the reducer (as stored: numbers come back as floats)."""

    def rows(rubric: Rubric, run_id: str, item_id: str, samples: Item) -> list[tuple]:
        from clinjudge.runs._aggregate import final_rows

        valid = [
            {k: None if v is None else float(v) for k, v in s.items()}
            for s in samples
            if s is not None
        ]
        got = final_rows(run_id, item_id, rubric, valid, len(samples) - len(valid), name)
        columns = "run_id item_id sample agent attribute value final status error rationale"
        return [tuple(row[c] for c in columns.split()) for row in got]

    return rows


@pytest.mark.parametrize("name", OTHERS)
@pytest.mark.parametrize("rubric_name", ["pdsqi9", "chained", "gate_at_3", "doclens"])
def test_finalize_with_a_reducer_matches_the_rules(
    db_path: Path, rubric_name: str, name: str
) -> None:
    rubric = RUBRICS[rubric_name]
    rng = random.Random(f"{rubric_name}-{name}")
    n_samples = rng.randint(3, 7)
    plan = {f"item-{k:03d}": random_item(rng, rubric, n_samples) for k in range(30)}
    with RunStore(db_path) as store:
        for item_id, samples in plan.items():
            store_item(store, "r", item_id, samples, "judge")
        assert finalize_run(store, "r", rubric, n_samples, reducer=name) == len(plan)
        _check_run(store, "r", rubric, plan, reduced_reference(name))
        # final_rows states the same rules in Python.
        _check_run(store, "r", rubric, plan, python_rows(name))


@pytest.mark.parametrize("name", OTHERS)
def test_a_gate_after_the_attribute_it_gates_with_a_reducer(db_path: Path, name: str) -> None:
    rng = random.Random(name)
    plan = {f"i{k:03d}": random_item(rng, BACKWARDS, 5) for k in range(40)}
    with RunStore(db_path) as store:
        for item_id, samples in plan.items():
            store_item(store, "r", item_id, samples, "judge")
        assert finalize_run(store, "r", BACKWARDS, 5, reducer=name) == len(plan)
        _check_run(store, "r", BACKWARDS, plan, python_rows(name))


def test_the_median_by_name_is_the_default(db_path: Path) -> None:
    rubric = RUBRICS["pdsqi9"]
    rng = random.Random(11)
    plan = {f"i{k:02d}": random_item(rng, rubric, 4) for k in range(30)}
    with RunStore(db_path) as store:
        for item_id, samples in plan.items():
            store_item(store, "a", item_id, samples, "judge")
            store_item(store, "b", item_id, samples, "judge")
        finalize_run(store, "a", rubric, 4)
        finalize_run(store, "b", rubric, 4, reducer="median")
        a, b = stored_finals(store, "a"), stored_finals(store, "b")
    for item_id, samples in plan.items():
        want = reference_rows(rubric, "a", item_id, samples)
        assert same_rows(a[item_id], want)
        assert same_rows([("a", *row[1:]) for row in b[item_id]], want)
        assert same_rows(python_path_rows(rubric, "a", item_id, samples), want)


def test_by_hand_mean_of_a_gated_rubric(db_path: Path) -> None:
    pdsqi9 = RUBRICS["pdsqi9"]
    base: Values = {a.key: 3 for a in pdsqi9.attributes}
    samples: Item = [
        {**base, "accurate": 1, "abstraction": 1, "synthesized": 2},
        {**base, "accurate": 2, "abstraction": 1, "synthesized": 5},
        {**base, "accurate": 5, "abstraction": 0, "synthesized": None},
        None,
    ]
    with RunStore(db_path) as store:
        store_item(store, "r", "a", samples, "judge")
        finalize_run(store, "r", pdsqi9, 4, reducer="mean")
        finals = {row[4]: row for row in stored_finals(store, "r")["a"]}
    assert finals["accurate"][5] == pytest.approx(8 / 3)
    # The gate follows the median (1: abstraction needed), its value is the mean.
    assert finals["abstraction"][5] == pytest.approx(2 / 3)
    assert finals["synthesized"][5] == 3.5
    assert finals["accurate"][9] == "mean of 3 valid sample(s), 1 failed"


def test_reduce_is_checked_and_the_median_is_not_stored() -> None:
    assert RunConfig().reduce is None and RunConfig().reducer == "median"
    median = RunConfig(reduce="median")
    assert median.reduce is None
    assert "reduce" not in median.model_dump(mode="json", exclude_none=True)
    assert RunConfig(reduce="trimmed_mean").reducer == "trimmed_mean"
    with pytest.raises(ValueError, match="unknown reducer 'mode'; registered reducers"):
        RunConfig(reduce="mode")
    assert RunConfig(panel_aggregate="majority").panel_aggregate == "majority"
    with pytest.raises(ValueError, match="unknown reducer 'max'"):
        RunConfig(panel_aggregate="max")


def test_a_run_reduces_with_its_stored_reducer_also_when_resumed(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(4))
    db = tmp_path / "reduce.duckdb"
    with pytest.raises(ConfigError, match="unknown reducer"):
        clinjudge.evaluate(data, model="mock/judge", db=db, samples=3, reduce="mode")
    first = clinjudge.evaluate(data, model="mock/judge", db=db, samples=3, reduce="mean")
    assert first.status == "completed"
    with RunStore(db) as store:  # a crash lost an item's last sample and its finals
        store.con.execute(
            "DELETE FROM samples WHERE run_id = ? AND item_id = 'item-0002' AND sample = 3",
            [first.run_id],
        )
        store.con.execute(
            "DELETE FROM judgments WHERE run_id = ? AND item_id = 'item-0002' "
            "AND (final OR sample = 3)",
            [first.run_id],
        )
        store.set_run_status(first.run_id, "interrupted")
    assert clinjudge.load_run(first.run_id, db=db).info["config"]["reduce"] == "mean"
    again = clinjudge.resume(first.run_id, db=db)
    assert again.status == "completed"
    with RunStore(db, read_only=True) as store:
        finals = store.query(
            "SELECT item_id, attribute, value, rationale FROM judgments "
            "WHERE run_id = ? AND final ORDER BY item_id, attribute",
            [first.run_id],
        )
        samples = store.query(
            "SELECT item_id, attribute, value FROM judgments j WHERE run_id = ? AND NOT final "
            "AND agent = 'judge' AND status = 'ok' AND value IS NOT NULL",
            [first.run_id],
        )
    assert {r["rationale"] for r in finals} == {"mean of 3 valid sample(s)"}
    by_cell: dict[tuple[str, str], list[float]] = {}
    for row in samples:
        by_cell.setdefault((row["item_id"], row["attribute"]), []).append(row["value"])
    for row in finals:
        numbers = by_cell.get((row["item_id"], row["attribute"]))
        if row["value"] is not None:
            assert numbers and row["value"] == get_reducer("mean")(numbers)
