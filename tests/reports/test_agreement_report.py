"""agreement_for_run, compare_runs and the HTML/Markdown reports on small runs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clinjudge.analysis import AgreementError, agreement_for_run, compare_runs
from clinjudge.judges import ModelSettings
from clinjudge.judges.clients._settings import Price
from clinjudge.orchestration import RunConfig, create_run, execute_run, prepare_run
from clinjudge.reports import write_report
from clinjudge.rubrics import Rubric
from clinjudge.runs import RunStore, import_ratings
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer
from tests.ratings_data import ratings_matching, write_ratings

ROOT = Path(__file__).resolve().parents[2]
BOOT = 100
AGREEMENT_KEYS = [
    "citation",
    "accurate",
    "thorough",
    "useful",
    "organized",
    "comprehensible",
    "succinct",
    "synthesized",
    "voice_summ",
    "voice_note",
]
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)


def _run(db: Path, data: Path, judge: ModelSettings, samples: int = 3, name: str | None = None):
    config = RunConfig(data=str(data), judge=judge, samples=samples, db=str(db), name=name)
    prepared = prepare_run(config)
    with RunStore(db) as store:
        run_id = create_run(store, prepared)
        tally = execute_run(store, run_id, prepared, show_progress=False)
    assert tally.failed == 0
    return run_id


@pytest.fixture
def runs(items_file: Path, db_path: Path, tmp_path: Path, pdsqi9: Rubric) -> dict[str, str]:
    """Three mock runs: the one the ratings match, another judge, and one on other items."""
    matched = _run(db_path, items_file, ModelSettings(model="mock/judge"), name="matched")
    other = _run(db_path, items_file, ModelSettings(model="mock/other"), name="other")
    unrated_data = write_jsonl(tmp_path / "unrated.jsonl", make_items(3, prefix="unrated"))
    unrated = _run(db_path, unrated_data, ModelSettings(model="mock/judge"), samples=1)
    ratings = write_ratings(tmp_path / "ratings.jsonl", ratings_matching(db_path, matched))
    with RunStore(db_path) as store:
        import_ratings(store, ratings, pdsqi9)
    return {"matched": matched, "other": other, "unrated": unrated}


def test_agreement_of_a_judge_equal_to_the_human_median(
    runs: dict[str, str], db_path: Path
) -> None:
    with RunStore(db_path, read_only=True) as store:
        typed = agreement_for_run(store, runs["matched"], n_boot=BOOT, seed=1)
    result = typed.to_dict()  # the layout of `judge agree --json`
    pooled_judge = typed.pooled.judge_vs_physicians
    assert pooled_judge is not None and pooled_judge.icc is not None
    assert pooled_judge.icc.value == pytest.approx(1.0)
    assert result["run_id"] == runs["matched"]
    assert result["simulated"] is True
    assert result["raters"] == ["dr_a", "dr_b", "dr_c"]
    assert (result["n_items_run"], result["n_items_rated"]) == (6, 6)
    # abstraction is `agreement: false` in PDSQI-9; rubric order is kept.
    assert list(result["per_attribute"]) == [
        k for k in AGREEMENT_KEYS if k in result["per_attribute"]
    ]
    assert "abstraction" not in result["per_attribute"]
    assert set(result["binary_attributes"]) == {"voice_summ", "voice_note"}
    pooled = result["pooled"]
    assert pooled["primary"]["form"] == "ICC3k"
    assert pooled["primary"]["value"] == pytest.approx(1.0)
    assert pooled["median_difference"] == 0
    assert set(pooled["differences"]) == {"0"}
    assert result["mean_abs_difference"]["pooled"] == 0
    assert set(pooled["attributes"]) == set(AGREEMENT_KEYS) - {"voice_summ", "voice_note"}
    likert = [k for k in AGREEMENT_KEYS[:7] if result["per_attribute"][k]["primary"]["value"]]
    assert len(likert) >= 5
    for key in likert:
        assert result["per_attribute"][key]["primary"]["value"] == pytest.approx(1.0)
    for key in ("voice_summ", "voice_note"):
        block = result["per_attribute"][key]
        assert block["scale"] == "binary"
        assert block["primary"]["percent_agreement"] == 1.0
    assert result["n_boot"] == BOOT


def test_no_overlap_is_a_clear_error(runs: dict[str, str], db_path: Path) -> None:
    with (
        RunStore(db_path, read_only=True) as store,
        pytest.raises(AgreementError, match="no human ratings overlap run"),
    ):
        agreement_for_run(store, runs["unrated"], n_boot=BOOT)


def test_compare_rows(runs: dict[str, str], db_path: Path) -> None:
    with RunStore(db_path, read_only=True) as store:
        comparison = compare_runs(
            store,
            [runs["other"], runs["unrated"], runs["matched"][:21]],
            sort="icc3k",
            n_boot=BOOT,
        )
    rows = comparison.rows
    assert [r.run_id for r in rows] == [runs["matched"], runs["other"], runs["unrated"]]
    best, other, unrated = rows
    assert best.icc3k == pytest.approx(1.0)
    assert best.mean_abs_diff == 0
    assert other.icc3k is not None and other.icc3k < best.icc3k
    assert other.mean_abs_diff > 0
    assert unrated.icc3k is None and unrated.items_rated == 0
    assert any(runs["unrated"] in note for note in comparison.notes)
    for row in rows:
        assert row.rubric == "pdsqi9 1.0.0"
        assert row.mode == "single"
        assert row.simulated is True
        assert row.shots == 0
        assert row.failed_samples == 0
        assert row.cost_per_item_usd is not None
        assert row.latency_per_item_s is not None and row.latency_per_item_s >= 0
    assert (best.samples, best.samples_total) == (3, 18)
    assert (unrated.samples, unrated.samples_total) == (1, 3)
    with RunStore(db_path, read_only=True) as store:
        by_cost = compare_runs(store, [runs["matched"]], sort="cost_per_item_usd", n_boot=BOOT)
        assert len(by_cost.rows) == 1
        with pytest.raises(ValueError, match="cannot sort by"):
            compare_runs(store, [runs["matched"]], sort="nonsense")


def _without_cached_flag(agreements: dict) -> dict:
    return {
        rid: a if a is None else {k: v for k, v in a.to_dict().items() if k != "cached"}
        for rid, a in agreements.items()
    }


def test_compare_reuses_stored_agreement_until_its_input_changes(
    runs: dict[str, str], db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clinjudge.analysis import _agreement_run

    computed: list[int] = []
    real = _agreement_run.analyse_ratings

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        computed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_agreement_run, "analyse_ratings", counting)
    ids = [runs["matched"], runs["other"], runs["unrated"]]
    with RunStore(db_path) as store:
        first = compare_runs(store, ids, n_boot=BOOT)
    assert len(computed) == 2  # the unrated run has nothing to analyse
    assert not any(a and a.cached for a in first.agreements.values())
    with RunStore(db_path) as store:
        second = compare_runs(store, ids, n_boot=BOOT)
        report_dir = db_path.parent / "cached-report"
        write_report(store, ids, report_dir, compare=True, n_boot=BOOT)
    with RunStore(db_path, read_only=True) as store:  # reading the cache needs no write access
        third = compare_runs(store, ids, n_boot=BOOT)
        fresh = agreement_for_run(store, runs["matched"], n_boot=BOOT, cache=False)
    assert len(computed) == 3  # only the cache=False call
    kept = second.agreements[runs["matched"]]
    assert kept is not None and kept.cached is True
    assert second.rows == first.rows == third.rows
    assert _without_cached_flag(second.agreements) == _without_cached_flag(first.agreements)
    assert (
        _without_cached_flag({"m": fresh})["m"]
        == _without_cached_flag(first.agreements)[runs["matched"]]
    )

    # Other settings are another cache entry.
    with RunStore(db_path) as store:
        compare_runs(store, [runs["matched"]], n_boot=BOOT, seed=1)
    assert len(computed) == 4

    # A changed rating changes the fingerprint of both runs on these items: recomputed.
    with RunStore(db_path) as store:
        item, attribute = store.query(
            "SELECT item_id, attribute FROM human_ratings WHERE rater_id = 'dr_a' "
            "AND attribute = 'accurate' ORDER BY item_id LIMIT 1"
        )[0].values()
        store.con.execute(
            "UPDATE human_ratings SET score = CASE WHEN score = 1 THEN 5 ELSE 1 END "
            "WHERE item_id = ? AND attribute = ? AND rater_id IN ('dr_a', 'dr_b')",
            [item, attribute],
        )
        changed = compare_runs(store, ids, n_boot=BOOT)
    assert len(computed) == 6
    before = first.agreements[runs["matched"]].to_dict()["per_attribute"]["accurate"]  # type: ignore[union-attr]
    after = changed.agreements[runs["matched"]].to_dict()["per_attribute"]["accurate"]  # type: ignore[union-attr]
    assert after["differences"] != before["differences"]
    assert changed.rows[0].icc3k < 1.0  # the judge no longer equals the human median

    # A new rater's ratings change it again; an unchanged repeat does not.
    with RunStore(db_path) as store:
        store.con.execute(
            "INSERT INTO human_ratings (item_id, rater_id, attribute, score) "
            "SELECT item_id, 'dr_d', attribute, score FROM human_ratings WHERE rater_id = 'dr_a'"
        )
        compare_runs(store, ids, n_boot=BOOT)
        compare_runs(store, ids, n_boot=BOOT)
    assert len(computed) == 8
    with RunStore(db_path) as store:  # cache=False always computes
        compare_runs(store, [runs["matched"]], n_boot=BOOT, cache=False)
    assert len(computed) == 9


def test_older_databases_gain_the_agreement_cache_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    with RunStore(path) as store:
        store.con.execute("DROP TABLE agreement_cache")
    with RunStore(path, read_only=True) as store:
        assert not store.has_table("agreement_cache")
    with RunStore(path) as store:
        assert store.has_table("agreement_cache")


def _charts(html: str) -> tuple[int, int]:
    return html.count('<figure class="chart"'), html.count("<svg")


def _assert_self_contained(html: str) -> None:
    assert not EXTERNAL.search(html)
    assert "http://" not in html and "https://" not in html
    for tag in ("<script", "<link", "<img", "<iframe", "@import", "url("):
        assert tag not in html.lower()


def test_run_report_files(runs: dict[str, str], db_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    with RunStore(db_path, read_only=True) as store:
        files = write_report(store, [runs["matched"]], out, n_boot=BOOT)
        agreement = agreement_for_run(store, runs["matched"], n_boot=BOOT).to_dict()
    with_differences = [a for a, b in agreement["per_attribute"].items() if b["differences"]]
    assert len(with_differences) >= len(AGREEMENT_KEYS) - 1  # synthesized may have no unit
    assert files.html == out / "report.html" and files.html.is_file()
    assert files.markdown == out / "report.md" and files.markdown.is_file()
    html = files.html.read_text()
    _assert_self_contained(html)
    assert '<div class="banner" role="alert"><span class="big">SIMULATED</span>' in html
    assert html.index("SIMULATED") < html.index("<h1>")
    figures, svgs = _charts(html)
    assert figures == svgs
    assert html.count('data-chart="icc-ci"') == 1
    assert html.count('data-chart="diff-hist"') == len(with_differences)
    assert 'data-chart="cost-agreement"' not in html  # only in comparisons
    with RunStore(db_path, read_only=True) as store:
        (scored,) = store.query(
            "SELECT count(DISTINCT attribute) AS n FROM judgments "
            "WHERE run_id = ? AND final AND value IS NOT NULL",
            [runs["matched"]],
        )
    assert html.count('data-chart="score-dist"') == scored["n"] >= 10
    assert figures == 1 + len(with_differences) + scored["n"]
    assert runs["matched"] in html
    md = files.markdown.read_text()
    assert md.startswith("> **SIMULATED**")
    assert "| attribute | scale | units | ICC(3,k) |" in md
    assert "| pooled | ordinal |" in md
    assert "judge replaces dr_a" in md
    assert "Counts per difference" in md


def test_compare_report_with_a_real_model_run(
    runs: dict[str, str],
    db_path: Path,
    tmp_path: Path,
    items_file: Path,
    fake_openai: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    judge = ModelSettings(
        model="openai/local-judge",
        base_url=fake_openai.base_url,
        price=Price(input_per_mtok=1.0, output_per_mtok=4.0),
    )
    real = _run(db_path, items_file, judge, name="fake-server")
    out = tmp_path / "compare"
    ids = [runs["matched"], runs["other"], runs["unrated"], real]
    with RunStore(db_path, read_only=True) as store:
        files = write_report(store, ids, out, compare=True, n_boot=BOOT)
        comparison = compare_runs(store, [real], n_boot=BOOT)
    row = comparison.rows[0]
    assert row.simulated is False and row.cost_per_item_usd and row.cost_known
    html = files.html.read_text()
    _assert_self_contained(html)
    assert "SIMULATED" in html  # three of the four runs are simulated
    figures, svgs = _charts(html)
    assert figures == svgs
    assert html.count('data-chart="cost-agreement"') == 1
    assert html.count('data-chart="icc-ci"') == 3  # the unrated run has no agreement
    assert "Agreement not computed: no human ratings overlap run" in html
    for run_id in ids:
        assert run_id in html and run_id in files.markdown.read_text()

    # A report of only the real run carries no banner.
    with RunStore(db_path, read_only=True) as store:
        solo = write_report(store, [real], tmp_path / "solo", n_boot=BOOT)
    solo_html = solo.html.read_text()
    assert "SIMULATED" not in solo_html
    assert "SIMULATED" not in solo.markdown.read_text()
    _assert_self_contained(solo_html)


def test_report_arguments(runs: dict[str, str], db_path: Path, tmp_path: Path) -> None:
    with RunStore(db_path, read_only=True) as store:
        with pytest.raises(ValueError, match="one run"):
            write_report(store, [runs["matched"], runs["other"]], tmp_path / "x")
        with pytest.raises(ValueError, match="at least one run"):
            write_report(store, [], tmp_path / "x", compare=True)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(
    runs: dict[str, str], db_path: Path, tmp_path: Path
) -> None:
    with RunStore(db_path, read_only=True) as store:
        files = write_report(
            store, [runs["matched"], runs["other"]], tmp_path / "r", compare=True, n_boot=BOOT
        )
    png = tmp_path / "report.png"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "check_report_render.py"),
            str(files.html),
            "--png",
            str(png),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert png.is_file() and png.stat().st_size > 10_000
    assert "not background" in result.stdout
