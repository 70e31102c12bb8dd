"""`judge ratings import`, `judge agree`, `judge compare` and `judge report` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli._helpers import invoke, scalar
from tests.factories import make_items, write_jsonl
from tests.ratings_data import ratings_matching, write_ratings

BOOT = "100"
LIKERT = ["citation", "accurate", "thorough", "useful", "organized", "comprehensible", "succinct"]
BINARY = ["voice_summ", "voice_note"]


def _mock_run(data: Path, db: Path, *extra: str) -> str:
    result = invoke(
        "run",
        "--data",
        str(data),
        "--model",
        "mock/judge",
        "--db",
        str(db),
        "--samples",
        "3",
        "--no-progress",
        *extra,
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture
def rated_run(items_file: Path, db_path: Path, tmp_path: Path) -> str:
    """A mock run and imported ratings whose median equals the judge's final scores."""
    run_id = _mock_run(items_file, db_path)
    ratings = write_ratings(tmp_path / "ratings.jsonl", ratings_matching(db_path, run_id))
    result = invoke("ratings", "import", str(ratings), "--rubric", "pdsqi9", "--db", str(db_path))
    assert result.exit_code == 0, result.stderr
    assert "imported 198 rating(s) of 6 item(s) by 3 rater(s)" in result.stderr
    assert "198 new" in result.stderr
    return run_id


def test_ratings_import_is_idempotent(rated_run: str, db_path: Path, tmp_path: Path) -> None:
    ratings = write_ratings(tmp_path / "again.jsonl", ratings_matching(db_path, rated_run))
    result = invoke("ratings", "import", str(ratings), "--db", str(db_path))
    assert result.exit_code == 0, result.stderr
    assert "0 new, 0 changed, 198 unchanged" in result.stderr
    assert scalar(db_path, "SELECT count(*) FROM human_ratings") == 198
    listed = invoke("ratings", "list", "--db", str(db_path))
    assert listed.exit_code == 0
    assert "dr_a" in listed.stdout and "66" in listed.stdout


def test_ratings_import_errors_name_line_and_field(db_path: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"item_id": "i1", "rater_id": "r1", "attribute": "accurate", "score": 4}\n'
        '{"item_id": "i1", "rater_id": "r1", "attribute": "accuracy", "score": 4}\n'
        '{"item_id": "i1", "rater_id": "r1", "attribute": "thorough", "score": 9}\n'
    )
    result = invoke("ratings", "import", str(bad), "--db", str(db_path))
    assert result.exit_code == 2
    assert "nothing was written" in result.stderr
    assert f"{bad}:line 2: field attribute" in result.stderr
    assert f"{bad}:line 3: field score" in result.stderr
    assert scalar(db_path, "SELECT count(*) FROM human_ratings") == 0
    missing = invoke("ratings", "import", str(tmp_path / "nope.csv"), "--db", str(db_path))
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    rubric = invoke("ratings", "import", str(bad), "--rubric", "nope", "--db", str(db_path))
    assert rubric.exit_code == 2


def test_agree_json_structure_and_perfect_judge(rated_run: str, db_path: Path) -> None:
    result = invoke("agree", rated_run, "--db", str(db_path), "--json", "--boot", BOOT)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["run_id"] == rated_run
    assert data["simulated"] is True
    assert data["judge_rater"] == "judge"
    assert data["raters"] == ["dr_a", "dr_b", "dr_c"]
    assert set(data) >= {"per_attribute", "pooled", "notes", "mean_abs_difference"}
    assert "abstraction" not in data["per_attribute"]
    assert set(data["per_attribute"]) <= set(LIKERT + ["synthesized"] + BINARY)
    assert set(LIKERT + BINARY) <= set(data["per_attribute"])

    pooled = data["pooled"]
    for key in ("icc", "krippendorff_alpha", "gwet_ac2", "primary", "wilcoxon", "differences"):
        assert key in pooled, key
    assert set(pooled["icc"]) == {"ICC1", "ICC2", "ICC3", "ICC1k", "ICC2k", "ICC3k"}
    assert set(pooled["krippendorff_alpha"]) == {"nominal", "ordinal", "interval"}
    assert set(pooled["gwet_ac2"]) == {"ordinal", "quadratic"}
    assert pooled["wilcoxon"]["zero_method"] == "wilcox"
    assert pooled["primary"]["value"] == pytest.approx(1.0)
    assert len(pooled["primary"]["ci95"]) == 2
    assert [s["rater"] for s in pooled["substitution"]] == ["dr_a", "dr_b", "dr_c"]
    assert set(pooled["added_rater"]) >= {"delta_icc", "p"}

    for key in LIKERT:
        block = data["per_attribute"][key]
        if block["primary"]["value"] is not None:  # None only when the judge never varied
            assert block["primary"]["value"] == pytest.approx(1.0), key
        assert block["median_difference"] == 0
    for key in BINARY:
        block = data["per_attribute"][key]
        assert block["scale"] == "binary"
        assert "percent_agreement" in block and "kappa" in block
        assert block["primary"]["percent_agreement"] == 1.0


def test_agree_table(rated_run: str, db_path: Path) -> None:
    result = invoke("agree", rated_run[:18], "--db", str(db_path), "--boot", BOOT)
    assert result.exit_code == 0, result.stderr
    assert "SIMULATED" in result.stderr
    out = result.stdout
    assert f"run {rated_run}" in out and "[SIMULATED]" in out
    for header in ("ICC(3,k)", "95% CI", "alpha ord.", "AC2 ord.", "Wilcoxon p", "% agree"):
        assert header in out
    pooled = next(line for line in out.splitlines() if "pooled" in line)
    assert "1.000" in pooled
    assert "voice_summ" in out and "accurate" in out and "abstraction" not in out


def test_agree_errors(rated_run: str, db_path: Path, tmp_path: Path) -> None:
    unrated_data = write_jsonl(tmp_path / "unrated.jsonl", make_items(2, prefix="zz"))
    unrated = _mock_run(unrated_data, db_path)
    result = invoke("agree", unrated, "--db", str(db_path), "--boot", BOOT)
    assert result.exit_code == 2
    assert "no human ratings overlap run" in result.stderr
    assert invoke("agree", "nope", "--db", str(db_path)).exit_code == 2
    assert invoke("agree", "--db", str(db_path)).exit_code == 2
    both = invoke("agree", rated_run, "--ratings", "x.jsonl", "--db", str(db_path))
    assert both.exit_code == 2


def test_agree_several_runs_prints_a_list(rated_run: str, db_path: Path) -> None:
    result = invoke("agree", rated_run, rated_run, "--db", str(db_path), "--json", "--boot", BOOT)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, list) and len(data) == 2


def test_agree_standalone_ratings_file(tmp_path: Path) -> None:
    rows = []
    for unit, (a, b, c, judge) in enumerate(
        [(3, 4, 4, 4), (2, 2, 1, 2), (5, 4, 5, 5), (1, 2, 1, 1)]
    ):
        for rater, score in (("a", a), ("b", b), ("c", c), ("llm", judge)):
            rows.append({"unit_id": f"u{unit}", "rater_id": rater, "score": score})
    path = tmp_path / "standalone.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = invoke("agree", "--ratings", str(path), "--judge", "llm", "--json", "--boot", BOOT)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["per_attribute"] == {}
    assert data["pooled"]["primary"]["value"] == pytest.approx(1.0)
    assert data["pooled"]["raters"] == ["a", "b", "c"]
    no_judge = invoke("agree", "--ratings", str(path), "--judge", "nobody", "--json")
    assert no_judge.exit_code == 2 and "nobody" in no_judge.stderr
    raters_only = invoke("agree", "--ratings", str(path), "--json", "--boot", BOOT)
    assert raters_only.exit_code == 0
    assert "primary" not in json.loads(raters_only.stdout)["pooled"]
    # Without --json a ratings file gets the table of `judge agree RUN`, not JSON.
    table = invoke("agree", "--ratings", str(path), "--judge", "llm", "--boot", BOOT)
    assert table.exit_code == 0, table.stderr
    assert not table.stdout.lstrip().startswith("{")
    assert "ICC(3,k)" in table.stdout and "Wilcoxon p" in table.stdout
    (pooled,) = [line for line in table.stdout.splitlines() if "pooled" in line]
    cells = [c.strip() for c in pooled.strip("│┃| ").split("│")]
    assert cells[:3] == ["pooled", "4", "1.000"]  # units, the judge's ICC(3,k) of 1


def test_compare_table_and_json(rated_run: str, db_path: Path, items_file: Path) -> None:
    other = _mock_run(items_file, db_path, "--name", "second-judge", "--model", "mock/other")
    result = invoke(
        "compare", other, rated_run, "--db", str(db_path), "--sort", "icc3k", "--boot", BOOT
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if rated_run in line)
    second = next(i for i, line in enumerate(lines) if other in line)
    assert first < second  # best agreement first
    assert "second-judge" in result.stdout
    assert "mock/judge (SIMULATED)" in result.stdout
    for header in ("ICC(3,k)", "alpha ord.", "AC2 ord.", "mean |diff|", "cost/item", "shots"):
        assert header in result.stdout
    as_json = invoke("compare", rated_run, other, "--db", str(db_path), "--json", "--boot", BOOT)
    assert as_json.exit_code == 0, as_json.stderr
    rows = json.loads(as_json.stdout)["runs"]
    assert [r["run_id"] for r in rows] == [rated_run, other]
    assert rows[0]["icc3k"] == pytest.approx(1.0)
    assert rows[0]["model"] == "mock/judge" and rows[1]["name"] == "second-judge"
    for key in (
        "rubric",
        "mode",
        "shots",
        "samples",
        "alpha_ordinal",
        "ac2_ordinal",
        "mean_abs_diff",
        "failed_samples",
        "cost_per_item_usd",
        "latency_per_item_s",
    ):
        assert key in rows[0], key
    bad = invoke("compare", rated_run, "--db", str(db_path), "--sort", "colour")
    assert bad.exit_code == 2 and "cannot sort by" in bad.stderr


def test_report_command(rated_run: str, db_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    result = invoke("report", rated_run, "--out", str(out), "--db", str(db_path), "--boot", BOOT)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == str(out / "report.html")
    html = (out / "report.html").read_text()
    assert "SIMULATED" in html
    assert html.count("<svg") == html.count('<figure class="chart"') > 0
    assert "https://" not in html and "http://" not in html
    assert (out / "report.md").read_text().startswith("> **SIMULATED**")

    several = invoke("report", rated_run, rated_run, "--out", str(out), "--db", str(db_path))
    assert several.exit_code == 2 and "--compare" in several.stderr
    cmp_out = tmp_path / "cmp"
    compared = invoke(
        "report",
        "--compare",
        rated_run,
        "--out",
        str(cmp_out),
        "--db",
        str(db_path),
        "--boot",
        BOOT,
    )
    assert compared.exit_code == 0, compared.stderr
    assert 'data-chart="cost-agreement"' in (cmp_out / "report.html").read_text()


def test_agree_help_loads_no_statistics_store_or_model_clients() -> None:
    """`judge agree --help` is as quick as `judge run --help` because the command module
    imports scipy, the store, the reports and the model clients only when a command runs
    (bench/startup.py times it)."""
    import subprocess
    import sys

    heavy = ("scipy", "duckdb", "clinjudge.runs", "clinjudge.reports", "clinjudge.judges", "openai")
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from clinjudge.cli import app\n"
        "for command in ('agree', 'compare', 'report'):\n"
        "    done = CliRunner().invoke(app, [command, '--help'])\n"
        "    assert done.exit_code == 0, done.output\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_report_help_shows_the_reports_default_row_count() -> None:
    from clinjudge.reports import DEFAULT_MAX_ITEMS

    shown = invoke("report", "--help", env={"COLUMNS": "200"})
    line = next(line for line in shown.stdout.splitlines() if "--max-items" in line)
    following = shown.stdout.split(line, 1)[1].splitlines()[0]
    assert f"[default: {DEFAULT_MAX_ITEMS}]" in line + following


def test_agree_keeps_its_analysis_for_the_next_agree(rated_run: str, db_path: Path) -> None:
    """`judge agree` alone keeps what it computed, as compare and report do: the second call
    reads the analysis back instead of bootstrapping again, with the same numbers."""
    first = invoke("agree", rated_run, "--db", str(db_path), "--json", "--boot", BOOT)
    second = invoke("agree", rated_run, "--db", str(db_path), "--json", "--boot", BOOT)
    assert first.exit_code == 0 and second.exit_code == 0, first.stderr + second.stderr
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert one["cached"] is False and two["cached"] is True
    assert one["per_attribute"] == two["per_attribute"]
    assert scalar(db_path, "SELECT count(*) FROM agreement_cache") >= 1


def test_agree_compare_and_report_work_while_another_process_reads_the_store(
    rated_run: str, db_path: Path, tmp_path: Path
) -> None:
    """Keeping analyses needs the store for writing; while another process reads it (a
    `judge view` server), the analysis commands read it too and keep nothing, not fail."""
    reader = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1], "
         "read_only=True); print('ready', flush=True); sys.stdin.read()", str(db_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
        agreed = invoke("agree", rated_run, "--db", str(db_path), "--json", "--boot", BOOT)
        compared = invoke("compare", rated_run, "--db", str(db_path), "--boot", BOOT)
        out = tmp_path / "report"
        reported = invoke("report", rated_run, "--db", str(db_path), "--out", str(out))
    finally:
        reader.communicate("", timeout=30)
    assert agreed.exit_code == 0, agreed.stderr
    assert compared.exit_code == 0, compared.stderr
    assert reported.exit_code == 0 and (out / "report.md").is_file(), reported.stderr
    assert json.loads(agreed.stdout)["cached"] is False
    assert scalar(db_path, "SELECT count(*) FROM agreement_cache") == 0  # nothing kept
