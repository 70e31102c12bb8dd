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
from typing import Any

from clinjudge.prm_bridge import PRM_AGENT, PRM_MODE, PRM_ROLE, ChainScore, prm_step_rows
from clinjudge.runs._rows import SampleKey, call_row
from clinjudge.runs._store import RunStore, now


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
        steps.extend(prm_step_rows(run_id, result, model))
        calls.append(prm_call_row(run_id, result, positions[result.id], model, started))
    failed = any(r.error for r in results)
    run_row = {
        "run_id": run_id,
        "name": name,
        "created_at": started,
        "updated_at": stamp,
        "finished_at": stamp,
        "status": "completed_with_errors" if failed else "completed",
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
        "n_items": len(positions),
        "n_samples": max(positions.values(), default=0),
    }
    store.write_batch({"runs": [run_row], "prm_steps": steps, "calls": calls})
