"""finalize_run computes the final scores inside DuckDB (issue 27). Its rows are compared with
a reference written here from the stated rules, on many seeded random runs of every built-in
rubric and of gate shapes the built-ins lack:

- a sample counts when its status is ``ok``; failed samples are left out;
- an attribute's final value is ``statistics.median`` of the valid samples' numbers (the mean
  of the middle two for an even count), null when no valid sample gave a number;
- a gated attribute is null when the final value of its gate equals the gate's null value
  (a binary gate's tie, 0.5, counts as "needed");
- an item whose samples all failed gets failed rows with error "all N sample(s) failed";
- the rationale reads "median of N valid sample(s)", plus ", K failed" when K > 0;
- one row per rubric attribute, written in the rubric's order, under sample 0 and agent
  ``final``; items that are incomplete or already final are left alone.
"""

from __future__ import annotations

import random
import statistics
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
import pytest

import clinjudge.runs._aggregate as aggregate
from clinjudge.rubrics import Rubric, ScaleKind, builtin_rubric_names, load_rubric
from clinjudge.runs import RunStore, finalize_run
from clinjudge.runs._aggregate import final_rows

Values = dict[str, float | None]
Item = list[Values | None]
"""One item's samples in order; None is a failed sample."""

FINAL_COLUMNS = "run_id, item_id, sample, agent, attribute, value, final, status, error, rationale"


# -- rubrics --------------------------------------------------------------------------------------


def _rubric(base: str, name: str, edit: Any) -> Rubric:
    data = load_rubric(base).model_dump()
    data["name"] = name
    edit(data["attributes"])
    return Rubric.model_validate(data)


def _gate_other_value(attributes: list[dict[str, Any]]) -> None:
    # ProbSum's last attribute made nullable and gated by a Likert attribute at 3.
    attributes[-1].update(
        nullable=True,
        null_meaning="Not applicable when correctness is 3.",
        gate={"attribute": "correct", "null_when": 3},
    )


def _chained(attributes: list[dict[str, Any]]) -> None:
    # abstraction (binary) gates synthesized at 1 (not 0) and synthesized gates organized at 2:
    # each gate comes before the attribute it gates.
    by_key = {a["key"]: a for a in attributes}
    by_key["synthesized"]["gate"] = {"attribute": "abstraction", "null_when": 1}
    by_key["organized"].update(
        nullable=True,
        null_meaning="Not applicable when synthesized is 2.",
        gate={"attribute": "synthesized", "null_when": 2},
    )
    order = ["abstraction", "synthesized", "organized"]
    attributes.sort(key=lambda a: order.index(a["key"]) if a["key"] in order else -1)


def _chained_backwards(attributes: list[dict[str, Any]]) -> None:
    # The same chain with each gated attribute before its gate.
    _chained(attributes)
    attributes.reverse()


def _rubrics() -> dict[str, Rubric]:
    rubrics = {name: load_rubric(name) for name in builtin_rubric_names()}
    rubrics["gate_at_3"] = _rubric("probsum", "gate-at-3", _gate_other_value)
    rubrics["chained"] = _rubric("pdsqi9", "chained", _chained)
    return rubrics


RUBRICS = _rubrics()
BACKWARDS = _rubric("pdsqi9", "chained-backwards", _chained_backwards)


# -- the reference ------------------------------------------------------------------------------


def reference_rows(rubric: Rubric, run_id: str, item_id: str, samples: Item) -> list[tuple]:
    """The final rows of one item from the rules in the module docstring."""
    valid = [s for s in samples if s is not None]
    n_failed = len(samples) - len(valid)
    base = (run_id, item_id, 0, "final")
    if not valid:
        error = f"all {n_failed} sample(s) failed"
        return [(*base, key, None, True, "failed", error, None) for key in rubric.keys]
    medians: Values = {}
    for key in rubric.keys:
        numbers = [float(v) for s in valid if (v := s.get(key)) is not None]
        medians[key] = statistics.median(numbers) if numbers else None

    def final(key: str) -> float | None:
        gate = rubric.attribute(key).gate
        if gate is not None and final(gate.attribute) == gate.null_when:
            return None
        return medians[key]

    rationale = f"median of {len(valid)} valid sample(s)" + (
        f", {n_failed} failed" if n_failed else ""
    )
    return [(*base, key, final(key), True, "ok", None, rationale) for key in rubric.keys]


def python_path_rows(rubric: Rubric, run_id: str, item_id: str, samples: Item) -> list[tuple]:
    """The final rows ``final_rows`` (the rules in Python, ``median_scores``) gives."""
    # As stored: numbers come back from DuckDB as floats.
    valid = [
        {k: None if v is None else float(v) for k, v in s.items()} for s in samples if s is not None
    ]
    rows = final_rows(run_id, item_id, rubric, valid, len(samples) - len(valid))
    return [tuple(row[c] for c in FINAL_COLUMNS.split(", ")) for row in rows]


# -- random runs ----------------------------------------------------------------------------------


def _number(rng: random.Random, rubric: Rubric, key: str) -> float:
    attribute = rubric.attribute(key)
    if attribute.scale is ScaleKind.proportion:
        # DocLens proportions: ratios of small counts and arbitrary doubles, so that the mean of
        # the middle two is a real floating-point sum.
        if rng.random() < 0.5:
            whole = rng.randint(1, 7)
            return rng.randint(0, whole) / whole
        return rng.random()
    return rng.randint(attribute.min, attribute.max)


def random_item(rng: random.Random, rubric: Rubric, n_samples: int) -> Item:
    """``n_samples`` samples: some failed, some numbers missing, gates often tied."""
    fail = rng.choice([0.0, 0.0, 0.3, 0.6, 1.0])
    gates = {a.gate.attribute for a in rubric.attributes if a.gate is not None}
    samples: Item = []
    for _ in range(n_samples):
        if rng.random() < fail:
            samples.append(None)
            continue
        values: Values = {}
        for attribute in rubric.attributes:
            key = attribute.key
            missing = attribute.nullable or attribute.gate is not None
            if missing and rng.random() < 0.3 or rng.random() < 0.03:
                values[key] = None
            elif key in gates and attribute.scale is ScaleKind.binary:
                values[key] = rng.choice([0, 1])
            else:
                values[key] = _number(rng, rubric, key)
        samples.append(values)
    return samples


def store_item(
    store: RunStore,
    run_id: str,
    item_id: str,
    samples: Item,
    agent: str,
    first: int = 1,
) -> None:
    """Write samples ``first``.. of an item. A failed sample's judgment rows carry numbers (which
    must not count) and an ok sample has a row for a key outside the rubric (which is ignored)."""
    sample_rows, judgment_rows = [], []
    for number, values in enumerate(samples, start=first):
        status = "ok" if values is not None else "failed"
        key = {"run_id": run_id, "item_id": item_id, "sample": number, "agent": agent}
        sample_rows.append({**key, "status": status, "error": None if values else "parse"})
        stored = {**values, "not_in_rubric": 1.0} if values is not None else _FAILED_VALUES
        for attribute, value in stored.items():
            judgment_rows.append(
                {**key, "attribute": attribute, "value": value, "final": False, "status": status}
            )
    store.write_batch({"samples": sample_rows, "judgments": judgment_rows})


_FAILED_VALUES: Values = {key: 1.0 for rubric in RUBRICS.values() for key in rubric.keys}
"""What a failed sample's rows hold: a number under every key of every rubric here."""


def stored_finals(store: RunStore, run_id: str) -> dict[str, list[tuple]]:
    """Each item's final rows in the order they were written."""
    rows = store.con.execute(
        f"SELECT {FINAL_COLUMNS}, raw_value FROM judgments WHERE run_id = ? AND final "
        "ORDER BY rowid",
        [run_id],
    ).fetchall()
    out: dict[str, list[tuple]] = {}
    for row in rows:
        assert row[-1] is None, row  # no raw value in a final row
        out.setdefault(row[1], []).append(row[:-1])
    return out


def _same(got: list[tuple], want: list[tuple]) -> bool:
    """Row for row, values compared bit for bit (the hex form tells 3.5 from 3.4999...)."""

    def exact(row: tuple) -> tuple:
        return tuple(v.hex() if isinstance(v, float) else v for v in row)

    return [exact(r) for r in got] == [exact(r) for r in want]


def _check_run(store: RunStore, run_id: str, rubric: Rubric, plan: dict[str, Item], reference):
    finals = stored_finals(store, run_id)
    assert set(finals) == set(plan)
    for item_id, samples in plan.items():
        want = reference(rubric, run_id, item_id, samples)
        assert _same(finals[item_id], want), (item_id, samples, finals[item_id], want)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rubric_name", sorted(RUBRICS))
def test_random_runs_match_the_reference(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, rubric_name: str, seed: int
) -> None:
    # Items a chunk at a time, down to one: an item's rows never split across chunks.
    chunk = (1, 4, aggregate.FINALIZE_CHUNK, aggregate.FINALIZE_CHUNK)[seed]
    monkeypatch.setattr(aggregate, "FINALIZE_CHUNK", chunk)
    rubric = RUBRICS[rubric_name]
    rng = random.Random(f"{rubric_name}-{seed}")
    n_samples = rng.randint(1, 7)
    agent = rng.choice(["judge", "panel", "orchestrator"])
    plan = {f"item-{k:03d}": random_item(rng, rubric, n_samples) for k in range(25)}
    with RunStore(db_path) as store:
        for item_id, samples in plan.items():
            store_item(store, "r", item_id, samples, agent)
            # Noise the finals must not read: a panel member's verdicts, another run's samples.
            store_item(store, "r", item_id, random_item(rng, rubric, n_samples), "member_1")
            store_item(store, "other", item_id, random_item(rng, rubric, n_samples), agent)
        assert finalize_run(store, "r", rubric, n_samples, agent) == len(plan)
        _check_run(store, "r", rubric, plan, reference_rows)
        assert stored_finals(store, "other") == {}


def test_the_reference_is_the_python_path_on_these_runs() -> None:
    """The reference and ``final_rows`` (median_scores) agree: the rules stated are the rules."""
    for name, rubric in RUBRICS.items():
        rng = random.Random(name)
        for k in range(200):
            samples = random_item(rng, rubric, rng.randint(1, 7))
            want = reference_rows(rubric, "r", f"i{k}", samples)
            assert _same(python_path_rows(rubric, "r", f"i{k}", samples), want), samples


@pytest.mark.parametrize("seed", range(3))
def test_a_gate_after_the_attribute_it_gates_as_in_python(db_path: Path, seed: int) -> None:
    """Where a gated attribute comes before its gate in a chain, the final values are those
    of the Python path, which reads each gate's value as it stands at that point."""
    rng = random.Random(seed)
    plan = {f"i{k:03d}": random_item(rng, BACKWARDS, rng.randint(1, 6)) for k in range(40)}
    n_samples = max(len(s) for s in plan.values())
    with RunStore(db_path) as store:
        for item_id, samples in plan.items():
            # Items with fewer samples are padded with failed ones so every item is complete.
            store_item(store, "r", item_id, samples + [None] * (n_samples - len(samples)), "judge")
        assert finalize_run(store, "r", BACKWARDS, n_samples) == len(plan)
        padded = {i: s + [None] * (n_samples - len(s)) for i, s in plan.items()}
        _check_run(store, "r", BACKWARDS, padded, python_path_rows)


def test_gate_ties_and_nulls_by_hand(db_path: Path, pdsqi9: Rubric) -> None:
    """Worked cases of PDSQI-9's gate: a tie is "needed", a majority of 0 nulls, a gate with no
    number leaves the attribute's median."""
    base: Values = {a.key: 3 if a.scale is ScaleKind.likert else 1 for a in pdsqi9.attributes}
    plan: dict[str, Item] = {
        "tie": [{**base, "abstraction": 0, "synthesized": None}, {**base, "synthesized": 2}],
        "majority_0": [
            {**base, "abstraction": 0, "synthesized": 5},
            {**base, "abstraction": 0, "synthesized": None},
            {**base, "abstraction": 1, "synthesized": 1},
        ],
        "gate_missing": [{**base, "abstraction": None, "synthesized": 4}],
        "even": [{**base, "accurate": 2}, {**base, "accurate": 5}, None],
    }
    with RunStore(db_path) as store:
        for item_id, samples in plan.items():
            store_item(store, "r", item_id, samples + [None] * (3 - len(samples)), "judge")
        assert finalize_run(store, "r", pdsqi9, 3) == len(plan)
        finals = {i: {r[4]: r for r in rows} for i, rows in stored_finals(store, "r").items()}
    assert (finals["tie"]["abstraction"][5], finals["tie"]["synthesized"][5]) == (0.5, 2.0)
    assert finals["majority_0"]["abstraction"][5] == 0.0
    assert finals["majority_0"]["synthesized"][5] is None
    assert finals["gate_missing"]["synthesized"][5] == 4.0
    assert finals["even"]["accurate"][5] == 3.5
    assert finals["even"]["accurate"][9] == "median of 2 valid sample(s), 1 failed"


def test_only_complete_items_then_the_rest_and_nothing_twice(db_path: Path) -> None:
    """Incomplete items wait; a later call finalises them (a resumed run) and a call with
    nothing left adds nothing; an item already final is not redone when samples arrive."""
    rubric = RUBRICS["pdsqi9"]
    rng = random.Random(7)
    plan = {f"i{k:02d}": random_item(rng, rubric, 3) for k in range(30)}
    with RunStore(db_path) as store:
        for n, (item_id, samples) in enumerate(plan.items()):
            store_item(store, "r", item_id, samples[: 3 if n % 3 else 2], "judge")
        first = finalize_run(store, "r", rubric, 3)
        complete = {i for n, i in enumerate(plan) if n % 3}
        assert first == len(complete)
        assert set(stored_finals(store, "r")) == complete
        before = store.con.execute("SELECT * FROM judgments ORDER BY ALL").fetchall()
        assert finalize_run(store, "r", rubric, 3) == 0
        assert store.con.execute("SELECT * FROM judgments ORDER BY ALL").fetchall() == before

        for n, (item_id, samples) in enumerate(plan.items()):
            if not n % 3:
                store_item(store, "r", item_id, samples[2:], "judge", first=3)
        assert finalize_run(store, "r", rubric, 3) == len(plan) - len(complete)
        _check_run(store, "r", rubric, plan, reference_rows)

        # A fourth sample after the finals: the item keeps its final rows.
        store_item(store, "r", "i01", [random_item(rng, rubric, 1)[0]], "judge", first=4)
        after = stored_finals(store, "r")
        assert finalize_run(store, "r", rubric, 3) == 0
        assert stored_finals(store, "r") == after
        # No work table is left behind on the store's connection.
        assert not store.con.execute(
            "SELECT * FROM duckdb_tables() WHERE table_name = ?", [aggregate._TODO]
        ).fetchall()


def test_more_samples_than_asked_all_count(db_path: Path, pdsqi9: Rubric) -> None:
    """As before: an item with more samples stored than the run asks for (an earlier run of the
    same id with more samples) takes the median of all of them."""
    samples: Item = [
        {a.key: v if a.scale is ScaleKind.likert else 1 for a in pdsqi9.attributes}
        for v in (1, 2, 4, 5)
    ]
    with RunStore(db_path) as store:
        store_item(store, "r", "a", samples, "judge")
        assert finalize_run(store, "r", pdsqi9, 3) == 1
        _check_run(store, "r", pdsqi9, {"a": samples}, reference_rows)
        assert stored_finals(store, "r")["a"][1][5] == 3.0  # accurate: (2 + 4) / 2


def test_the_mean_of_the_middle_two_as_python_takes_it(db_path: Path) -> None:
    """(a + b) / 2 in doubles, as statistics.median: interpolating as DuckDB's median does
    (a * 0.5 + b * 0.5) loses the smallest subnormals and does not overflow where Python does."""
    doclens = RUBRICS["doclens"]
    cases = {
        "subnormal": [5e-324, 5e-324],
        "subnormals": [5e-324, 1.5e-323, 2e-323, 5e-324],
        "overflow": [1e308, 1.5e308],
        "wide": [-1e308, 1.7e308, 0.3, -2.5],
        "thirds": [1 / 3, 2 / 3, 0.1, 0.7],
    }
    plan: dict[str, Item] = {
        name: [dict.fromkeys(doclens.keys, v) for v in values] for name, values in cases.items()
    }
    with RunStore(db_path) as store:
        for item_id, samples in plan.items():
            store_item(store, "r", item_id, samples + [None] * (4 - len(samples)), "judge")
        assert finalize_run(store, "r", doclens, 4) == len(cases)
        finals = stored_finals(store, "r")
    for name, values in cases.items():
        assert [r[5] for r in finals[name]] == [statistics.median(values)] * 4, name
    assert finals["subnormal"][0][5] == 5e-324
    assert finals["overflow"][0][5] == float("inf")


def test_only_the_judgments_of_samples_recorded_ok_count(db_path: Path, pdsqi9: Rubric) -> None:
    """Numbers under a sample the samples table does not hold as ok (no samples row: not done;
    a failed row) are left out, as the Python path leaves them out."""
    values: Values = {a.key: 3 if a.scale is ScaleKind.likert else 1 for a in pdsqi9.attributes}
    stray = {"run_id": "r", "item_id": "a", "agent": "judge", "final": False, "status": "ok"}
    with RunStore(db_path) as store:
        store_item(store, "r", "a", [values, None], "judge")
        store.write_batch(
            {
                "judgments": [
                    {**stray, "sample": sample, "attribute": "accurate", "value": 5.0}
                    for sample in (-1, 9)
                ]
            }
        )
        store.con.execute(
            "UPDATE judgments SET status = 'ok', value = 5 "
            "WHERE item_id = 'a' AND sample = 2 AND attribute = 'accurate'"
        )
        assert finalize_run(store, "r", pdsqi9, 2) == 1
        finals = {r[4]: r for r in stored_finals(store, "r")["a"]}
    assert finals["accurate"][5] == 3.0
    assert finals["accurate"][9] == "median of 1 valid sample(s), 1 failed"


def test_a_statement_over_the_bounded_cache_lifts_it(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a bound DuckDB cannot work in, the statement that hit it runs again without it (as
    RunStore.write_batch does): every final is written and the store's limit is restored."""
    rubric = RUBRICS["pdsqi9"]
    rng = random.Random(11)
    plan = {f"i{k:03d}": random_item(rng, rubric, 3) for k in range(200)}
    met: list[str] = []
    statement = aggregate._statement

    def spy(store: RunStore, sql: str, params: dict[str, Any]) -> None:
        try:
            statement(store, sql, params)
        except duckdb.OutOfMemoryException:
            met.append(sql)
            raise

    monkeypatch.setattr(aggregate, "_statement", spy)
    with RunStore(db_path) as store:
        for item_id, samples in plan.items():
            store_item(store, "r", item_id, samples, "judge")
    # Opened afresh, DuckDB holds less than the bound, so the bound can be set.
    with RunStore(db_path) as store:
        limit = store.con.execute("SELECT current_setting('memory_limit')").fetchone()
        monkeypatch.setattr(store, "bounded_cache", partial(store.bounded_cache, "1MB"))
        assert finalize_run(store, "r", rubric, 3) == len(plan)
        assert met, "the bound was never hit: the test needs a smaller one"
        _check_run(store, "r", rubric, plan, reference_rows)
        assert store.con.execute("SELECT current_setting('memory_limit')").fetchone() == limit
