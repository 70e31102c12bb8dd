"""A small upsert (a few hundred ratings) is bound as statement parameters, without pyarrow
(#39: `judge ratings import` start-up); a large one goes through an Arrow table. Both store
the same rows, types and values."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from clinjudge.runs import RunStore, _store

STAMP = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _ratings(n: int) -> list[dict[str, Any]]:
    return [
        {
            "item_id": f"item-{i % 7}",
            "rater_id": f"rater-{i % 3}",
            "attribute": f"attr-{i}",
            "score": None if i % 5 == 0 else i / 4,
            "rubric": "pdsqi9",
            "source": "ratings.jsonl",
            "imported_at": STAMP,
        }
        for i in range(n)
    ]


def _stored(path: Path, bound: int) -> list[tuple[Any, ...]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_store, "_BOUND_VALUES", bound)
        with RunStore(path) as store:
            store.upsert_rows("human_ratings", _ratings(40))
            changed = {**_ratings(40)[3], "score": 9.5}
            store.upsert_rows("human_ratings", [changed])  # replaces its row
            store.upsert_rows(
                "agreement_cache",
                [{"run_id": "r", "settings": "s", "fingerprint": "f",
                  "analysis": '{"a": [1, 2.5], "b": null}', "computed_at": STAMP}],
            )  # fmt: skip
            return [
                *store.con.execute(
                    "SELECT *, typeof(score), typeof(imported_at) FROM human_ratings ORDER BY ALL"
                ).fetchall(),
                *store.con.execute(
                    "SELECT analysis::VARCHAR, typeof(analysis), computed_at FROM agreement_cache"
                ).fetchall(),
            ]


def test_bound_and_arrow_upserts_store_the_same_rows(tmp_path: Path) -> None:
    bound = _stored(tmp_path / "bound.duckdb", 20_000)
    arrow = _stored(tmp_path / "arrow.duckdb", 0)
    assert bound == arrow
    scores = [row[3] for row in bound[:40]]
    assert len(bound) == 41 and 9.5 in scores and None in scores


def test_a_small_upsert_loads_no_pyarrow(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom datetime import datetime, UTC\nfrom clinjudge.runs import RunStore\n"
        f"store = RunStore({str(tmp_path / 'r.duckdb')!r})\n"
        "store.upsert_rows('human_ratings', [{'item_id': 'i', 'rater_id': 'r', "
        "'attribute': 'a', 'score': 1.0, 'imported_at': datetime.now(UTC)}] * 1)\n"
        "print('pyarrow' in sys.modules, 'numpy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False"]
