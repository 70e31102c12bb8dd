"""Missing requirements skip one test outside CI and fail it under CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.requirements import (
    WITHOUT_PRM_EXTRA,
    optional_module,
    require_judge_script,
    require_module,
)


def test_missing_module_skips_only_where_used_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    absent = optional_module("clinjudge_no_such_package")  # importing it does not skip
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        absent.anything  # noqa: B018
    with pytest.raises(pytest.skip.Exception):
        require_module("clinjudge_no_such_package")


def test_missing_requirements_fail_under_ci(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_module("clinjudge_no_such_package")
    with pytest.raises(pytest.fail.Exception, match="judge console script"):
        require_judge_script(tmp_path / "judge")


def test_present_module_is_the_real_module() -> None:
    assert optional_module("json").dumps([1]) == "[1]"


_COLLECT_WITHOUT_PRM_EXTRA = (
    WITHOUT_PRM_EXTRA
    + """
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"]))
"""
)


def test_every_module_collects_without_the_prm_extra() -> None:
    """Without torch/transformers, tests that need them skip one by one: no module fails to
    import or skips whole at collection."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    out = subprocess.run(
        [sys.executable, "-c", _COLLECT_WITHOUT_PRM_EXTRA],
        cwd=Path(__file__).parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "error" not in out.stdout.splitlines()[-1].lower()
