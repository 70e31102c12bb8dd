"""PRM results as run-store rows: a ``runs`` row (mode ``prm``), ``prm_steps`` and ``calls``.

Each candidate is one forward pass, recorded as one call (role ``prm``, agent ``prm``) whose
sample number is the candidate's position within its id (from 1) and whose latency is its share
of the batch's forward time. Everything of one scoring run is written in one transaction.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from clinjudge._util.modes import PRM_AGENT, PRM_MODE, PRM_ROLE
from clinjudge.runs._rows import SampleKey, call_row
from clinjudge.runs._store import RunStore, now

if TYPE_CHECKING:  # the PRM package loads when PRM rows are written, not with the store
    from clinjudge.prm_bridge import ChainScore


def _prm_step_rows(run_id: str, result: ChainScore, model: str) -> list[dict[str, Any]]:
    from clinjudge.prm_bridge import prm_step_rows

    return prm_step_rows(run_id, result, model)


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def prm_call_row(
    run_id: str, result: ChainScore, sample: int, model: str, started: datetime
) -> dict[str, Any]:
    """The ``calls`` row of one candidate's forward pass."""
    from clinjudge.judges import CallOutcome, ProviderFault  # here: `judge runs` stays light

    key = SampleKey(run_id, result.id, sample, PRM_AGENT)
    if result.error:
        return call_row(
            key,
            0,
            role=PRM_ROLE,
            model=model,
            started=started,
            outcome=None,
            fault=ProviderFault(result.error, retryable=False),
        )
    outcome = CallOutcome(
        text="",
        finish_reason="truncated" if result.truncated else "stop",
        prompt_tokens=result.n_tokens,
        completion_tokens=0,
        tokens_estimated=False,
        cost_usd=0.0,
        latency_s=result.latency_s,
    )
    return call_row(
        key, 0, role=PRM_ROLE, model=model, started=started, outcome=outcome, fault=None
    )


def write_prm_run(
    store: RunStore,
    run_id: str,
    results: Sequence[ChainScore],
    *,
    model: str,
    config: dict[str, Any],
    data_source: str | None,
    name: str | None = None,
    started: datetime | None = None,
) -> None:
    """Record a PRM scoring run, its steps and its calls in one transaction.

    Args:
        store: The run store.
        run_id: New run id.
        results: Scored candidates.
        model: Model name or path recorded with every row.
        config: Format and options, stored as the run's config.
        data_source: The input file.
        name: Label for the run.
        started: When scoring began.
    """
    stamp = now()
    started = started or stamp
    positions: dict[str, int] = {}
    steps: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for result in results:
        positions[result.id] = positions.get(result.id, 0) + 1
        steps.extend(_prm_step_rows(run_id, result, model))
        calls.append(prm_call_row(run_id, result, positions[result.id], model, started))
    failed = any(r.error for r in results)
    run_row = _run_row(
        run_id,
        model=model,
        config=config,
        data_source=data_source,
        name=name,
        started=started,
        status="completed_with_errors" if failed else "completed",
        counts=(len(positions), max(positions.values(), default=0)),
    )
    store.write_batch({"runs": [run_row], "prm_steps": steps, "calls": calls})


def _run_row(
    run_id: str,
    *,
    model: str,
    config: dict[str, Any],
    data_source: str | None,
    name: str | None,
    started: datetime,
    status: str,
    counts: tuple[int, int],
) -> dict[str, Any]:
    stamp = now()
    return {
        "run_id": run_id,
        "name": name,
        "created_at": started,
        "updated_at": stamp,
        "finished_at": None if status == "running" else stamp,
        "status": status,
        "mode": PRM_MODE,
        "models": json.dumps({"judge": model, "prm": model}),  # `runs list` shows "judge"
        "config": json.dumps(config),
        "versions": json.dumps(
            {
                "clinjudge": _version("clinjudge"),
                "torch": _version("torch"),
                "transformers": _version("transformers"),
                "python": platform.python_version(),
            }
        ),
        "data_source": data_source,
        "simulated": False,
        "n_items": counts[0],
        "n_samples": counts[1],
    }


# A PRM run scored in parts (``--ray``): the run row first, each streamed batch of candidates in
# its own transaction, the status last. A resume skips the candidates whose call row exists
# (steps and call of a candidate are written together), and the keys make a repeated write of
# the same candidate a no-op.


def begin_prm_run(
    store: RunStore,
    run_id: str,
    *,
    model: str,
    config: dict[str, Any],
    data_source: str | None,
    name: str | None = None,
    started: datetime | None = None,
    counts: tuple[int, int] = (0, 0),
) -> None:
    """Record a PRM run that is about to be scored in parts (status ``running``).

    Args:
        store: The run store.
        run_id: New run id (an existing one is kept as it is).
        model: Model name or path recorded with every row.
        config: Format and options, stored as the run's config.
        data_source: The input file.
        name: Label for the run.
        started: When scoring began.
        counts: Items and the most candidates of one item.
    """
    row = _run_row(
        run_id,
        model=model,
        config=config,
        data_source=data_source,
        name=name,
        started=started or now(),
        status="running",
        counts=counts,
    )
    store.write_batch({"runs": [row]})


def add_prm_results(
    store: RunStore,
    run_id: str,
    scored: Sequence[tuple[ChainScore, int]],
    *,
    model: str,
    started: datetime,
) -> None:
    """Write scored candidates (with their position within their id, from 1) in one transaction.

    Args:
        store: The run store.
        run_id: The run (see :func:`begin_prm_run`).
        scored: Each candidate's result and its sample number.
        model: Model name or path.
        started: When scoring began.
    """
    steps: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for result, sample in scored:
        steps.extend(_prm_step_rows(run_id, result, model))
        calls.append(prm_call_row(run_id, result, sample, model, started))
    store.write_batch({"prm_steps": steps, "calls": calls})


def end_prm_run(store: RunStore, run_id: str, *, failed: bool, config: dict[str, Any]) -> None:
    """Close a PRM run scored in parts: its status, finish time and final config.

    Args:
        store: The run store.
        run_id: The run.
        failed: Whether any candidate could not be scored.
        config: The config to keep (e.g. with the replicas' throughput added).
    """
    store.con.execute("UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(config), run_id])
    store.set_run_status(run_id, "completed_with_errors" if failed else "completed", finished=True)


def stored_prm_calls(store: RunStore, run_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The candidates a PRM run has stored, by (item id, sample): status, error, prompt_tokens,
    finish_reason and latency_s of their call."""
    calls = store.query(
        "SELECT item_id, sample, status, error, prompt_tokens, finish_reason, latency_s "
        "FROM calls WHERE run_id = ? AND agent = ?",
        [run_id, PRM_AGENT],
    )
    return {(c["item_id"], c["sample"]): c for c in calls}


def stored_prm_scores(store: RunStore, run_id: str) -> dict[tuple[str, str], list[float | None]]:
    """A PRM run's stored step scores by (item id, candidate), in step order."""
    rows = store.query(
        "SELECT item_id, candidate, score FROM prm_steps WHERE run_id = ? "
        "ORDER BY item_id, candidate, step",
        [run_id],
    )
    out: dict[tuple[str, str], list[float | None]] = {}
    for row in rows:
        out.setdefault((row["item_id"], row["candidate"]), []).append(row["score"])
    return out
