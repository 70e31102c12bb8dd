"""One exception hierarchy: every public exception is a ClinJudgeError; the CLI maps the
UserError branch to one line on stderr and exit code 2, and lets other faults through."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import clinjudge
from clinjudge import ClinJudgeError, UserError
from tests.cli._helpers import invoke

SUBPACKAGES = sorted(
    m.name
    for m in pkgutil.iter_modules(clinjudge.__path__, "clinjudge.")
    if m.ispkg and m.name != "clinjudge.cli"
)


def _public_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in SUBPACKAGES:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", []):
            value = getattr(module, attr)
            if isinstance(value, type) and issubclass(value, BaseException):
                found[f"{name}.{attr}"] = value
    return found


# Problems the caller fixes: bad files, settings, store paths.
USER_ERRORS = {
    "clinjudge.orchestration.ConfigError",
    "clinjudge.rubrics.RubricError",
    "clinjudge.personas.PersonaError",
    "clinjudge.inputs.InputError",
    "clinjudge.analysis.AuditError",
    "clinjudge.analysis.AgreementError",
    "clinjudge.runs.StoreError",
    "clinjudge.judges.ModelConfigError",
    "clinjudge.prm_bridge.PRMFormatError",
    "clinjudge.prm_bridge.PRMInputError",
    "clinjudge.prm_bridge.PRMDependencyError",
    "clinjudge.prm_bridge.SectionError",
    "clinjudge.reports.ExportError",
    "clinjudge.reports.FolderNotEmpty",
}
# Faults: a provider, a model reply, a failed write; they keep their tracebacks in the CLI.
INTERNAL_ERRORS = {
    "clinjudge.judges.ProviderFault",
    "clinjudge.judges.NLIError",
    "clinjudge.rubrics.JudgmentParseError",
    "clinjudge.orchestration.RunWriteError",
    "clinjudge.orchestration.CircuitBreakerOpen",
    "clinjudge.prm_bridge.PRMModelError",
    "clinjudge.reports.DatabaseBusy",
    "clinjudge.reports.PageNotFound",
}


def test_subpackages_are_found() -> None:
    assert {"clinjudge.runs", "clinjudge.judges", "clinjudge.reports"} <= set(SUBPACKAGES)


def test_every_public_exception_is_a_clinjudge_error() -> None:
    found = _public_exceptions()
    assert set(found) >= USER_ERRORS | INTERNAL_ERRORS
    strays = sorted(name for name, cls in found.items() if not issubclass(cls, ClinJudgeError))
    assert strays == []


@pytest.mark.parametrize("name", sorted(USER_ERRORS))
def test_user_errors_are_user_errors(name: str) -> None:
    assert issubclass(_public_exceptions()[name], UserError)


@pytest.mark.parametrize("name", sorted(INTERNAL_ERRORS))
def test_faults_are_not_user_errors(name: str) -> None:
    assert not issubclass(_public_exceptions()[name], UserError)


def test_builtin_bases_are_kept_for_callers_that_catch_them() -> None:
    from clinjudge.prm_bridge import PRMDependencyError
    from clinjudge.reports import PageNotFound
    from clinjudge.runs import StoreError

    assert issubclass(UserError, ValueError)
    assert issubclass(StoreError, RuntimeError)
    assert issubclass(PRMDependencyError, ImportError)
    assert issubclass(PageNotFound, LookupError)


def test_cli_reports_a_user_error_in_one_line_with_exit_2(tmp_path: Path) -> None:
    # The library raises a UserError (unknown format ending); no command-level catch is needed.
    db = tmp_path / "runs.duckdb"
    result = invoke("export", "00000000", "--out", str(tmp_path / "x.xlsx"), "--db", str(db))
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("error:")
    assert "cannot tell the format" in lines[0]
    assert "Traceback" not in result.output


def test_cli_maps_any_user_error_raised_in_a_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clinjudge.cli import _runs

    def refuse(*args: object, **kwargs: object) -> str:
        raise UserError("bad setting: the fix is to change it")

    monkeypatch.setattr(_runs, "open_store", refuse)
    result = invoke("export", "x", "--out", str(tmp_path / "x.csv"))
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: bad setting: the fix is to change it"


def test_cli_does_not_turn_a_bug_into_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clinjudge.cli import _runs

    def broken(*args: object, **kwargs: object) -> str:
        raise ValueError("a bug, not the user's fault")

    monkeypatch.setattr(_runs, "infer_format", broken)
    with pytest.raises(ValueError, match="a bug"):
        invoke("export", "x", "--out", str(tmp_path / "x.csv"))


def test_validation_problems_name_each_field_once() -> None:
    from pydantic import BaseModel, ValidationError, field_validator

    from clinjudge.errors import validation_problems

    class Inner(BaseModel):
        n: int

    class Outer(BaseModel):
        name: str
        inner: list[Inner]

        @field_validator("name")
        @classmethod
        def _short(cls, name: str) -> str:
            if len(name) > 3:
                raise ValueError("too long")
            return name

    with pytest.raises(ValidationError) as caught:
        Outer.model_validate({"name": "long", "inner": [{"n": 1}, {"n": "x"}]})
    assert validation_problems(caught.value) == [
        "field name: too long",
        "field inner.1.n: Input should be a valid integer, unable to parse string as an integer",
    ]
    with pytest.raises(ValidationError) as whole:
        Inner.model_validate(3)
    assert validation_problems(whole.value, top="(record)") == [
        "field (record): Input should be a valid dictionary or instance of Inner"
    ]
    named = validation_problems(caught.value, locate=lambda loc: f"<{len(loc)}>")
    assert [line.split(":")[0] for line in named] == ["field <1>", "field <3>"]


def test_a_setting_the_data_cannot_meet_is_a_user_error(tmp_path: Path) -> None:
    # More shots than the pool holds: found while the run is prepared, reported in one line.
    demo = Path(clinjudge.__file__).parent / "demo"
    db = tmp_path / "runs.duckdb"
    result = invoke(
        "run", "--data", str(demo / "pdsqi9_demo.jsonl"), "--model", "mock/judge",
        "--shots", "50", "--shot-pool", str(demo / "pdsqi9_shots.jsonl"),
        "--db", str(db), "--dry-run",
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: shot pool has 8 usable examples for 'demo-001', need 50"
    ]
    assert not db.exists()


def test_library_messages_name_settings_and_the_cli_adds_the_flag(tmp_path: Path) -> None:
    from clinjudge.judges import ModelSettings
    from clinjudge.orchestration import RunConfig, prepare_run

    db = str(tmp_path / "x.duckdb")
    with pytest.raises(UserError) as caught:
        prepare_run(RunConfig(judge=ModelSettings(model="mock/judge"), db=db))
    assert caught.value.setting == "data" and "--" not in str(caught.value)
    result = invoke("run", "--model", "mock/judge", "--db", db)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {caught.value} (--data)"
