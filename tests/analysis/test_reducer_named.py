"""Results and reports name the reducer that made a run's final scores: a `--reduce mean`
run is not described as the median of its samples, and a default run reads as before."""

from __future__ import annotations

import json
from pathlib import Path

import clinjudge
from clinjudge.rubrics import load_rubric
from tests.factories import make_items, write_jsonl


def _vendors(tmp_path: Path) -> list[Path]:
    files = []
    for vendor in ("north", "south"):
        items = make_items(4)
        for item in items:
            item.summary = f"{vendor} scribe: {item.summary}"
        files.append(write_jsonl(tmp_path / f"{vendor}.jsonl", items))
    return files


def test_an_audit_names_its_reducer_only_when_it_is_not_the_median(tmp_path: Path) -> None:
    files = _vendors(tmp_path)
    db = tmp_path / "audit.duckdb"
    mean = clinjudge.audit(
        files, model="mock/judge", db=db, samples=3, reduce="mean",
        report_dir=tmp_path / "mean", n_boot=20,
    )  # fmt: skip
    default = clinjudge.audit(
        files, model="mock/judge", db=db, samples=3, report_dir=tmp_path / "median", n_boot=20
    )
    assert mean.statistics()["reducer"] == "mean"
    assert "reducer" not in default.statistics()
    mean_md = (tmp_path / "mean" / "report.md").read_text()
    median_md = (tmp_path / "median" / "report.md").read_text()
    assert "the mean of its valid samples" in mean_md and "median of its valid" not in mean_md
    assert "the median of its valid samples" in median_md


def _ratings(tmp_path: Path, item_ids: list[str]) -> Path:
    rows = []
    for attribute in load_rubric("pdsqi9").attributes:
        for item in item_ids:
            for rater, shift in (("dr_a", 0), ("dr_b", 1)):
                points = attribute.max - attribute.min + 1
                # A gate's 1 keeps the attributes it gates required (never null).
                score = attribute.max if points == 2 else attribute.min + (shift + 2) % points
                rows.append(
                    {"item_id": item, "rater_id": rater, "attribute": attribute.key,
                     "score": score}
                )  # fmt: skip
    path = tmp_path / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_agreement_says_how_the_judges_value_was_made(tmp_path: Path) -> None:
    items = make_items(5)
    data = write_jsonl(tmp_path / "items.jsonl", items)
    db = tmp_path / "agree.duckdb"
    mean_run = clinjudge.evaluate(data, model="mock/judge", db=db, samples=3, reduce="mean")
    median_run = clinjudge.evaluate(data, model="mock/judge", db=db, samples=3)
    clinjudge.import_ratings(_ratings(tmp_path, [i.id for i in items]), db=db)
    mean = clinjudge.load_run(mean_run.run_id, db=db).agreement(n_boot=20)
    median = clinjudge.load_run(median_run.run_id, db=db).agreement(n_boot=20)
    assert mean.reducer == "mean" and "mean of the run's valid samples" in (mean.judge_value or "")
    assert mean.to_dict()["reducer"] == "mean"
    assert median.judge_value == "final (median of the run's valid samples) per item and attribute"
    assert "reducer" not in median.to_dict()
