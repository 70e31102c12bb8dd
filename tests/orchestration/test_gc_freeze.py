"""A run keeps the objects from before it out of the garbage collector's passes and gives them
back when it ends (issue 27)."""

from __future__ import annotations

import gc

import pytest

from clinjudge.orchestration import _session
from tests.factories import mock_run


def _run(tmp_path, monkeypatch) -> tuple[list[int], int]:
    """A small simulated run; the freeze count while its final scores are written."""
    seen: list[int] = []
    real = _session.finalize_run

    def finalize_run(*args, **kwargs):
        seen.append(gc.get_freeze_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(_session, "finalize_run", finalize_run)
    return seen, mock_run(tmp_path, 4).ok


@pytest.fixture
def no_freeze():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_objects_are_frozen_during_the_run_and_thawed_after(tmp_path, monkeypatch, no_freeze):
    seen, ok = _run(tmp_path, monkeypatch)
    assert ok == 4
    assert len(seen) == 1 and seen[0] > 0
    assert gc.get_freeze_count() == 0


def test_a_callers_own_freeze_is_left_alone(tmp_path, monkeypatch, no_freeze):
    kept = [object() for _ in range(10)]
    gc.freeze()
    before = gc.get_freeze_count()
    seen, ok = _run(tmp_path, monkeypatch)
    assert ok == 4 and kept
    # Nothing more frozen for the run (a freeze would take the thousands of objects made since,
    # the prepared run among them), and nothing thawed after it (a thaw empties the permanent
    # generation). Frozen objects still die when the last reference goes (earlier tests' cached
    # runs and settings replaced by this one's: hundreds), so a drop is not a thaw.
    assert len(seen) == 1 and seen[0] - before < 100 and seen[0] > 0.9 * before
    assert gc.get_freeze_count() - before < 100 and gc.get_freeze_count() > 0.9 * before
