"""Missing requirements skip one test outside CI and fail it under CI."""

from __future__ import annotations

import pytest

from tests.requirements import optional_module, require_judge_script, require_module


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
