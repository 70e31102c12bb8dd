"""While a run judges samples the garbage collector's youngest generation waits for many more
allocations (fewer passes over the objects of calls in flight); the thresholds found before the
run come back after it (issue 27)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from clinjudge.orchestration import _sample_runner
from clinjudge.orchestration._collector import RUN_GEN0_THRESHOLD, relaxed_collection
from tests.factories import mock_run


@pytest.fixture
def thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def _run(tmp_path, monkeypatch) -> tuple[list[tuple[int, int, int]], int]:
    """A small simulated run; the collector's thresholds seen as each sample's rows are made."""
    seen: list[tuple[int, int, int]] = []
    real = _sample_runner.workflow_rows

    def workflow_rows(*args, **kwargs):
        seen.append(gc.get_threshold())
        return real(*args, **kwargs)

    monkeypatch.setattr(_sample_runner, "workflow_rows", workflow_rows)
    return seen, mock_run(tmp_path, 5).ok


def test_a_run_raises_the_threshold_while_it_judges_and_restores_it(
    tmp_path, monkeypatch, thresholds
):
    seen, ok = _run(tmp_path, monkeypatch)
    assert ok == 5
    assert seen == [(RUN_GEN0_THRESHOLD, 10, 10)] * 5
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_or_a_disabled_collector_is_left_alone(
    tmp_path, monkeypatch, thresholds
):
    gc.set_threshold(RUN_GEN0_THRESHOLD * 2, 5, 5)
    seen, _ = _run(tmp_path, monkeypatch)
    assert set(seen) == {(RUN_GEN0_THRESHOLD * 2, 5, 5)}
    assert gc.get_threshold() == (RUN_GEN0_THRESHOLD * 2, 5, 5)
    gc.set_threshold(0, 10, 10)
    with relaxed_collection():
        assert gc.get_threshold() == (0, 10, 10)
    assert gc.get_threshold() == (0, 10, 10)


def test_overlapping_runs_restore_when_the_last_one_ends(thresholds):
    first, second = relaxed_collection(), relaxed_collection()
    first.__enter__()
    second.__enter__()
    assert gc.get_threshold()[0] == RUN_GEN0_THRESHOLD
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == RUN_GEN0_THRESHOLD  # the second run is still going
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_thresholds_set_by_someone_else_during_a_run_are_kept(thresholds):
    with relaxed_collection():
        gc.set_threshold(1234, 7, 7)
    assert gc.get_threshold() == (1234, 7, 7)


def test_thresholds_come_back_when_the_run_fails(thresholds):
    with pytest.raises(RuntimeError), relaxed_collection():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)
