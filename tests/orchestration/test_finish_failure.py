"""A run whose samples are all stored but whose final scores cannot be written is `failed`,
not left `running`, and a resume finishes it."""

from __future__ import annotations

from pathlib import Path

import pytest

import clinjudge
from clinjudge.orchestration import _session
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl


def test_a_failed_finish_marks_the_run_failed_and_resume_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    db = tmp_path / "finish.duckdb"
    real = _session.flag_run_scores

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_session, "flag_run_scores", disk_full)
    with pytest.raises(OSError, match="No space left"):
        clinjudge.evaluate(data, model="mock/judge", db=db, name="full-disk")
    with RunStore(db, read_only=True) as store:
        (run,) = store.query("SELECT run_id, status, status_reason AS reason FROM runs")
    assert run["status"] == "failed"
    assert "finishing the run" in run["reason"] and "No space left" in run["reason"]

    monkeypatch.setattr(_session, "flag_run_scores", real)
    again = clinjudge.resume(run["run_id"], db=db)
    assert again.status == "completed" and again.items_ok == 3
    with RunStore(db, read_only=True) as store:
        finals = store.query(
            "SELECT count(DISTINCT item_id) AS n FROM judgments WHERE run_id = ? AND agent = "
            "'final'",
            [run["run_id"]],
        )
    assert finals[0]["n"] == 3
