"""finalize_run works through a run's items a chunk at a time (issue 27: one INSERT ... SELECT
per chunk, so DuckDB's memory for the medians does not grow with the run): chunked, every
complete item gets the median of its valid samples, computed here with the standard library.
tests/runs/test_finalize_sql.py checks every rule on random runs."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

import clinjudge.runs._aggregate as aggregate
from clinjudge.rubrics import Rubric
from clinjudge.runs import RunStore, finalize_run
from tests.runs.test_aggregate import _finals, _sample, _store_samples


def test_finals_in_chunks_are_the_medians_of_every_item(
    db_path: Path, pdsqi9: Rubric, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aggregate, "FINALIZE_CHUNK", 3)
    plan: dict[str, list[int | None]] = {
        f"i{k:02d}": [(k * 7 + s * 3) % 5 + 1 if (k + s) % 4 else None for s in range(3)]
        for k in range(11)
    }
    with RunStore(db_path) as store:
        for item, values in plan.items():
            _store_samples(
                store, item, [None if v is None else _sample(accurate=v) for v in values]
            )
        assert finalize_run(store, "r", pdsqi9, 3) == len(plan)
        finals = _finals(store)
    assert set(finals) == set(plan)
    for item, values in plan.items():
        valid = [v for v in values if v is not None]
        accurate = finals[item]["accurate"]
        if valid:
            assert accurate["value"] == statistics.median(valid), item
        else:
            assert (accurate["value"], accurate["status"]) == (None, "failed"), item
