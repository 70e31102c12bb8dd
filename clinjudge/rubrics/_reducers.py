"""Reducers: how several numbers for one attribute become one, each defined once.

A reducer is one :class:`Reducer`: its Python form and its DuckDB SQL form, both over the
values sorted ascending, plus (where something needs it) a form over grouped numpy arrays.
Samples become final scores with one (``RunConfig.reduce``, ``--reduce``; in DuckDB when a run
is finalised, in Python in ``final_rows``), a panel combines its members with one
(``panel_aggregate``) and agreement takes the median of raters and of a judge's samples with the
registry's median. tests/rubrics/test_reducers.py checks that every registered reducer's forms
agree on generated data, so a new reducer is one :func:`register_reducer` call here (or in a
plugin) and nothing else.

Built in:

- ``median``: the middle value, the mean of the middle two for an even count as
  ``statistics.median`` takes it, ``(a + b) / 2`` (the default);
- ``mean``: ``statistics.fmean``;
- ``trimmed_mean``: the mean after dropping ``n // 5`` values from each end (20%, as
  ``scipy.stats.trim_mean(v, 0.2)``); with fewer than 5 values it is the mean;
- ``majority``: the most frequent value; where several are equally frequent, the median of
  those (so a 1-1 tie between 2 and 4 is 3, and a binary gate's tie is 0.5, as for the median).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

DEFAULT_REDUCER = "median"

Grouped = Callable[[Any, Any, Any], Any]
"""``(values, starts, counts) -> array``: numpy arrays, ``values`` sorted ascending within
each group, group ``g`` being ``values[starts[g] : starts[g] + counts[g]]`` (counts >= 1)."""


@dataclasses.dataclass(frozen=True)
class Reducer:
    """One way to reduce numbers to one, in every form the package needs it.

    Args:
        name: Its name (``--reduce NAME``, ``panel_aggregate``, the final rows' rationale).
        python: The reduction of a non-empty list sorted ascending.
        sql: A DuckDB expression over a sorted ``DOUBLE[]`` ``{v}`` of length ``{n}`` (both
            filled in by :meth:`sql_over`; write other braces doubled), giving the same value
            as ``python`` bit for bit. An expression, not a query (SQL stays in ``runs``), and
            without lambdas, whose syntax differs across DuckDB versions (list comprehensions
            do the same).
        grouped: Optionally the same over grouped numpy arrays (see :data:`Grouped`), for
            statistics that reduce many groups at once.
        summary: One line saying what it is, for help and docs.
    """

    name: str
    python: Callable[[Sequence[float]], float]
    sql: str
    grouped: Grouped | None = None
    summary: str = ""

    def __call__(self, values: Iterable[float]) -> float:
        """Reduce values given in any order (at least one)."""
        return self.python(sorted(values))

    def sql_over(self, v: str = "v", n: str = "n") -> str:
        """The SQL form over the sorted list expression ``v`` of length expression ``n``."""
        return self.sql.format(v=v, n=n)


_REDUCERS: dict[str, Reducer] = {}


def register_reducer(reducer: Reducer) -> None:
    """Add a reducer to the registry (replacing one of the same name).

    Args:
        reducer: The reducer.
    """
    _REDUCERS[reducer.name] = reducer


def reducer_names() -> list[str]:
    """Names of the registered reducers, in registration order."""
    return list(_REDUCERS)


def get_reducer(name: str) -> Reducer:
    """The registered reducer of this name.

    Args:
        name: Its name.

    Raises:
        ValueError: No reducer of that name (the message lists the registered ones).
    """
    try:
        return _REDUCERS[name]
    except KeyError:
        known = ", ".join(_REDUCERS)
        raise ValueError(f"unknown reducer {name!r}; registered reducers: {known}") from None


# -- the built-in reducers -----------------------------------------------------------------------

_MEDIAN_SQL = (
    "CASE WHEN {n} % 2 = 1 THEN {v}[{n} // 2 + 1] ELSE ({v}[{n} // 2] + {v}[{n} // 2 + 1]) / 2 END"
)


def _grouped_median(values: Any, starts: Any, counts: Any) -> Any:
    # The lower and upper middle of each group: the same element for an odd count.
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    return (values[lo] + values[hi]) / 2.0


def _trimmed_mean(v: Sequence[float]) -> float:
    k = len(v) // 5
    return statistics.fmean(v[k : len(v) - k])


def _majority(v: Sequence[float]) -> float:
    counts = Counter(v)
    top = max(counts.values())
    return statistics.median(sorted(x for x, c in counts.items() if c == top))


# favg sums with Kahan's compensation where fmean's math.fsum is exact, but a judge's numbers
# (scale points, halves, small ratios) sum exactly either way; the test says which data agree
# bit for bit.
_MEAN_SQL = "list_aggregate({v}, 'favg')"
_TRIMMED_SQL = "list_aggregate({v}[{n} // 5 + 1 : {n} - {n} // 5], 'favg')"
# The distinct values as often as the most frequent one, sorted, then their median. List
# comprehensions (DuckDB 0.8 on) rather than lambdas, whose syntax differs between the DuckDB
# versions the package accepts; ``[... FOR top IN [...]][1]`` binds a value once.
_COUNT = "len([y FOR y IN {v} IF y = x])"
_MAJORITY_SQL = (
    "[["
    + _MEDIAN_SQL.format(v="m", n="len(m)")
    + " FOR m IN [list_sort(list_distinct([x FOR x IN {v} IF "
    + _COUNT
    + " = top]))]][1]"
    " FOR top IN [list_max([" + _COUNT + " FOR x IN {v}])]][1]"
)

for _reducer in (
    Reducer(
        "median",
        statistics.median,
        _MEDIAN_SQL,
        _grouped_median,
        "the middle value; the mean of the middle two for an even count",
    ),
    Reducer("mean", statistics.fmean, _MEAN_SQL, summary="the arithmetic mean"),
    Reducer(
        "trimmed_mean",
        _trimmed_mean,
        _TRIMMED_SQL,
        summary="the mean without the lowest and highest n // 5 values (20% each end)",
    ),
    Reducer(
        "majority",
        _majority,
        _MAJORITY_SQL,
        summary="the most frequent value; a tie takes the median of the tied values",
    ),
):
    register_reducer(_reducer)
