"""Pooled DocLens scores, `judge runs show` and `judge export` on a DocLens run made through
`judge run --rubric doclens --config judge.yaml` against the fake server."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from clinjudge.analysis import doclens_report, pooled_scores
from clinjudge.runs import RunStore
from tests.cli._helpers import invoke
from tests.factories import judged_doclens_run, write_jsonl
from tests.fake_openai import FakeOpenAIServer


@pytest.fixture(scope="module")
def doclens_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A DocLens run of the two hand-checked items, started from the CLI with a config file."""
    return judged_doclens_run(tmp_path_factory.mktemp("doclens"))


def test_pooled_scores_per_section_and_total(doclens_run: tuple[Path, str]) -> None:
    db, run_id = doclens_run
    with RunStore(db) as store:
        rows = {r["section"]: r for r in pooled_scores(store, run_id)}
        report = doclens_report(store, run_id)
    assert list(rows) == ["assessment_and_plan", "subjective", "total"]
    sub, plan, total = rows["subjective"], rows["assessment_and_plan"], rows["total"]
    assert (sub["claim_recall"], sub["citation_precision"]) == pytest.approx((2 / 3, 2 / 4))
    assert (plan["claim_recall"], plan["citation_recall"]) == pytest.approx((1.0, 1 / 3))
    # Pooled over both items: 4 of 5 reference claims, 4 of 6 output claims, 3 of 6 statements,
    # 3 of 7 citations.
    assert report is not None
    assert [total[k] for k in report.macro.to_dict()] == pytest.approx([4 / 5, 4 / 6, 3 / 6, 3 / 7])
    assert (total["reference_claims"], total["citations"], total["citations_counted"]) == (5, 7, 3)
    assert total["items"] == 2 and total["extraction_failed"] == 0
    # The per-instance mean differs from DocLens's pooling: (2/3 + 1) / 2 for claim recall.
    assert report.agent == "judge"
    assert report.macro.claim_recall == pytest.approx(5 / 6)


def test_runs_show_prints_doclens_table(doclens_run: tuple[Path, str]) -> None:
    db, run_id = doclens_run
    result = invoke("runs", "show", run_id, "--db", str(db))
    assert result.exit_code == 0, result.stderr
    assert "DocLens pooled (micro) scores" in result.stdout
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "metric" in line)
    assert header.rstrip(" ┃│").endswith("total")  # sections as columns, the total last
    recall = next(line for line in lines if "claim recall" in line)
    citation_recall = next(line for line in lines if "citation recall" in line)
    assert recall.rstrip(" │").endswith("0.800")
    assert "0.429" in " ".join(lines)
    assert citation_recall.split("│")[1].strip() == "citation recall"
    as_json = json.loads(invoke("runs", "show", run_id, "--db", str(db), "--json").stdout)
    assert as_json["doclens"]["pooled"][-1]["section"] == "total"


def test_export_claims_and_pooled_scores(doclens_run: tuple[Path, str], tmp_path: Path) -> None:
    db, run_id = doclens_run
    out = tmp_path / "claims.parquet"
    result = invoke(
        "export", run_id, "--out", str(out), "--format", "parquet", "--db", str(db),
        "--table", "claims",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 2 * 2 + 3 + 3 + 3 + 2 + 3 + 3  # extraction rows + claims + statements
    assert {r["kind"] for r in rows} == {"extraction", "recall", "precision", "citation"}
    assert {r["section"] for r in rows} == {"subjective", "assessment_and_plan"}

    scores = tmp_path / "doclens.jsonl"
    result = invoke("export", run_id, "--out", str(scores), "--db", str(db), "--table", "doclens")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in scores.read_text().splitlines()]
    assert [line["section"] for line in lines] == ["assessment_and_plan", "subjective", "total"]
    assert lines[-1]["claim_recall"] == pytest.approx(0.8)

    bad = invoke("export", run_id, "--out", str(tmp_path / "x"), "--db", str(db), "--table", "x")
    assert bad.exit_code != 0


def test_non_doclens_run_has_no_doclens_report(tmp_path: Path) -> None:
    from tests.factories import make_items

    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer() as server:
        result = invoke(
            "run", "--data", str(data), "--model", "openai/x", "--base-url", server.base_url,
            "--db", str(db), "--no-progress",
        )  # fmt: skip
    run_id = result.stdout.strip()
    with RunStore(db) as store:
        assert doclens_report(store, run_id) is None
    export = invoke(
        "export", run_id, "--out", str(tmp_path / "c.jsonl"), "--db", str(db), "--table", "claims"
    )
    assert export.exit_code != 0
    assert not (tmp_path / "c.jsonl").exists()
