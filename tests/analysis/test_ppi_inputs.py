"""PPI++ inputs that used to change the answer without a word (issue 36, part 4).

Ratings that name a vendor or an item the audit does not have are named in ``ppi_warnings``
(and refused with ``--strict``); an interval of zero width, one from fewer rated items than
``MIN_RATED``, or no interval at all carries a warning with its reason in ``--json``, the
terminal table, the report and the viewer. Expectations are counted from the ratings files as
written here, not from the code under test.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import clinjudge
from clinjudge.analysis._audit_ppi import MIN_RATED, interval_warning, interval_warnings
from clinjudge.analysis._ppi import ppi_means
from clinjudge.errors import UserError
from tests.cli._helpers import invoke, query
from tests.cli.test_audit_cli import EXAMPLES, _data_flags

DEMO = EXAMPLES / "ratings.jsonl"
VENDORS = "vendor_a, vendor_b, vendor_c"


@pytest.fixture(scope="module")
def audit_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db = tmp_path_factory.mktemp("ppi_inputs") / "audit.duckdb"
    result = invoke(
        "audit", *_data_flags(), "--rubric", "pdsqi9", "--model", "mock/judge", "--samples", "1",
        "--boot", "50", "--db", str(db), "--no-progress", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return db, json.loads(result.stdout)["run_id"]


def _demo() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DEMO.read_text().splitlines()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _audit(db: Path, run_id: str, ratings: Path, *extra: str) -> Any:
    return invoke("audit", "--run", run_id, "--ratings", str(ratings), "--db", str(db), *extra)


def _misnamed(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The demo ratings with vendor_a's demo-007 under 'Vendor_A' and two ratings of an
    encounter vendor_b does not have."""
    records = _demo()
    for r in records:
        if (r["vendor"], r["item_id"]) == ("vendor_a", "demo-007"):
            r["vendor"] = "Vendor_A"
    records += [
        {"vendor": "vendor_b", "item_id": "demo-999", "rater_id": rater, "attribute": "accurate",
         "score": 2}
        for rater in ("phys-a", "phys-b")
    ]  # fmt: skip
    return _write(tmp_path / "misnamed.jsonl", records), records


def test_ratings_of_a_vendor_or_item_the_audit_lacks_are_named(audit_run, tmp_path) -> None:
    db, run_id = audit_run
    path, records = _misnamed(tmp_path)
    done = _audit(db, run_id, path, "--json")
    assert done.exit_code == 0, done.stderr
    audit = json.loads(done.stdout)
    misnamed = sum(r["vendor"] == "Vendor_A" for r in records)
    unknown_item = sum(r["item_id"] == "demo-999" for r in records)
    assert (misnamed, unknown_item) == (22, 2)  # 11 attributes x 2 raters; 2 added
    vendor_line = (
        f"ratings name vendor 'Vendor_A', which this audit does not have (its vendors: "
        f"{VENDORS}); did you mean 'vendor_a'? Its {misnamed} rating(s) are left out"
    )
    item_line = (
        f"ratings name item 'vendor_b::demo-999', which this audit does not have; its "
        f"{unknown_item} rating(s) are left out"
    )
    assert vendor_line in audit["ppi_warnings"]
    assert item_line in audit["ppi_warnings"]
    # What the warning explains: vendor_a is estimated from the two items left.
    rated = {s["vendor"]: s["rated"] for s in audit["physician_sample"]}
    assert rated["vendor_a"] == len({r["item_id"] for r in records if r["vendor"] == "vendor_a"})
    table = _audit(db, run_id, path)
    assert table.exit_code == 0
    assert vendor_line in table.stderr and item_line in table.stderr


def test_strict_refuses_ratings_the_audit_cannot_place(audit_run, tmp_path) -> None:
    db, run_id = audit_run
    path, _ = _misnamed(tmp_path)
    done = _audit(db, run_id, path, "--strict", "--json")
    assert done.exit_code == 2
    assert done.stdout == ""
    assert "ratings name vendor 'Vendor_A', which this audit does not have" in done.stderr
    assert "'vendor_b::demo-999'" in done.stderr
    # Ratings that all match pass under --strict.
    assert _audit(db, run_id, DEMO, "--strict", "--json").exit_code == 0
    with pytest.raises(UserError, match="Vendor_A"):
        clinjudge.load_run(run_id, db=db).audit(ratings=path, strict=True, n_boot=0)
    relaxed = clinjudge.load_run(run_id, db=db).audit(ratings=path, n_boot=0)
    assert any("'Vendor_A'" in w for w in relaxed.ppi_warnings or [])


def test_strict_refuses_a_new_audit_before_anything_is_judged(tmp_path) -> None:
    path, _ = _misnamed(tmp_path)
    db = tmp_path / "new.duckdb"
    done = invoke(
        "audit", *_data_flags(), "--model", "mock/judge", "--ratings", str(path), "--strict",
        "--db", str(db), "--no-progress",
    )  # fmt: skip
    assert done.exit_code == 2, done.stderr
    assert "'Vendor_A'" in done.stderr and "'vendor_b::demo-999'" in done.stderr
    assert not db.exists() or query(db, "SELECT count(*) FROM runs") == [(0,)]


def test_strict_is_in_the_help() -> None:
    done = invoke("audit", "--help")
    assert done.exit_code == 0 and "--strict" in done.stdout


def _one_attribute(tmp_path: Path, plan: dict[str, list[tuple[str, int]]]) -> Path:
    """Ratings of accurate only: per vendor, (encounter, score) by one rater."""
    records = [
        {"vendor": vendor, "item_id": encounter, "rater_id": "phys-a", "attribute": "accurate",
         "score": score}
        for vendor, rated in plan.items()
        for encounter, score in rated
    ]  # fmt: skip
    return _write(tmp_path / "accurate.jsonl", records)


def _row(audit: dict[str, Any], vendor: str, attribute: str = "accurate") -> dict[str, Any]:
    return next(r for r in audit["ppi"] if (r["vendor"], r["attribute"]) == (vendor, attribute))


def test_identical_ratings_give_a_zero_width_interval_with_a_warning(audit_run, tmp_path) -> None:
    db, run_id = audit_run
    same = [("demo-001", 3), ("demo-002", 3), ("demo-003", 3)]
    path = _one_attribute(tmp_path, {"vendor_a": same, "vendor_b": same, "vendor_c": same})
    done = _audit(db, run_id, path, "--json")
    assert done.exit_code == 0, done.stderr
    audit = json.loads(done.stdout)
    for vendor in ("vendor_a", "vendor_b", "vendor_c"):
        row = _row(audit, vendor)
        # ppi_py's interval stays: the ratings do not vary, so both intervals are 3 +- 0.
        assert (row["estimate"], row["ci_low"], row["ci_high"]) == (3.0, 3.0, 3.0)
        assert (row["classical_ci_low"], row["classical_ci_high"]) == (3.0, 3.0)
        assert "zero width" in row["interval_warning"]
        assert f"n=3 < {MIN_RATED}" in row["interval_warning"]
        assert any(
            w.startswith(f"{vendor}: zero-width interval for accurate")
            for w in audit["ppi_warnings"]
        ), audit["ppi_warnings"]
    table = _audit(db, run_id, path)
    line = next(x for x in table.stderr.splitlines() if "vendor_a" in x and "accurate" in x)
    assert "3.00 [3.00, 3.00]" in line and "zero width" in line


def test_one_rated_item_says_why_there_is_no_estimate(audit_run, tmp_path) -> None:
    db, run_id = audit_run
    path = _one_attribute(
        tmp_path, {"vendor_a": [("demo-001", 4)], "vendor_b": [("demo-001", 2), ("demo-002", 4)]}
    )
    done = _audit(db, run_id, path, "--json")
    assert done.exit_code == 0, done.stderr
    audit = json.loads(done.stdout)
    one = _row(audit, "vendor_a")
    assert one["n"] == 1 and one["estimate"] is None and one["classical_mean"] is None
    assert one["interval_warning"].startswith("undefined: 1 rated item")
    assert any(
        w.startswith("vendor_a: no estimate for accurate: 1 rated item")
        for w in audit["ppi_warnings"]
    ), audit["ppi_warnings"]
    pair = next(
        r for r in audit["ppi_pairs"]
        if (r["first"], r["second"], r["attribute"]) == ("vendor_a", "vendor_b", "accurate")
    )  # fmt: skip
    assert pair["n"] == 1 and pair["estimate"] is None
    assert pair["interval_warning"].startswith("undefined: 1 item rated for both vendors")
    # Nobody rated vendor_c: its rows say so too.
    assert _row(audit, "vendor_c")["interval_warning"] == "undefined: no rated items"
    table = _audit(db, run_id, path)
    line = next(x for x in table.stderr.splitlines() if "vendor_a" in x and "accurate" in x)
    assert "undefined" in line and "1 rated item" in line


def test_the_demo_sample_is_called_too_small_everywhere(audit_run, tmp_path) -> None:
    db, run_id = audit_run
    done = _audit(db, run_id, DEMO, "--json")
    assert done.exit_code == 0, done.stderr
    audit = json.loads(done.stdout)
    rated = {(r["vendor"], r["item_id"]) for r in _demo()}
    for vendor in ("vendor_a", "vendor_b", "vendor_c"):
        n = sum(v == vendor for v, _ in rated)
        assert n == 3
        row = _row(audit, vendor)
        assert row["n"] == n and f"n={n} < {MIN_RATED}" in row["interval_warning"]
        assert any(
            w.startswith(f"{vendor}: fewer than {MIN_RATED} rated items for ")
            for w in audit["ppi_warnings"]
        ), audit["ppi_warnings"]
    # The demo's physicians never found the note's voice stigmatizing: 0 +- 0.
    zero = _row(audit, "vendor_a", "voice_note")
    assert (zero["estimate"], zero["ci_low"], zero["ci_high"]) == (0.0, 0.0, 0.0)
    assert "zero width" in zero["interval_warning"]

    report = tmp_path / "report"
    assert _audit(db, run_id, DEMO, "--out", str(report)).exit_code == 0
    page, markdown = (report / "report.html").read_text(), (report / "report.md").read_text()
    warning = next(w for w in audit["ppi_warnings"] if w.startswith("vendor_a: fewer than"))
    assert warning in page and f"n=3 &lt; {MIN_RATED}" in page
    assert f"n=3 \\< {MIN_RATED}" in markdown

    copy = tmp_path / "copy.duckdb"
    shutil.copy(db, copy)
    assert invoke("ratings", "import", str(DEMO), "--db", str(copy)).exit_code == 0
    from starlette.testclient import TestClient

    from clinjudge.reports import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        viewer = TestClient(create_app(copy, n_boot=20)).get(f"/runs/{run_id}/audit")
    assert viewer.status_code == 200
    assert warning in viewer.text and f"n=3 &lt; {MIN_RATED}" in viewer.text


def test_names_in_the_warnings_are_escaped_in_html_and_shown_as_text(audit_run, tmp_path) -> None:
    db, run_id = audit_run
    records = _demo() + [
        {"vendor": "<img src=x onerror=alert(1)>", "item_id": "[bold]e1[/]", "rater_id": "r",
         "attribute": "accurate", "score": 3},
        {"vendor": "[red]v[/]", "item_id": "e2", "rater_id": "r", "attribute": "accurate",
         "score": 3},
    ]  # fmt: skip
    path = _write(tmp_path / "hostile.jsonl", records)
    report = tmp_path / "report"
    done = _audit(db, run_id, path, "--out", str(report))
    assert done.exit_code == 0, done.stderr
    assert "'[red]v[/]'" in done.stderr  # printed as written, not read as markup
    refused = _audit(db, run_id, path, "--strict")
    assert refused.exit_code == 2 and "'[red]v[/]'" in refused.stderr
    page = (report / "report.html").read_text()
    assert "<img src=x" not in page
    assert "&#x27;&lt;img src=x onerror=alert(1)&gt;&#x27;" in page


def _estimate(y: list[float], yhat: list[float], yu: list[float]) -> Any:
    return ppi_means([y], [yhat], [yu])[0]


def test_interval_warning_reasons() -> None:
    big = [float(x) for x in np.resize([2, 3, 4, 5], MIN_RATED)]
    assert interval_warning(_estimate([], [], [3.0])) == "undefined: no rated items"
    assert interval_warning(_estimate([4.0], [4.0], [3.0])) == (
        f"undefined: 1 rated item (an interval needs at least 2; {MIN_RATED} for a reliable one)"
    )
    assert interval_warning(_estimate(big, big, [3.0, 4.0])) is None
    few = interval_warning(_estimate(big[:4], big[:4], [3.0, 4.0]))
    assert few == f"n=4 < {MIN_RATED}: interval unreliable"
    # Ratings all 3, the judge varying: lambda is 0, both intervals are 3 +- 0.
    flat = [3.0] * MIN_RATED
    assert interval_warning(_estimate(flat, big, [2.0, 5.0])) == (
        "zero width: the ratings do not vary"
    )
    pair = interval_warning(_estimate([1.0], [1.0], []), pair=True)
    assert pair is not None and pair.startswith("undefined: 1 item rated for both vendors")


def test_a_zero_width_ppi_interval_beside_a_real_physicians_one_is_told_apart() -> None:
    # A judge equal to the ratings on the rated items and one score on 100 unrated items:
    # lambda clips at 1, every rectifier y - yhat is 0 and the unrated scores do not vary, so
    # PPI++ is 3 +- 0 while the ratings themselves (2 and 4) give a real interval.
    rated = [2.0, 4.0] * (MIN_RATED // 2)
    estimate = _estimate(rated, rated, [3.0] * 100)
    assert estimate.lam == 1.0 and estimate.ci_low == estimate.ci_high == 3.0
    assert estimate.classical_ci_high - estimate.classical_ci_low > 0.5
    assert interval_warning(estimate) == (
        "zero width: the ratings less lambda x the judge's scores do not vary"
    )
    row = {
        "vendor": "v", "attribute": "accurate", "n": estimate.n, "ci_low": estimate.ci_low,
        "ci_high": estimate.ci_high, "classical_ci_low": estimate.classical_ci_low,
        "classical_ci_high": estimate.classical_ci_high,
    }  # fmt: skip
    (line,) = interval_warnings([row], [])
    assert line.startswith(f"v: zero-width interval for accurate (n={MIN_RATED}): the ratings less")
