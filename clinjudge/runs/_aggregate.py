"""Final per-item scores: the median of the valid samples, attribute by attribute.

Rules (documented in the README):
- failed samples are left out; an item whose samples all failed gets a failed final row;
- the median of an even number of values is the mean of the middle two, so it can be x.5;
- a gated attribute (PDSQI-9 ``synthesized``) is null in the final when the final value of its
  gate equals the gate's null value (the majority of valid samples said no abstraction was
  needed); otherwise it is the median of the samples that gave a number. A tie on a binary gate
  (median 0.5) counts as "needed".
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from clinjudge.rubrics import Rubric, median_scores
from clinjudge.runs._store import FINAL_SAMPLE, RunStore

FINAL_AGENT = "final"

FINALIZE_CHUNK = 500
"""Items whose judgments :func:`finalize_run` reads and aggregates at a time."""


def final_rows(
    run_id: str, item_id: str, rubric: Rubric, samples: list[dict[str, float | None]], n_failed: int
) -> list[dict[str, Any]]:
    """Rows of the aggregated judgment of one item.

    Args:
        run_id: The run.
        item_id: The item.
        rubric: The rubric (attribute order and gates).
        samples: Values of each valid sample.
        n_failed: How many samples failed.
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
    finals = median_scores(rubric, samples)
    note = f"median of {len(samples)} valid sample(s)" + (
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
    store: RunStore, run_id: str, rubric: Rubric, n_samples: int, agent: str = "judge"
) -> int:
    """Write final rows for every item whose samples are all done and that has no final yet.

    Args:
        store: The run store.
        run_id: The run.
        rubric: The run's rubric.
        n_samples: Samples per item.
        agent: The agent whose per-sample verdicts are aggregated (the mode's deciding agent).

    Returns:
        Number of items finalised.
    """
    # Plain tuples, not store.query's dicts: a run's every judgment passes through here.
    done = store.con.execute(
        """
        SELECT s.item_id, s.sample, s.status FROM samples s
        WHERE s.run_id = ? AND s.sample > 0 AND s.agent = ? AND s.item_id NOT IN (
            SELECT item_id FROM judgments WHERE run_id = ? AND final)
        """,
        [run_id, agent, run_id],
    ).fetchall()
    status_by_item: dict[str, dict[int, str]] = defaultdict(dict)
    for item_id, sample, status in done:
        status_by_item[item_id][sample] = status
    complete = [i for i, s in status_by_item.items() if len(s) >= n_samples]
    if not complete:
        return 0

    # A chunk of items at a time, each chunk its own transaction: every judgment of a large run
    # at once, with its final rows, grew the run's peak memory with its items (#27). An item's
    # final rows go in together; items not finalized yet are found again on the next call.
    with store.bounded_cache():
        for start in range(0, len(complete), FINALIZE_CHUNK):
            chunk = complete[start : start + FINALIZE_CHUNK]
            rows = _final_chunk(store, run_id, rubric, agent, chunk, status_by_item)
            store.write_batch({"judgments": rows})
    return len(complete)


def _final_chunk(
    store: RunStore,
    run_id: str,
    rubric: Rubric,
    agent: str,
    complete: list[str],
    status_by_item: dict[str, dict[int, str]],
) -> list[dict[str, Any]]:
    """The final rows of some complete items."""
    values = store.con.execute(
        """
        SELECT item_id, sample, attribute, value FROM judgments
        WHERE run_id = ? AND agent = ? AND NOT final AND status = 'ok'
          AND item_id IN (SELECT unnest(?))
        """,
        [run_id, agent, complete],
    ).fetchall()
    by_sample: dict[str, dict[int, dict[str, float | None]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for item_id, sample, attribute, value in values:
        by_sample[item_id][sample][attribute] = value
    rows: list[dict[str, Any]] = []
    for item_id in complete:
        statuses = status_by_item[item_id]
        ok_samples = [by_sample[item_id][n] for n, s in statuses.items() if s == "ok"]
        n_failed = sum(1 for s in statuses.values() if s != "ok")
        rows.extend(final_rows(run_id, item_id, rubric, ok_samples, n_failed))
    return rows
