"""Every registered reducer's forms agree: its Python function, its DuckDB SQL over the sorted
list (the form a run is finalised with) and, where it has one, its grouped numpy form (the form
agreement reduces raters with). Generated data: scale points, halves, ratios of small counts (a
judge's and a panel's numbers), bit for bit; arbitrary doubles in [0, 1], bit for bit for the
reducers that pick values and to 1e-12 for those that sum (DuckDB's ``favg`` sums with Kahan's
compensation, ``statistics.fmean`` exactly)."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterator, Sequence

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clinjudge.analysis._agreement import _cell_medians, _row_medians
from clinjudge.rubrics import (
    DEFAULT_REDUCER,
    Reducer,
    get_reducer,
    load_rubric,
    median_scores,
    reducer_names,
)
from clinjudge.rubrics._combine import combine_scores

NAMES = reducer_names()
PICKING = {"median", "majority"}
"""Reducers whose value is one of the values or the mean of two: exact on any doubles."""


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    yield connection
    connection.close()


def sql_values(
    con: duckdb.DuckDBPyConnection, reducer: Reducer, lists: Sequence[Sequence[float]]
) -> list[float]:
    """The reducer's SQL form over each list, as finalize_run applies it (sorted, with n)."""
    rows = con.execute(
        f"""
        SELECT {reducer.sql_over()} AS value
        FROM (SELECT k, list_sort(v, 'ASC') AS v, len(v) AS n
              FROM (SELECT unnest(range(len($lists))) AS k, unnest($lists) AS v))
        ORDER BY k
        """,
        {"lists": [[float(x) for x in values] for values in lists]},
    ).fetchall()
    return [row[0] for row in rows]


def judge_numbers(rng: random.Random) -> list[float]:
    """One attribute's numbers from 1-9 samples: scale points, halves or small ratios, with
    repeats and ties as real samples have them."""
    n = rng.randint(1, 9)
    kind = rng.choice(["binary", "likert", "halves", "ratio"])
    if kind == "binary":
        return [float(rng.randint(0, 1)) for _ in range(n)]
    if kind == "likert":
        return [float(rng.randint(1, 5)) for _ in range(n)]
    if kind == "halves":
        return [rng.randint(2, 10) / 2 for _ in range(n)]
    return [(lambda w: rng.randint(0, w) / w)(rng.randint(1, 7)) for _ in range(n)]


def _same(got: float, want: float) -> bool:
    return got.hex() == want.hex()


@pytest.mark.parametrize("name", NAMES)
def test_python_and_sql_agree_bit_for_bit_on_judge_numbers(
    con: duckdb.DuckDBPyConnection, name: str
) -> None:
    reducer = get_reducer(name)
    rng = random.Random(name)
    lists = [judge_numbers(rng) for _ in range(3000)]
    for values, got in zip(lists, sql_values(con, reducer, lists), strict=True):
        assert _same(got, reducer(values)), (values, got, reducer(values))


@pytest.mark.parametrize("name", NAMES)
def test_python_and_sql_agree_on_any_doubles(con: duckdb.DuckDBPyConnection, name: str) -> None:
    reducer = get_reducer(name)
    rng = random.Random(f"{name}-doubles")
    lists = [[rng.random() for _ in range(rng.randint(1, 12))] for _ in range(2000)]
    # Some repeats, so that a majority is not always a tie of everything.
    lists += [[*values, values[0]] for values in lists[:500]]
    for values, got in zip(lists, sql_values(con, reducer, lists), strict=True):
        want = reducer(values)
        if name in PICKING:
            assert _same(got, want), (values, got, want)
        else:
            assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-300), (values, got, want)


_numbers = st.one_of(
    st.integers(0, 10).map(float),
    st.integers(0, 20).map(lambda k: k / 2),
    st.tuples(st.integers(1, 7), st.integers(0, 7)).map(lambda t: min(t[1], t[0]) / t[0]),
)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(_numbers, min_size=1, max_size=12), name=st.sampled_from(NAMES))
def test_python_and_sql_agree_on_generated_samples(values: list[float], name: str) -> None:
    reducer = get_reducer(name)
    with duckdb.connect() as connection:
        [got] = sql_values(connection, reducer, [values])
    assert _same(got, reducer(values)), (values, got)
    # The order the samples come in does not matter.
    assert _same(reducer(list(reversed(values))), reducer(values))


@pytest.mark.parametrize("name", [n for n in NAMES if get_reducer(n).grouped is not None])
def test_the_grouped_form_agrees_with_python(name: str) -> None:
    reducer = get_reducer(name)
    assert reducer.grouped is not None
    rng = random.Random(name)
    groups = [judge_numbers(rng) for _ in range(500)]
    groups += [[rng.random() for _ in range(rng.randint(1, 8))] for _ in range(500)]
    values = np.array([x for g in groups for x in sorted(g)])
    counts = np.array([len(g) for g in groups])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    got = reducer.grouped(values, starts, counts)
    assert [float(x).hex() for x in got] == [reducer(g).hex() for g in groups]


def test_agreement_reduces_raters_and_cells_with_the_registry_median() -> None:
    """The agreement's medians (of human raters per unit, of a rater's repeated scores per cell)
    are the registry's median, and what np.nanmedian and statistics.median give."""
    rng = np.random.default_rng(3)
    h = rng.integers(1, 6, size=(400, 7)).astype(float)
    h[rng.random(h.shape) < 0.4] = np.nan
    h[:, 0] = rng.random(400)  # doubles too
    counts = (~np.isnan(h)).sum(axis=1)
    has = counts > 0
    got = _row_medians(h[has], counts[has])
    assert np.array_equal(got, np.nanmedian(h[has], axis=1))
    median = get_reducer(DEFAULT_REDUCER)
    assert [x.hex() for x in got] == [median(r[~np.isnan(r)].tolist()).hex() for r in h[has]]

    keys = rng.integers(0, 50, size=300)
    scores = rng.integers(1, 6, size=300).astype(float) / rng.integers(1, 3, size=300)
    cells, medians, cell_counts = _cell_medians(keys, scores)
    for cell, value, count in zip(cells, medians, cell_counts, strict=True):
        mine = scores[keys == cell].tolist()
        assert count == len(mine) and value == statistics.median(mine)


def test_the_built_in_reducers_by_hand() -> None:
    assert reducer_names()[:4] == ["median", "mean", "trimmed_mean", "majority"]
    assert get_reducer("median")([4, 1, 2, 5]) == 3.0
    assert get_reducer("mean")([1, 2, 2]) == statistics.fmean([1, 2, 2])
    # n // 5 from each end: none below 5 values, one each end from 5 to 9, two from 10.
    trimmed = get_reducer("trimmed_mean")
    assert trimmed([1, 5, 5, 5]) == 4.0
    assert trimmed([1, 4, 4, 5, 100]) == statistics.fmean([4, 4, 5])
    assert trimmed([0, 0, 3, 3, 3, 3, 3, 3, 9, 9]) == 3.0
    # The most frequent value; a tie takes the median of the tied values.
    majority = get_reducer("majority")
    assert majority([1, 4, 4, 5]) == 4.0
    assert majority([2, 4]) == 3.0
    assert majority([1, 1, 5, 5, 3]) == 3.0
    assert majority([0, 1]) == 0.5  # a binary tie, as the median's
    with pytest.raises(ValueError, match="registered reducers: median, mean, trimmed_mean"):
        get_reducer("mode")


def test_combine_scores_with_the_median_is_median_scores_and_gates_follow_the_median() -> None:
    pdsqi9 = load_rubric("pdsqi9")
    rng = random.Random(5)
    for _ in range(200):
        samples = [
            {
                a.key: None if rng.random() < 0.2 else float(rng.randint(a.min, a.max))
                for a in pdsqi9.attributes
            }
            for _ in range(rng.randint(1, 6))
        ]
        medians = median_scores(pdsqi9, samples)
        assert combine_scores(pdsqi9, samples) == medians
        for name in NAMES:
            combined = combine_scores(pdsqi9, samples, name)
            for key, value in combined.items():
                numbers = [v for s in samples if (v := s[key]) is not None]
                # Null exactly where the median is (no number, or nulled by its gate).
                want = None if medians[key] is None else get_reducer(name)(numbers)
                assert value == want, (name, key, samples)
