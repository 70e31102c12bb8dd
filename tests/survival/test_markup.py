"""Data printed to the terminal is text, never rich markup.

Before, a run named ``[/]``, a vendor called ``[bold]x[/]`` or a provider error quoting
markup crashed ``runs list``, ``runs show`` or ``judge audit`` with a MarkupError (after the
judging, so the report was lost). Each case puts markup-looking text in every field a command
prints and checks the command succeeds and shows the text as written.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from clinjudge.analysis import AuditStatistics
from clinjudge.cli import _audit as audit_cli
from clinjudge.cli import app
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer, Fault

HOSTILE = "[/] [bold]x[/bold] [/red] [link=http://e.x]y"


def _plain(text: str) -> str:
    return " ".join(text.split())


def test_runs_list_and_show_print_markup_as_text(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = str(tmp_path / "runs.duckdb")
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["run", "--data", str(data), "--model", "mock/judge", "--db", db, "--name", HOSTILE],
    )
    assert result.exit_code == 0, result.output
    run_id = result.stdout.strip().splitlines()[0]
    listed = runner.invoke(app, ["runs", "list", "--db", db], env={"COLUMNS": "400"})
    assert listed.exit_code == 0, listed.output
    assert HOSTILE in listed.output
    shown = runner.invoke(app, ["runs", "show", run_id, "--db", db], env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    assert HOSTILE in shown.output


def test_provider_error_with_markup_is_printed_as_text(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    db = str(tmp_path / "runs.duckdb")

    with FakeOpenAIServer(faults=lambda i, b: Fault("server_error")) as srv:
        # The fake's 500 message is fixed; a name with markup reaches the error text instead.
        result = CliRunner().invoke(
            app,
            [
                "run", "--data", str(data), "--model", "openai/[/]judge", "--base-url",
                srv.base_url, "--db", db, "--timeout", "2", "--allow-failures", "100%",
            ],
        )  # fmt: skip
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    run_id = result.stdout.strip().splitlines()[0]
    for command in (["runs", "list"], ["runs", "show", run_id]):
        shown = CliRunner().invoke(app, [*command, "--db", db], env={"COLUMNS": "400"})
        assert shown.exit_code == 0, shown.output
        assert "openai/[/]judge" in shown.output


def test_audit_summary_prints_vendor_names_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(record=True, width=300)
    monkeypatch.setattr(audit_cli, "console", console)
    summary = {"mean": 3.0, "ci95": [2.5, 3.5], "n": 4}
    audit = {
        "run_id": "[/]run",
        "vendors": ["[/]vendor", "[bold]b[/bold]"],
        "attributes": ["[/red]accurate"],
        "summaries": {
            "[/]vendor": {"[/red]accurate": summary},
            "[bold]b[/bold]": {"[/red]accurate": summary},
        },
        "comparisons": [
            {
                "vendor_a": "[/]vendor",
                "vendor_b": "[bold]b[/bold]",
                "attribute": "[/red]accurate",
                "significant": True,
                "median_difference": 0.5,
                "n_pairs": 4,
                "p_holm": 0.01,
            }
        ],
        "settings": {"alpha": 0.05},
        "flagged": [],
        "flag_rules": ["[/]rule"],
        "unmatched": [{"encounter_id": "[/]enc", "missing": ["[bold]b[/bold]"]}],
        "simulated": False,
    }
    audit_cli._print_audit(AuditStatistics.model_validate(audit), Path("[/]out"))
    text = _plain(console.export_text())
    for shown in ("[/]vendor", "[bold]b[/bold]", "[/red]accurate", "[/]rule", "[/]enc", "[/]out"):
        assert shown in text, shown
    assert re.search(r"3\.00 \[2\.50, 3\.50\] n=4", text)


def test_paths_with_markup_are_printed_as_text(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    (tmp_path / "a[").mkdir()
    db = str(tmp_path / "a[" / "]b.duckdb")  # prints as .../a[/]b.duckdb
    runner = CliRunner()
    result = runner.invoke(app, ["run", "--data", str(data), "--model", "mock/judge", "--db", db])
    assert result.exit_code == 0, result.output
    run_id = result.stdout.strip().splitlines()[0]
    again = runner.invoke(app, ["run", "--resume", run_id, "--db", db])
    assert again.exit_code == 0, again.output
    out = tmp_path / "a[" / "]out.jsonl"
    exported = runner.invoke(app, ["export", run_id, "--out", str(out), "--db", db])
    assert exported.exit_code == 0, exported.output
    assert "a[/]out.jsonl" in _plain(exported.output).replace(" ", "")
