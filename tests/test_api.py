"""The public Python API: evaluate, resume, load_run, agreement and compare, also inside a loop."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import clinjudge
from clinjudge.orchestration import ConfigError, run_config_from
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import PDSQI9_KEYS, FakeOpenAIServer


def test_public_api_is_declared() -> None:
    for name in ("evaluate", "evaluate_async", "resume", "load_run", "compare", "RunResult"):
        assert name in clinjudge.__all__
        assert getattr(clinjudge, name) is not None
    with pytest.raises(AttributeError):
        clinjudge.no_such_thing  # noqa: B018


def test_evaluate_against_a_server_stores_everything_and_loads_back(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(5))
    db = tmp_path / "api.duckdb"
    with FakeOpenAIServer() as srv:
        result = clinjudge.evaluate(
            data, model="openai/fake", base_url=srv.base_url, samples=2, db=db, name="nb"
        )
        requests = len(srv.requests)
    assert result.status == "completed" and not result.simulated
    assert (result.items, result.items_ok, result.samples_ok) == (5, 5, 10)
    assert result.calls == requests == 10
    run = result.load()
    assert run.info["name"] == "nb"
    finals = run.judgments(final=True)
    assert finals.num_rows == 5 * len(PDSQI9_KEYS)
    assert set(finals.column("attribute").to_pylist()) == set(PDSQI9_KEYS)
    assert run.judgments(final=False).num_rows == 10 * len(PDSQI9_KEYS)
    assert run.calls().num_rows == 10
    assert run.items().column("item_id").to_pylist() == [f"item-{n:04d}" for n in range(5)]
    # load_run accepts any unique part of the id, as the CLI does.
    assert clinjudge.load_run(result.run_id[-8:], db=db).run_id == result.run_id


def test_evaluate_runs_inside_a_running_event_loop(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    db = tmp_path / "loop.duckdb"

    async def notebook_cell() -> tuple[clinjudge.RunResult, clinjudge.RunResult]:
        # A Jupyter kernel's loop is running here: the sync call must not use asyncio.run on it.
        sync = clinjudge.evaluate(data, model="mock/judge", db=db)
        native = await clinjudge.evaluate_async(data, model="mock/judge", db=db)
        return sync, native

    sync, native = asyncio.run(notebook_cell())
    assert sync.status == native.status == "completed"
    assert sync.simulated and sync.samples_ok == native.samples_ok == 3
    assert sync.run_id != native.run_id


def test_without_a_model_the_simulated_provider_is_used_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLINJUDGE_MODEL", raising=False)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    with caplog.at_level(logging.WARNING):
        result = clinjudge.evaluate(data, db=tmp_path / "x.duckdb")
    assert result.simulated
    assert any("mock/judge" in r.getMessage() for r in caplog.records)


def test_settings_come_from_one_place_with_file_then_options(tmp_path: Path) -> None:
    config_file = tmp_path / "judge.yaml"
    config_file.write_text("samples: 4\njudge:\n  model: openai/x\n  temperature: 0.5\n")
    config = run_config_from(
        {"config": str(config_file), "samples": 2, "top_p": 0.9, "role_model": ["chair=mock/c"]}
    )
    assert config.samples == 2  # an explicit option beats the file
    assert config.judge is not None
    assert (config.judge.model, config.judge.temperature, config.judge.top_p) == (
        "openai/x",
        0.5,
        0.9,
    )
    assert config.roles["chair"].model == "mock/c"
    with pytest.raises(ConfigError, match="unknown setting 'sampels'"):
        run_config_from({"sampels": 3})


def test_resume_finishes_exactly_the_missing_work(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(6))
    db = tmp_path / "resume.duckdb"
    first = clinjudge.evaluate(data, model="mock/judge", db=db, samples=2)
    with RunStore(db) as store:  # a crash lost the second samples of two items
        store.con.execute(
            "DELETE FROM samples WHERE run_id = ? AND sample = 2 AND item_id IN "
            "('item-0001', 'item-0004')",
            [first.run_id],
        )
        store.set_run_status(first.run_id, "interrupted")
    again = clinjudge.resume(first.run_id, db=db)
    assert again.status == "completed" and again.samples_ok == 12
    with RunStore(db, read_only=True) as store:
        rows = store.query(
            "SELECT item_id, sample, count(*) AS n FROM samples WHERE run_id = ? AND sample > 0 "
            "GROUP BY ALL",
            [first.run_id],
        )
    assert len(rows) == 12 and all(r["n"] == 1 for r in rows)


def test_agreement_and_compare_are_typed(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(8))
    db = tmp_path / "agree.duckdb"
    one = clinjudge.evaluate(data, model="mock/judge", db=db, samples=3)
    two = clinjudge.evaluate(data, model="mock/judge", db=db, samples=1, seed=7)
    ratings = [
        {"item_id": f"item-{n:04d}", "rater_id": rater, "attribute": "accurate", "score": s}
        for n in range(8)
        for rater, s in (("dr-a", 1 + n % 5), ("dr-b", 1 + (n + 1) % 5))
    ]
    ratings_file = tmp_path / "ratings.jsonl"
    ratings_file.write_text("".join(json.dumps(r) + "\n" for r in ratings))
    from typer.testing import CliRunner

    from clinjudge.cli import app

    imported = CliRunner().invoke(
        app, ["ratings", "import", str(ratings_file), "--db", str(db)], catch_exceptions=False
    )
    assert imported.exit_code == 0, imported.output
    agreement = one.load().agreement(n_boot=50)
    assert isinstance(agreement, clinjudge.AgreementResult)
    assert agreement.raters == ["dr-a", "dr-b"] and agreement.n_items_rated == 8
    accurate = agreement.per_attribute["accurate"]
    judged, among = accurate.judge_vs_physicians, accurate.physicians_among_themselves
    assert judged is not None and judged.icc is not None and among.icc is not None
    # The physicians' ICC(3,k) among themselves, by the two-way ANOVA written out here.
    scores = np.array([[1 + n % 5, 1 + (n + 1) % 5] for n in range(8)], dtype=float)
    assert among.icc.value == pytest.approx(_icc3k(scores))
    # The old flat layout still reads (deprecated): its "icc" is the physicians', "primary"
    # the judge's.
    with pytest.warns(DeprecationWarning, match="by key"):
        flat = accurate["icc"]
    assert flat["ICC3k"]["value"] == among.icc.value
    with pytest.warns(DeprecationWarning):
        assert accurate["primary"]["value"] == judged.icc.value

    table = agreement.to_arrow()
    assert table.column_names == [
        "attribute",
        "comparison",
        "statistic",
        "value",
        "ci_low",
        "ci_high",
        "n_units",
        "rater",
    ]
    rows = table.to_pylist()
    (judge_row,) = [
        r for r in rows
        if (r["attribute"], r["comparison"], r["statistic"])
        == ("accurate", "judge_vs_physicians", "ICC3k")
    ]  # fmt: skip
    assert (judge_row["value"], [judge_row["ci_low"], judge_row["ci_high"]]) == (
        judged.icc.value,
        judged.icc.ci95,
    )
    (raters_row,) = [
        r for r in rows
        if (r["attribute"], r["comparison"], r["statistic"])
        == ("accurate", "physicians_among_themselves", "ICC3k")
    ]  # fmt: skip
    assert raters_row["value"] == among.icc.value and raters_row["n_units"] == 8
    replaced = {r["rater"] for r in rows if r["statistic"] == "substitution_delta"}
    assert replaced == {"dr-a", "dr-b"}
    frame = agreement.to_pandas()
    assert len(frame) == table.num_rows and list(frame.columns) == table.column_names

    comparison = clinjudge.compare([one.run_id, two.run_id], db=db, n_boot=50)
    assert isinstance(comparison, clinjudge.Comparison)
    assert {row.run_id for row in comparison.rows} == {one.run_id, two.run_id}
    runs = comparison.to_arrow()
    assert runs.num_rows == 2 and runs.column("run_id").to_pylist() == [
        row.run_id for row in comparison.rows
    ]
    first = comparison.rows[0]
    assert runs.column("icc3k").to_pylist()[0] == first.icc3k
    assert runs.column("icc3k_ci_low").to_pylist()[0] == (first.icc3k_ci95 or [None])[0]
    assert comparison.to_pandas().shape[0] == 2
    assert comparison.to_dict()["runs"][0]["run_id"] == first.run_id


def _icc3k(x: np.ndarray) -> float:
    """ICC(3,k) (Shrout & Fleiss): (MS rows - MS error) / MS rows of a units x raters table."""
    n, k = x.shape
    grand = x.mean()
    ss_rows = k * ((x.mean(axis=1) - grand) ** 2).sum()
    ss_cols = n * ((x.mean(axis=0) - grand) ** 2).sum()
    ss_error = ((x - grand) ** 2).sum() - ss_rows - ss_cols
    ms_rows, ms_error = ss_rows / (n - 1), ss_error / ((n - 1) * (k - 1))
    return float((ms_rows - ms_error) / ms_rows)


def test_to_pandas_without_pandas_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clinjudge.analysis import analyse_ratings

    ratings = [
        {"item_id": f"i{n}", "rater_id": r, "attribute": "accurate", "score": (n + d) % 5 + 1}
        for n in range(6)
        for r, d in (("a", 0), ("b", 1), ("judge", 0))
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ratings))
    from clinjudge.inputs import load_ratings

    result = analyse_ratings(load_ratings(str(path)), judge="judge", n_boot=20)
    assert result.to_arrow().num_rows > 0  # no pandas needed
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now fails
    with pytest.raises(ImportError, match=r"pip install pandas"):
        result.to_pandas()


def test_a_run_id_is_any_unique_part_of_it(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "ids.duckdb"
    one = clinjudge.evaluate(data, model="mock/judge", db=db)
    two = clinjudge.evaluate(data, model="mock/judge", db=db)
    tail = one.run_id.rsplit("-", 1)[1]
    middle = one.run_id[4:-3]  # neither a prefix nor a suffix
    for part in (one.run_id, one.run_id[:-2], tail, middle):
        if part in two.run_id:
            continue  # the two ids share it (same second): not unique
        assert clinjudge.load_run(part, db=db).run_id == one.run_id
    shared = one.run_id[:8]  # the date: both runs have it
    with pytest.raises(clinjudge.UserError, match="ambiguous") as caught:
        clinjudge.load_run(shared, db=db)
    assert one.run_id in str(caught.value) and two.run_id in str(caught.value)
    with pytest.raises(clinjudge.UserError, match="no run"):
        clinjudge.load_run("no-such-run", db=db)


def test_audit_judges_every_vendor_and_returns_typed_statistics(tmp_path: Path) -> None:
    vendor_files = []
    for vendor in ("north", "south"):
        items = make_items(6)
        for item in items:
            item.summary = f"{vendor} scribe: {item.summary}"
        vendor_files.append(write_jsonl(tmp_path / f"{vendor}.jsonl", items))
    report = tmp_path / "report"
    result = clinjudge.audit(
        vendor_files, model="mock/judge", db=tmp_path / "audit.duckdb", report_dir=report, n_boot=50
    )
    assert isinstance(result, clinjudge.AuditResult)
    assert result.vendors == ["north", "south"]
    assert result.run is not None and result.run.items == 12 and result.run.status == "completed"
    assert set(result.summaries) == {"north", "south"}
    assert all(c.vendor_a != c.vendor_b for c in result.comparisons)
    table = result.to_arrow()
    assert table.num_rows == sum(len(by) for by in result.summaries.values())
    row = table.to_pylist()[0]
    first = result.summaries[row["vendor"]][row["attribute"]]
    assert (row["mean"], row["n"]) == (first.mean, first.n)
    assert "run" not in result.statistics() and result.statistics()["vendors"] == result.vendors
    assert result.simulated
    assert (report / "report.html").is_file() and (report / "report.md").is_file()


PERSONA_SET = """name: api-trial
description: Two reviewers for the API tests
personas:
  - name: strict_md
    display_name: Strict reviewer
    description: Grades harshly.
    system_message: "You are the strict reviewer ({wording}). End with the rubric JSON."
    stance: strict
  - name: chair_md
    display_name: Chair
    description: Moderates the panel.
    system_message: "You moderate the panel ({wording}). End with the rubric JSON."
    stance: moderator
    role: moderator
"""


def test_resume_uses_the_personas_stored_with_the_run(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(4))
    db = tmp_path / "personas.duckdb"
    personas = tmp_path / "personas.yaml"
    personas.write_text(PERSONA_SET.format(wording="first wording"))
    with FakeOpenAIServer() as srv:
        first = clinjudge.evaluate(
            data,
            model="openai/fake",
            base_url=srv.base_url,
            db=db,
            mode="panel",
            personas=str(personas),
        )
        with RunStore(db) as store:  # a crash lost two items' samples
            store.con.execute(
                "DELETE FROM samples WHERE run_id = ? AND item_id IN ('item-0001', 'item-0002')",
                [first.run_id],
            )
            store.set_run_status(first.run_id, "interrupted")
        personas.write_text(PERSONA_SET.format(wording="edited wording"))
        before = len(srv.requests)
        again = clinjudge.resume(first.run_id, db=db)
        resumed = [body["messages"][0]["content"] for body in srv.requests[before:]]
    assert again.status == "completed" and again.items_ok == 4
    assert len(resumed) == 2 * 2  # two members for each of the two lost items
    assert all("(first wording)" in text for text in resumed)
    stored = clinjudge.load_run(first.run_id, db=db).info["config"]
    assert stored["personas_data"]["moderator"] == "chair_md"
    assert len(stored["personas_fingerprint"]) == 16


def test_mode_settings_are_nested_and_checked_before_anything_is_written(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "modes.duckdb"
    with pytest.raises(ConfigError, match="rounds .* applies to magentic mode only"):
        clinjudge.evaluate(data, model="mock/judge", db=db, rounds=2)
    with pytest.raises(ConfigError, match="registered modes: magentic, panel, single"):
        clinjudge.evaluate(data, model="mock/judge", db=db, mode="jury")
    assert not db.exists()
    result = clinjudge.evaluate(
        data, model="mock/judge", db=db, mode="panel", panel={"aggregate": "mean"}
    )
    assert result.status == "completed"
    assert result.load().info["config"]["panel_aggregate"] == "mean"


def test_the_walk_through_in_docs_api_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/api.md's notebook code, with the simulated judge for the real model, runs and gives
    what its comments promise."""
    root = Path(__file__).parent.parent
    page = (root / "docs" / "api.md").read_text(encoding="utf-8")
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    code = code.replace('"openai/gpt-4o-mini"', '"mock/judge"')
    code = code.replace('"examples/', f'"{root}/examples/')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLINJUDGE_DB", str(tmp_path / "notebook.duckdb"))
    scope: dict[str, object] = {}
    exec(compile(code, "docs/api.md", "exec"), scope)  # noqa: S102 - our own documentation

    result, panel = scope["result"], scope["panel"]
    assert isinstance(result, clinjudge.RunResult) and result.status == "completed"
    assert result.items_ok == result.items > 0
    finals = scope["finals"]
    assert set(finals["attribute"]) >= {"accurate"}  # type: ignore[index]
    # The printed agreement is `judge agree`'s: the judge's ICC(3,k) against the physicians'
    # median is its "primary", the physicians' among themselves its "icc".
    printed = capsys.readouterr().out
    judge_line = re.search(r"accurate: judge vs physicians ICC\(3,k\) (-?[\d.]+), 95% CI "
                           r"(-?[\d.]+) to (-?[\d.]+)", printed)  # fmt: skip
    among_line = re.search(r"accurate: physicians among themselves ICC\(3,k\) (-?[\d.]+)", printed)
    assert judge_line and among_line, printed
    from typer.testing import CliRunner

    from clinjudge.cli import app

    agreed = CliRunner().invoke(
        app,
        [
            "agree",
            result.run_id,
            "--json",
            "--boot",
            "1000",
            "--db",
            str(tmp_path / "notebook.duckdb"),
        ],
        catch_exceptions=False,
    )
    assert agreed.exit_code == 0, agreed.output
    block = json.loads(agreed.stdout)["per_attribute"]["accurate"]
    assert float(judge_line[1]) == round(block["primary"]["value"], 3)
    assert [float(judge_line[2]), float(judge_line[3])] == [
        round(v, 2) for v in block["primary"]["ci95"]
    ]
    assert float(among_line[1]) == round(block["icc"]["ICC3k"]["value"], 3)
    assert float(judge_line[1]) != float(among_line[1])  # two different numbers, not one
    # The docs' comment gives the simulated judge's numbers on the demo: still true.
    page_numbers = re.search(
        r"mock/judge on the demo: ([\d.]+) \(CI (-?[\d.]+) to ([\d.]+)\) and (\d+\.\d+)", page
    )
    assert page_numbers is not None
    assert page_numbers.groups() == (judge_line[1], judge_line[2], judge_line[3], among_line[1])
    stats = scope["stats"]
    assert set(stats["comparison"]) == {"judge_vs_physicians", "physicians_among_themselves"}  # type: ignore[index]
    rows = scope["comparison"].rows  # type: ignore[attr-defined]
    assert {r.run_id for r in rows} == {result.run_id, panel.run_id}  # type: ignore[attr-defined]
    audit = scope["audit"]
    assert set(audit.summaries) == {"vendor_a", "vendor_b"}  # type: ignore[attr-defined]
    assert (tmp_path / "audit-report").is_dir()


# -- one front door: every option of `judge run` is an argument of the API (#24) ----------------


def test_limit_and_shuffle_choose_the_items(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(10))
    db = tmp_path / "limit.duckdb"
    first = clinjudge.evaluate(data, model="mock/judge", db=db, limit=3)
    drawn = clinjudge.evaluate(data, model="mock/judge", db=db, limit=4, shuffle=True, seed=7)
    assert first.items == 3
    assert first.load().items().column("item_id").to_pylist() == [
        "item-0000",
        "item-0001",
        "item-0002",
    ]
    expected = [f"item-{k:04d}" for k in sorted(random.Random(7).sample(range(10), 4))]
    assert drawn.load().items().column("item_id").to_pylist() == expected
    with pytest.raises(ConfigError, match="shuffle goes with limit") as refused:
        clinjudge.evaluate(data, model="mock/judge", db=db, shuffle=True)
    assert refused.value.setting == "limit"


def test_estimate_is_the_typed_dry_run_and_writes_nothing(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(4))
    db = tmp_path / "none" / "dry.duckdb"
    direct = clinjudge.estimate(data, model="openai/gpt-4o", db=db, samples=2, limit=3)
    batch = clinjudge.estimate(data, model="openai/gpt-4o", db=db, samples=2, limit=3, batch=True)
    assert isinstance(direct, clinjudge.Estimate)
    assert (direct.items, direct.prompts, direct.model) == (3, 6, "openai/gpt-4o")
    assert direct.tokens_exact and direct.tokens_note is None and not direct.simulated
    assert direct.cost_usd is not None and batch.cost_usd == pytest.approx(direct.cost_usd / 2)
    assert "batch prices" in batch.note
    assert not db.parent.exists()
    with pytest.raises(ConfigError, match=r"clinjudge\.estimate"):
        clinjudge.evaluate(data, model="mock/judge", db=db, dry_run=True)


def test_batch_and_cache_are_refused_together(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    with pytest.raises(ConfigError, match="batch and cache do not combine") as refused:
        clinjudge.estimate(data, model="openai/gpt-4o-mini", batch=True, cache=True)
    assert refused.value.setting == "batch,cache"


def test_on_start_hears_the_stored_run_before_any_model_call(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    started: list[tuple[clinjudge.RunStart, int]] = []
    with FakeOpenAIServer() as srv:
        result = clinjudge.evaluate(
            data,
            model="openai/fake",
            base_url=srv.base_url,
            db=tmp_path / "start.duckdb",
            on_start=lambda start: started.append((start, len(srv.requests))),
        )
    [(start, requests_then)] = started
    assert requests_then == 0
    assert (start.run_id, start.db, start.resumed) == (result.run_id, result.db, False)
    assert not start.simulated and start.config.judge is not None
    assert result.samples_expected == 3 and result.spent_usd == result.cost_usd


def test_progress_every_is_passed_on_not_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import clinjudge.orchestration._progress as progress

    def no_fallback() -> float:
        raise AssertionError("the interval was given: the environment is not read")

    monkeypatch.setattr(progress, "progress_interval", no_fallback)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    clinjudge.evaluate(
        data, model="mock/judge", db=tmp_path / "p.duckdb", progress=True, progress_every=0
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if "progress:" in line]
    assert len(lines) >= 4  # the first line, one per sample (every 0 s), the last
