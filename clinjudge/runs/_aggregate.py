"""Final per-item scores: the valid samples reduced (by default to their median), attribute
by attribute.

Rules (documented in the README):
- failed samples are left out; an item whose samples all failed gets a failed final row;
- the median of an even number of values is the mean of the middle two, so it can be x.5;
- a gated attribute (PDSQI-9 ``synthesized``) is null in the final when the final value of its
  gate equals the gate's null value (the majority of valid samples said no abstraction was
  needed); otherwise it is the median of the samples that gave a number. A tie on a binary gate
  (median 0.5) counts as "needed".
- another reducer than the median (``RunConfig.reduce``, one of ``rubrics.reducer_names()``)
  gives the values instead of the median; gates still follow the median, and the rationale
  names the reducer.

:func:`finalize_run` applies them inside DuckDB, one ``INSERT ... SELECT`` per chunk of items
(reading every judgment back into Python cost a run about 0.1 ms per judgment, #27);
:func:`final_rows` states the same rules in Python for one item.
"""

from __future__ import annotations

import contextlib
from typing import Any

import duckdb

from clinjudge.rubrics import DEFAULT_REDUCER, Rubric, combine_scores, get_reducer
from clinjudge.runs._store import FINAL_SAMPLE, RunStore, _owner_only_files

FINAL_AGENT = "final"

FINALIZE_CHUNK = 5000
"""Items whose final rows :func:`finalize_run` computes and writes in one statement."""

_TODO = "_clinjudge_finalize_todo"
"""Temporary table (this connection's) of the items one :func:`finalize_run` call finalises."""


def final_rows(
    run_id: str,
    item_id: str,
    rubric: Rubric,
    samples: list[dict[str, float | None]],
    n_failed: int,
    reducer: str = DEFAULT_REDUCER,
) -> list[dict[str, Any]]:
    """Rows of the aggregated judgment of one item.

    Args:
        run_id: The run.
        item_id: The item.
        rubric: The rubric (attribute order and gates).
        samples: Values of each valid sample.
        n_failed: How many samples failed.
        reducer: The registered reducer the samples' values are reduced with.
    """
    base = {
        "run_id": run_id,
        "item_id": item_id,
        "sample": FINAL_SAMPLE,
        "agent": FINAL_AGENT,
        "final": True,
    }
    if not samples:
        error = f"all {n_failed} sample(s) failed"
        return [
            {
                **base,
                "attribute": key,
                "value": None,
                "status": "failed",
                "error": error,
                "rationale": None,
            }
            for key in rubric.keys
        ]
    finals = combine_scores(rubric, samples, reducer)
    note = f"{reducer} of {len(samples)} valid sample(s)" + (
        f", {n_failed} failed" if n_failed else ""
    )
    return [
        {
            **base,
            "attribute": key,
            "value": finals[key],
            "status": "ok",
            "error": None,
            "rationale": note,
        }
        for key in rubric.keys
    ]


def finalize_run(
    store: RunStore,
    run_id: str,
    rubric: Rubric,
    n_samples: int,
    agent: str = "judge",
    *,
    drop_suspect: bool = False,
    reducer: str = DEFAULT_REDUCER,
) -> int:
    """Write final rows for every item whose samples are all done and that has no final yet.

    Args:
        store: The run store.
        run_id: The run.
        rubric: The run's rubric.
        n_samples: Samples per item.
        agent: The agent whose per-sample verdicts are aggregated (the mode's deciding agent).
        drop_suspect: Leave out valid samples that carry a flag in ``quality_flags`` (worked
            out before this is called).
        reducer: The registered reducer of the samples' values (``RunConfig.reduce``).

    Returns:
        Number of items finalised.
    """
    # The items to finalise, numbered, stay in DuckDB, as do their medians: under the store's
    # bounded cache a run's memory does not grow with its items.
    with store.bounded_cache():
        _execute(
            store,
            f"""
            CREATE OR REPLACE TEMPORARY TABLE {_TODO} AS
            SELECT item_id,
                   count(*) FILTER (WHERE status = 'ok' AND NOT suspect) AS n_ok,
                   count(*) FILTER (WHERE status IS DISTINCT FROM 'ok') AS n_failed,
                   count(*) FILTER (WHERE status = 'ok' AND suspect) AS n_suspect,
                   list(sample) FILTER (WHERE status = 'ok' AND NOT suspect) AS ok_samples,
                   row_number() OVER (ORDER BY item_id) AS ord
            FROM (
                SELECT s.item_id, s.sample, s.status,
                       $drop AND EXISTS (
                           SELECT 1 FROM quality_flags f
                           WHERE f.run_id = $run AND f.item_id = s.item_id
                             AND f.sample = s.sample AND f.agent = s.agent) AS suspect
                FROM samples s
                WHERE s.run_id = $run AND s.sample > 0 AND s.agent = $agent
                  AND s.item_id NOT IN (
                      SELECT item_id FROM judgments WHERE run_id = $run AND final))
            GROUP BY item_id
            HAVING count(*) >= $n_samples
            """,
            {"run": run_id, "agent": agent, "n_samples": n_samples, "drop": drop_suspect},
        )
        try:
            row = store.con.execute(f"SELECT count(*) FROM {_TODO}").fetchone()
            complete = int(row[0]) if row else 0
            sql = _finals_sql(rubric, reducer)
            # A chunk at a time, each its own statement: an item's final rows go in together;
            # items not finalised yet (a run killed meanwhile) are found again on the next call.
            for start in range(0, complete, FINALIZE_CHUNK):
                params = {"run": run_id, "agent": agent, "lo": start, "hi": start + FINALIZE_CHUNK}
                _execute(store, sql, params)
        finally:
            with contextlib.suppress(duckdb.Error):  # a failed connection: the table goes too
                store.con.execute(f"DROP TABLE IF EXISTS {_TODO}")
    return complete


def _execute(store: RunStore, sql: str, params: dict[str, Any]) -> None:
    """Run one statement (under the store's bounded cache, as its batch writes are)."""
    store.lift_bound_on_overflow(lambda: _statement(store, sql, params))


def _statement(store: RunStore, sql: str, params: dict[str, Any]) -> None:
    with _owner_only_files():
        store.con.execute(sql, params)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _finals_sql(rubric: Rubric, reducer: str = DEFAULT_REDUCER) -> str:
    """The ``INSERT ... SELECT`` writing the final rows of the todo items numbered in
    (``$lo``, ``$hi``], with :func:`final_rows`'s values, statuses and texts, in its order."""
    keys = rubric.keys
    reduced = reducer != DEFAULT_REDUCER
    column = {key: f"m{n}" for n, key in enumerate(keys)}
    # Gates applied in attribute order, each reading its gate's value as it stands then: the
    # order median_scores nulls them in, also when a gate is itself gated. A gate's decision
    # reads the medians (combine_scores' rule); another reducer's values (columns r0...) are
    # then nulled where the median was.
    value = dict(column)
    for attribute in rubric.attributes:
        gate = attribute.gate
        if gate is not None:
            value[attribute.key] = (
                f"CASE WHEN ({value[gate.attribute]}) = {int(gate.null_when)} THEN NULL "
                f"ELSE {value[attribute.key]} END"
            )
    if reduced:
        value = {
            key: f"CASE WHEN ({value[key]}) IS NULL THEN NULL ELSE r{n} END"
            for n, key in enumerate(keys)
        }
    pivot = ",\n               ".join(
        f"any_value(med) FILTER (WHERE attribute = {_literal(key)}) AS {column[key]}"
        + (
            f", any_value(red) FILTER (WHERE attribute = {_literal(key)}) AS r{n}"
            if reduced
            else ""
        )
        for n, key in enumerate(keys)
    )
    reduction = f",\n               {get_reducer(reducer).sql_over()} AS red" if reduced else ""
    label = _literal(f"{reducer} of ")
    names = ", ".join(_literal(key) for key in keys)
    values = ", ".join(f"CAST({value[key]} AS DOUBLE)" for key in keys)
    return f"""
    INSERT INTO judgments (run_id, item_id, sample, agent, attribute, value, final, status,
                           error, rationale)
    WITH todo AS (
        SELECT item_id, ok_samples, ord,
               CASE WHEN n_ok > 0 THEN 'ok' ELSE 'failed' END AS status,
               CASE WHEN n_ok = 0 AND n_suspect = 0
                    THEN 'all ' || CAST(n_failed AS VARCHAR) || ' sample(s) failed'
                    WHEN n_ok = 0
                    THEN 'no sample kept: ' || CAST(n_suspect AS VARCHAR)
                         || ' suspect (dropped), ' || CAST(n_failed AS VARCHAR) || ' failed'
                    END AS error,
               CASE WHEN n_ok > 0
                    THEN {label} || CAST(n_ok AS VARCHAR) || ' valid sample(s)'
                         || CASE WHEN n_failed > 0 THEN ', ' || CAST(n_failed AS VARCHAR)
                                 || ' failed' ELSE '' END
                         || CASE WHEN n_suspect > 0 THEN ', ' || CAST(n_suspect AS VARCHAR)
                                 || ' suspect dropped' ELSE '' END
                    END AS rationale
        FROM {_TODO}
        WHERE ord > $lo AND ord <= $hi
    ),
    sorted AS (
        SELECT j.item_id, j.attribute, list_sort(list(j.value), 'ASC') AS v, len(v) AS n
        FROM judgments j JOIN todo t ON j.item_id = t.item_id
        WHERE j.run_id = $run AND j.agent = $agent AND NOT j.final AND j.status = 'ok'
          AND j.value IS NOT NULL AND j.attribute IN ({names})
          AND list_contains(t.ok_samples, j.sample)
        GROUP BY j.item_id, j.attribute
    ),
    medians AS (
        -- statistics.median: the middle value, or the mean of the middle two as (a + b) / 2
        SELECT item_id, attribute,
               {get_reducer(DEFAULT_REDUCER).sql_over()} AS med{reduction}
        FROM sorted
    ),
    by_item AS (
        SELECT item_id,
               {pivot}
        FROM medians GROUP BY item_id
    ),
    rows AS (
        SELECT t.ord, t.item_id, t.status, t.error, t.rationale,
               unnest(range(1, {len(keys) + 1})) AS pos,
               unnest([{names}]) AS attribute,
               unnest([{values}]) AS value
        FROM todo t LEFT JOIN by_item b ON b.item_id = t.item_id
    )
    SELECT $run, item_id, {FINAL_SAMPLE}, {_literal(FINAL_AGENT)}, attribute, value, TRUE,
           status, error, rationale
    FROM rows
    ORDER BY ord, pos
    """
