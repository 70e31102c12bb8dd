"""Judge-corrected audits end to end: `judge audit --run RUN --ratings FILE` and `audit plan`.

The expected numbers come from the final scores read back with SQL written here, the ratings
file as written, and the step-by-step PPI++ reference of ``tests/analysis/test_ppi.py``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tests.analysis.test_ppi import reference
from tests.cli._helpers import invoke, query
from tests.cli.test_audit_cli import _data_flags

ROW_KEYS = {
    "vendor", "attribute", "n", "N", "lambda", "estimate", "ci_low", "ci_high", "classical_mean",
    "classical_ci_low", "classical_ci_high", "judge_mean", "effective_n",
}  # fmt: skip
PAIR_KEYS = {
    "first", "second", "attribute", "n", "N", "lambda", "estimate", "ci_low", "ci_high",
    "classical_estimate", "judge_estimate",
}  # fmt: skip
ATTRIBUTES = ("accurate", "thorough", "useful")


@pytest.fixture(scope="module")
def audit_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db = tmp_path_factory.mktemp("ppi") / "audit.duckdb"
    result = invoke(
        "audit", *_data_flags(), "--rubric", "pdsqi9", "--model", "mock/judge", "--samples", "1",
        "--boot", "50", "--db", str(db), "--no-progress", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return db, json.loads(result.stdout)["run_id"]


def _finals(db: Path, run_id: str) -> dict[tuple[str, str], dict[str, float]]:
    rows = query(
        db,
        "SELECT i.vendor, json_extract_string(i.meta, '$.encounter_id'), j.attribute, j.value "
        "FROM items i JOIN judgments j USING (run_id, item_id) WHERE i.run_id = ? AND j.final "
        "AND j.status = 'ok' AND j.value IS NOT NULL",
        [run_id],
    )
    finals: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for vendor, encounter, attribute, value in rows:
        finals[(vendor, encounter)][attribute] = value
    return finals


def _write_ratings(path: Path, finals: dict, rated: list[tuple[str, str]], seed: int = 3) -> None:
    """Two raters per rated item, near the judge's score so the judge carries information."""
    rng = np.random.default_rng(seed)
    lines = []
    for vendor, encounter in rated:
        for rater in ("r1", "r2"):
            for attribute in ATTRIBUTES:
                score = int(
                    np.clip(finals[(vendor, encounter)][attribute] + rng.integers(-1, 2), 1, 5)
                )
                lines.append(
                    {"vendor": vendor, "item_id": encounter, "rater_id": rater,
                     "attribute": attribute, "score": score}
                )  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _labels(path: Path) -> dict[tuple[str, str], dict[str, float]]:
    collected: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for line in path.read_text().splitlines():
        r = json.loads(line)
        collected[(r["vendor"], r["item_id"])][r["attribute"]].append(r["score"])
    return {k: {a: float(np.mean(v)) for a, v in d.items()} for k, d in collected.items()}


def test_vendor_and_pair_estimates_equal_the_reference(audit_run, tmp_path) -> None:
    db, run_id = audit_run
    finals = _finals(db, run_id)
    rated = [key for i, key in enumerate(sorted(finals)) if i % 2 == 0]
    ratings = tmp_path / "ratings.jsonl"
    _write_ratings(ratings, finals, rated)
    done = invoke("audit", "--run", run_id, "--ratings", str(ratings), "--json", "--db", str(db))
    assert done.exit_code == 0, done.stderr
    audit = json.loads(done.stdout)
    labels = _labels(ratings)
    rows = {(r["vendor"], r["attribute"]): r for r in audit["ppi"]}
    assert all(set(r) >= ROW_KEYS for r in audit["ppi"])
    assert all(set(r) >= PAIR_KEYS for r in audit["ppi_pairs"])
    lambdas = []
    for vendor in ("vendor_a", "vendor_b", "vendor_c"):
        for attribute in ATTRIBUTES:
            keys = sorted(k for k in finals if k[0] == vendor and attribute in finals[k])
            y = np.array([labels[k][attribute] for k in keys if k in labels])
            yhat = np.array([finals[k][attribute] for k in keys if k in labels])
            yu = np.array([finals[k][attribute] for k in keys if k not in labels])
            lam, estimate, low, high = reference(y, yhat, yu)
            row = rows[(vendor, attribute)]
            assert (row["n"], row["N"]) == (len(y), len(yu))
            got = (row["lambda"], row["estimate"], row["ci_low"], row["ci_high"])
            assert got == pytest.approx((lam, estimate, low, high), abs=1e-9)
            assert row["classical_mean"] == pytest.approx(y.mean(), abs=1e-12)
            assert row["judge_mean"] == pytest.approx(np.concatenate([yhat, yu]).mean())
            lambdas.append(lam)
    assert any(lam > 0 for lam in lambdas)

    pair = next(
        r for r in audit["ppi_pairs"]
        if (r["first"], r["second"], r["attribute"]) == ("vendor_a", "vendor_b", "accurate")
    )  # fmt: skip
    shared = sorted(
        {e for v, e in finals if v == "vendor_a"} & {e for v, e in finals if v == "vendor_b"}
    )
    both = [e for e in shared if ("vendor_a", e) in labels and ("vendor_b", e) in labels]
    diff = lambda src, e: src[("vendor_a", e)]["accurate"] - src[("vendor_b", e)]["accurate"]  # noqa: E731
    y = np.array([diff(labels, e) for e in both])
    yhat = np.array([diff(finals, e) for e in both])
    yu = np.array([diff(finals, e) for e in shared if e not in both])
    if len(y) >= 2:
        lam, estimate, low, high = reference(y, yhat, yu)
        assert (pair["lambda"], pair["estimate"], pair["ci_low"], pair["ci_high"]) == pytest.approx(
            (lam, estimate, low, high), abs=1e-9
        )
    assert (pair["n"], pair["N"]) == (len(y), len(yu))
    sample = {s["vendor"]: s for s in audit["physician_sample"]}
    assert sample["vendor_a"]["rated"] == sum(k[0] == "vendor_a" for k in rated)

    table = invoke("audit", "--run", run_id, "--ratings", str(ratings), "--db", str(db))
    assert table.exit_code == 0 and "PPI++" in table.stderr
    report = tmp_path / "report"
    assert (
        invoke(
            "audit",
            "--run",
            run_id,
            "--ratings",
            str(ratings),
            "--db",
            str(db),
            "--out",
            str(report),
        ).exit_code
        == 0
    )
    page = (report / "report.html").read_text()
    assert 'data-chart="ppi-forest"' in page and "judge-corrected" in page


def test_a_sample_from_one_vendor_is_called_out(audit_run, tmp_path) -> None:
    db, run_id = audit_run
    finals = _finals(db, run_id)
    ratings = tmp_path / "one_vendor.jsonl"
    _write_ratings(ratings, finals, [k for k in sorted(finals) if k[0] == "vendor_a"][:4])
    done = invoke("audit", "--run", run_id, "--ratings", str(ratings), "--json", "--db", str(db))
    audit = json.loads(done.stdout)
    assert any("no physician ratings for vendor_b, vendor_c" in w for w in audit["ppi_warnings"])
    assert all(r["estimate"] is None for r in audit["ppi"] if r["vendor"] != "vendor_a")


def test_ratings_that_name_no_item_of_the_run_exit_2(audit_run, tmp_path) -> None:
    db, run_id = audit_run
    ratings = tmp_path / "elsewhere.jsonl"
    ratings.write_text(
        json.dumps({"item_id": "other::x", "rater_id": "r", "attribute": "accurate", "score": 3})
        + "\n"
    )
    done = invoke("audit", "--run", run_id, "--ratings", str(ratings), "--db", str(db))
    assert done.exit_code == 2 and "no rating names an item of this run" in done.stderr


def test_plan_draws_a_seeded_sample_and_expects_narrower_intervals(audit_run, tmp_path) -> None:
    db, run_id = audit_run
    out = tmp_path / "to_rate.jsonl"
    first = invoke("audit", "plan", "--run", run_id, "--size", "3", "--seed", "5", "--out",
                   str(out), "--json", "--db", str(db))  # fmt: skip
    assert first.exit_code == 0, first.stderr
    again = invoke("audit", "plan", "--run", run_id, "--size", "3", "--seed", "5", "--json",
                   "--db", str(db))  # fmt: skip
    plan = json.loads(first.stdout)
    assert plan["sample"] == json.loads(again.stdout)["sample"]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    per_vendor = defaultdict(int)
    for line in lines:
        per_vendor[line["vendor"]] += 1
    assert dict(per_vendor) == {"vendor_a": 3, "vendor_b": 3, "vendor_c": 3}
    widths = [(w["ppi_half_width"], w["classical_half_width"]) for w in plan["expected"]]
    assert all(ppi <= classical for ppi, classical in widths), [w for w in widths if w[0] > w[1]]
    assert any(ppi < classical for ppi, classical in widths)
    finals = _finals(db, run_id)
    ratings = tmp_path / "rated.jsonl"
    _write_ratings(ratings, finals, [(r["vendor"], r["item_id"]) for r in lines])
    done = invoke("audit", "--run", run_id, "--ratings", str(ratings), "--json", "--db", str(db))
    assert done.exit_code == 0, done.stderr
    assert {r["n"] for r in json.loads(done.stdout)["ppi"] if r["attribute"] == "accurate"} == {3}


def test_a_bad_ratings_file_stops_a_new_audit_before_anything_is_judged(tmp_path) -> None:
    ratings = tmp_path / "bad.jsonl"
    ratings.write_text(
        json.dumps({"vendor": "vendor_a", "item_id": "demo-001", "rater_id": "r",
                    "attribute": "accurate", "score": 9}) + "\n"
    )  # fmt: skip
    db = tmp_path / "audit.duckdb"
    done = invoke(
        "audit", *_data_flags(), "--model", "mock/judge", "--ratings", str(ratings),
        "--db", str(db), "--no-progress",
    )  # fmt: skip
    assert done.exit_code == 2
    assert f"{ratings}:line 1: field score" in done.stderr
    assert not db.exists() or query(db, "SELECT count(*) FROM runs") == [(0,)]


def test_the_api_takes_ratings_like_the_cli(tmp_path) -> None:
    import clinjudge
    from tests.cli.test_audit_cli import EXAMPLES, VENDORS

    result = clinjudge.audit(
        [str(p) for p in VENDORS], model="mock/judge", samples=1, n_boot=50,
        db=str(tmp_path / "api.duckdb"), ratings=EXAMPLES / "ratings.jsonl",
    )  # fmt: skip
    assert result.ppi is not None and result.ppi_pairs is not None
    accurate = {r.vendor: r for r in result.ppi if r.attribute == "accurate"}
    assert {r.n for r in accurate.values()} == {3}  # the demo rates 3 items per vendor
    assert all(r.ci_low <= r.estimate <= r.ci_high for r in accurate.values())  # type: ignore[operator]


def test_the_viewer_audit_page_uses_imported_ratings(audit_run, tmp_path) -> None:
    import shutil
    import warnings

    from starlette.testclient import TestClient

    from clinjudge.reports import create_app
    from tests.cli.test_audit_cli import EXAMPLES

    db, run_id = audit_run
    copy = tmp_path / "copy.duckdb"
    shutil.copy(db, copy)
    done = invoke("ratings", "import", str(EXAMPLES / "ratings.jsonl"), "--db", str(copy))
    assert done.exit_code == 0, done.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        page = TestClient(create_app(copy, n_boot=20)).get(f"/runs/{run_id}/audit")
    assert page.status_code == 200
    assert "judge-corrected (PPI++)" in page.text
    assert page.text.count('data-chart="ppi-forest"') >= 7  # one per rated attribute
    assert "demo-002, demo-004, demo-007" in page.text  # vendor_a's rated encounters
