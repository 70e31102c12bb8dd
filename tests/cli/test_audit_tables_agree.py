"""Audit tables that cannot mislead (#39): the viewer shows an audit as `judge audit` printed it
(its bootstrap setting, stored with the audit; PPI++ from `--ratings FILE`; the same rounding),
the terminal's PPI++ table says what n, N, lambda and effective n are, and `audit plan` says
why it promises ±0.00."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from tests.cli._helpers import invoke

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "audit"
VENDORS = [a for v in "abc" for a in ("--data", str(EXAMPLES / f"vendor_{v}.jsonl"))]

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from starlette.testclient import TestClient


def _audit(db: Path, *extra: str) -> dict:
    done = invoke(
        "audit", *VENDORS, "--mode", "single", "--samples", "3", "--json",
        "--db", str(db), "--no-progress", *extra,
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    return dict(json.loads(done.stdout))


def _cells(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_viewer_audit_page_matches_the_terminal(db_path: Path) -> None:
    from clinjudge.reports import create_app

    audit = _audit(db_path, "--boot", "300", "--ratings", str(EXAMPLES / "ratings.jsonl"))
    assert audit["settings"]["n_boot"] == 300
    page = TestClient(create_app(db_path, n_boot=50)).get(f"/runs/{audit['run_id']}/audit")
    assert page.status_code == 200
    text = _cells(page.text)
    # The audit's own 300 resamples, not the viewer's 50 (or its default 1,000): every vendor
    # summary reads as in `judge audit`'s table, two decimals.
    assert "300 resamples" in text
    for vendor, by_attribute in audit["summaries"].items():
        for attribute, s in by_attribute.items():
            if s["mean"] is not None and s["ci95"]:
                low, high = s["ci95"]
                assert f"{s['mean']:.2f} [{low:.2f}, {high:.2f}] n={s['n']}" in text, (
                    vendor,
                    attribute,
                )
    # PPI++ made from --ratings FILE is shown too: the file's ratings were stored.
    assert "judge-corrected (PPI++)" in text
    rated = [r for r in audit["ppi"] if r["n"] and r["estimate"] is not None]
    assert rated
    for row in rated:
        assert f"{row['estimate']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]" in text


def test_recomputed_audit_keeps_its_stored_bootstrap_setting(db_path: Path) -> None:
    first = _audit(db_path, "--boot", "250")
    again = invoke("audit", "--run", first["run_id"], "--json", "--db", str(db_path))
    assert again.exit_code == 0, again.stderr
    # `--run` without --boot uses the default, and stores it for the viewer in turn.
    assert json.loads(again.stdout)["settings"]["n_boot"] == 2000

    from clinjudge.analysis import audit_for_run
    from clinjudge.runs import RunStore

    with RunStore(db_path, read_only=True) as store:
        assert audit_for_run(store, first["run_id"]).settings.n_boot == 2000


def test_terminal_ppi_table_has_a_legend_and_effective_n(db_path: Path) -> None:
    done = invoke(
        "audit", *VENDORS, "--mode", "single", "--ratings", str(EXAMPLES / "ratings.jsonl"),
        "--db", str(db_path), "--no-progress", env={"COLUMNS": "200"},
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    text = " ".join(done.stderr.split())  # the run id on stdout, the tables on stderr
    assert "eff. n" in text
    assert "n: items the physicians rated; N: items only the judge scored; lambda:" in text


@pytest.mark.parametrize("as_json", [False, True])
def test_audit_plan_says_why_it_promises_zero_width(db_path: Path, as_json: bool) -> None:
    run_id = _audit(db_path)["run_id"]
    args = ["audit", "plan", "--run", run_id, "--db", str(db_path)]
    done = invoke(*args, *(["--json"] if as_json else []), env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.stderr
    if as_json:
        expected = json.loads(done.stdout)["expected"]
        zero = [r for r in expected if r["ppi_half_width"] == 0]
        assert zero and all("same score" in r["warning"] for r in zero)
        # Eight encounters per vendor: every width rests on fewer than 10 rated items.
        assert all("< 10" in r["warning"] for r in expected)
    else:
        text = " ".join(done.stderr.split())
        assert "±0.00" in text and "the judge gave every item the same score" in text
