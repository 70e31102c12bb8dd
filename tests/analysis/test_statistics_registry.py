"""Agreement statistics come from one registry (issue 40): a statistic registered here, and
nowhere else, shows in `judge agree --json`, its terminal tables, the long rows and the report;
with none registered the output keeps its layout."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from clinjudge.analysis import (
    Estimate,
    PairedScores,
    Statistic,
    agreement_for_run,
    analyse_ratings,
    compare_runs,
    get_statistic,
    register_statistic,
    statistic_names,
    table_columns,
    unregister_statistic,
)
from clinjudge.errors import UserError
from clinjudge.inputs import load_ratings
from clinjudge.runs import RunStore
from tests.cli._helpers import invoke
from tests.ratings_data import ratings_matching, write_ratings

DEMO = Path(__file__).resolve().parents[2] / "examples" / "pdsqi9_demo_ratings.jsonl"
BOOT = "20"


def _mean_signed(scores: PairedScores) -> Estimate:
    diff = scores.judge_paired - scores.reference_paired
    return Estimate(float(diff.mean()) if diff.size else None, n_units=int(diff.size))


def _closeness(scores: PairedScores) -> float | None:
    diff = scores.judge_paired - scores.reference_paired
    return 1 - float(np.abs(diff).mean()) if diff.size else None


def _raters_spread(scores: PairedScores) -> float:
    """Mean over the rated units of the physicians' range (max - min)."""
    rated = scores.humans[~np.isnan(scores.humans).all(axis=1)]
    return float(np.mean(np.nanmax(rated, axis=1) - np.nanmin(rated, axis=1)))


MEAN_SIGNED = Statistic(
    name="mean_signed_difference",
    label="mean signed",
    help="Mean of judge minus the physicians' median.",
    compute=_mean_signed,
    digits=2,
)
CLOSENESS = Statistic(
    name="closeness",
    label="closeness",
    help="1 minus the mean |judge - physicians' median|.",
    compute=_closeness,
    higher_is_better=True,
    tables=frozenset({"compare"}),
)
SPREAD = Statistic(
    name="raters_spread",
    label="spread",
    help="Mean range of the physicians' scores per unit.",
    comparison="physicians_among_themselves",
    compute=_raters_spread,
    tables=frozenset({"raters"}),
)


@pytest.fixture
def registered() -> Iterator[None]:
    register_statistic(MEAN_SIGNED)
    register_statistic(SPREAD)
    yield
    unregister_statistic(MEAN_SIGNED.name)
    unregister_statistic(SPREAD.name)


def _expected_mean_signed(judge: str) -> dict[str, tuple[float, int]]:
    """By hand from the demo file: per attribute, mean of judge minus the others' median, and
    the units it covers."""
    scores: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for rating in load_ratings(str(DEMO)):
        if rating.attribute is not None and rating.score is not None:
            scores[(rating.attribute, rating.item_id)][rating.rater_id] = rating.score
    diffs: dict[str, list[float]] = defaultdict(list)
    for (attribute, _), by_rater in scores.items():
        others = [v for r, v in by_rater.items() if r != judge]
        if judge in by_rater and others:
            diffs[attribute].append(by_rater[judge] - statistics.median(others))
    return {a: (statistics.fmean(d), len(d)) for a, d in diffs.items()}


def test_a_registered_statistic_reaches_json_table_and_long_rows(registered: None) -> None:
    expected = _expected_mean_signed("phys-a")
    args = ("agree", "--ratings", str(DEMO), "--judge", "phys-a", "--boot", BOOT)
    printed = invoke(*args, "--json")
    assert printed.exit_code == 0, printed.stderr
    data = json.loads(printed.stdout)
    for attribute, (value, n_units) in expected.items():
        computed = data["per_attribute"][attribute]["statistics"]["mean_signed_difference"]
        assert (computed["value"], computed["n_units"]) == (pytest.approx(value), n_units)
    # The physicians' statistic is computed on their own scores, with or without a judge.
    assert data["pooled"]["statistics"]["raters_spread"]["value"] > 0

    table = invoke(*args, env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.stderr
    header = next(line for line in table.stdout.splitlines() if "ICC(3,k)" in line)
    assert header.index("kappa") < header.index("mean signed")  # after the built-in columns
    accurate = next(line for line in table.stdout.splitlines() if "│ accurate" in line)
    assert accurate.split("│")[-2].strip() == f"{expected['accurate'][0]:.2f}"

    raters = invoke("agree", "--ratings", str(DEMO), "--boot", BOOT, env={"COLUMNS": "250"})
    assert raters.exit_code == 0, raters.stderr
    assert "spread" in raters.stdout and "mean signed" not in raters.stdout

    analysis = analyse_ratings(load_ratings(str(DEMO)), judge="phys-a", n_boot=20)
    rows = analysis.to_arrow().to_pylist()
    mine = [r for r in rows if r["statistic"] == "mean_signed_difference"]
    assert [r["attribute"] for r in mine] == [*expected, "pooled"]
    assert all(r["comparison"] == "judge_vs_physicians" for r in mine)
    assert rows[-1]["statistic"] == "mean_signed_difference"  # the registry's order


def _mock_run(items_file: Path, db_path: Path, model: str) -> str:
    run = invoke("run", "--data", str(items_file), "--model", model, "--db", str(db_path))
    assert run.exit_code == 0, run.stderr
    return str(run.stdout.strip())


def test_a_registered_statistic_reaches_report_compare_and_viewer_not_an_older_cache(
    items_file: Path, db_path: Path, tmp_path: Path
) -> None:
    run_id = _mock_run(items_file, db_path, "mock/judge")
    other = _mock_run(items_file, db_path, "mock/other")
    ratings = write_ratings(tmp_path / "r.jsonl", ratings_matching(db_path, run_id))
    assert invoke("ratings", "import", str(ratings), "--db", str(db_path)).exit_code == 0
    with RunStore(db_path) as store:  # kept in the agreement cache before the registration
        before = agreement_for_run(store, run_id, n_boot=20)
    assert "statistics" not in before.to_dict()["pooled"]

    register_statistic(MEAN_SIGNED)
    register_statistic(CLOSENESS)
    try:
        with RunStore(db_path) as store:
            after = agreement_for_run(store, run_id, n_boot=20)
            # --sort takes a registered statistic with a better direction, best first
            ranked = compare_runs(store, [other, run_id], sort="closeness", n_boot=20)
            with pytest.raises(UserError, match="cannot sort by 'mean_signed_difference'"):
                compare_runs(store, [run_id], sort="mean_signed_difference", n_boot=20)
        assert [r.run_id for r in ranked.rows] == [run_id, other]
        assert not after.cached
        computed = after.pooled.statistics or {}
        assert computed["mean_signed_difference"].value == 0  # ratings match the judge
        out = tmp_path / "report"
        made = invoke("report", run_id, "--db", str(db_path), "--boot", BOOT, "--out", str(out))
        assert made.exit_code == 0, made.stderr
        markdown = (out / "report.md").read_text()
        html = (out / "report.html").read_text()
        compared = invoke("compare", run_id, other, "--db", str(db_path), "--boot", BOOT, "--json")
        table = invoke("compare", run_id, other, "--db", str(db_path), "--boot", BOOT)
        site = tmp_path / "site"
        exported = invoke(
            "view", "--db", str(db_path), "--export", str(site), "--compare", f"{run_id},{other}"
        )
        assert exported.exit_code == 0, exported.stderr
    finally:
        unregister_statistic(MEAN_SIGNED.name)
        unregister_statistic(CLOSENESS.name)
    header = next(line for line in markdown.splitlines() if "raters' ICC(3,k)" in line)
    assert header.rstrip(" |").endswith("mean signed")
    assert "mean signed: Mean of judge minus the physicians' median." in markdown
    assert "<th>mean signed</th>" in html
    # judge compare: a key of its own after the fixed ones, a column after AC2, in the report too
    rows = json.loads(compared.stdout)["runs"]
    assert list(rows[0])[-2:] == ["mean_signed_difference", "closeness"]
    assert rows[0]["mean_signed_difference"] == 0
    assert "mean signed" in table.stdout
    header = next(line for line in markdown.splitlines() if "| AC2 ord. |" in line)
    assert "| AC2 ord. | mean signed | closeness | mean \\|diff\\| |" in header
    # the viewer: the run page's agreement table and the compare page
    run_page = (site / "runs" / run_id / "index.html").read_text()
    assert "<th>AC2 ordinal</th><th>median diff</th><th>Wilcoxon p</th>" in run_page
    assert "<th>κ</th><th>mean signed</th><th>units</th>" in run_page
    (compare_page,) = (site / "compare").glob("*.html")
    assert "<th>AC2 ordinal</th><th>mean signed</th>" in compare_page.read_text()


def test_nothing_registered_keeps_the_layout() -> None:
    analysis = analyse_ratings(load_ratings(str(DEMO)), judge="phys-a", n_boot=20)
    assert all("statistics" not in block.to_dict() for _, block in analysis.blocks())
    assert table_columns("agree")[-1].label == "kappa"
    assert [c.label for c in table_columns("report")] == [
        "ICC(3,k)",
        "alpha ord.",
        "AC2 ord.",
        "median diff",
        "IQR",
        "Wilcoxon p",
        "% agree",
        "kappa",
        "raters' ICC(3,k)",
    ]


def test_registry_lookups(registered: None) -> None:
    assert get_statistic("mean_signed_difference") is MEAN_SIGNED
    assert statistic_names()[-2:] == ["mean_signed_difference", "raters_spread"]
    with pytest.raises(ValueError, match="unknown statistic 'nope'; registered statistics: "):
        get_statistic("nope")
    with pytest.raises(ValueError, match="comparison must be one of"):
        register_statistic(Statistic(name="x", help="", comparison="judge_vs_nobody"))


def test_the_recipe_in_docs_api_works_as_written() -> None:
    """docs/api.md's "your own agreement statistic" code registers a statistic that is computed
    as the test's own (the same numbers in every block)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in page.split("```python\n")[1:]]
    (code,) = [b for b in blocks if "register_statistic(" in b]
    try:
        exec(compile(code, "docs/api.md", "exec"), {})  # noqa: S102 - our own documentation
        documented = analyse_ratings(load_ratings(str(DEMO)), judge="phys-a", n_boot=20)
    finally:
        unregister_statistic("mean_signed_difference")
    expected = _expected_mean_signed("phys-a")
    for attribute, (value, n_units) in expected.items():
        computed = (documented.per_attribute[attribute].statistics or {})["mean_signed_difference"]
        assert (computed.value, computed.n_units) == (pytest.approx(value), n_units)


HOSTILE = Statistic(
    name="hostile_label",
    label="<script>alert(1)</script>[red]x[/red]",
    help="<img src=x onerror=alert(2)> **bold** [link=http://e.x]y[/link]",
    compute=_mean_signed,
    digits=2,
)


def test_a_plugins_label_and_help_are_shown_as_text_everywhere(
    items_file: Path, db_path: Path, tmp_path: Path
) -> None:
    """A statistic's label and help come from a plugin's code: the report, the viewer and the
    terminal show them as text, never as markup."""
    run_id = _mock_run(items_file, db_path, "mock/judge")
    ratings = write_ratings(tmp_path / "r.jsonl", ratings_matching(db_path, run_id))
    assert invoke("ratings", "import", str(ratings), "--db", str(db_path)).exit_code == 0
    register_statistic(HOSTILE)
    try:
        out, site = tmp_path / "report", tmp_path / "site"
        made = invoke("report", run_id, "--db", str(db_path), "--boot", BOOT, "--out", str(out))
        shown = invoke(
            "agree", run_id, "--db", str(db_path), "--boot", BOOT, env={"COLUMNS": "400"}
        )
        exported = invoke("view", "--db", str(db_path), "--export", str(site))
    finally:
        unregister_statistic(HOSTILE.name)
    assert made.exit_code == 0 and shown.exit_code == 0 and exported.exit_code == 0
    html = (out / "report.html").read_text()
    page = (site / "runs" / run_id / "index.html").read_text()
    for text in (html, page):
        assert "<script>alert(1)" not in text and "<img src=x" not in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "[red]x[/red]" in shown.stdout  # rich markup printed as written, not applied
