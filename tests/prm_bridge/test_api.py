"""The PRM API (``clinjudge.score_prm``, ``best_of_n_prm``, ``evaluate_prm``) on tiny
checkpoints: what it returns, what it stores (the same rows as `judge prm`), its argument
checks, and a Ray run resumed through it."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
import typer

import clinjudge
from clinjudge.cli._prm import _call, _Options
from tests.cli._helpers import invoke, query
from tests.prm_bridge._tiny import save_exact_medprm, save_tiny

ROWS = [
    {"id": "q1", "candidate": "long", "question": "Q?", "text": "Step 1: a. Step 2: b. Step 3: c."},
    {"id": "q1", "candidate": "short", "question": "Q?", "steps": ["Step 1: only one."]},
    {"id": "q2", "question": "Other", "text": "first line\nsecond line"},
]
LABELLED = [
    {"id": "e1", "steps": [{"text": "ok", "label": 1}, {"text": "bad", "label": 0,
                                                        "error_type": "Hallucination"}]},
    {"id": "e2", "text": "one\ntwo\nthree", "labels": ["+", "+", "-"]},
]  # fmt: skip


@pytest.fixture(scope="module")
def exact(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, float]:
    """A checkpoint whose P(+) is the same known value at every step tag."""
    path = tmp_path_factory.mktemp("exact-api")
    return str(path), save_exact_medprm(path, a=1.2)


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _stored(db: Path, run_id: str) -> dict[str, Any]:
    """Everything a PRM run stored, without its id and clock times."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        run = con.execute(
            "SELECT status, mode, name, models, config, data_source FROM runs WHERE run_id = ?",
            [run_id],
        ).fetchall()
        steps = con.execute(
            "SELECT item_id, candidate, step, kind, text, score, flagged, label, model "
            "FROM prm_steps WHERE run_id = ? ORDER BY ALL",
            [run_id],
        ).fetchall()
        calls = con.execute(
            "SELECT item_id, sample, agent, role, model, status, prompt_tokens, finish_reason "
            "FROM calls WHERE run_id = ? ORDER BY ALL",
            [run_id],
        ).fetchall()
    finally:
        con.close()
    return {"run": run, "steps": steps, "calls": calls}


def test_score_prm_returns_scores_and_stores_the_rows_judge_prm_stores(exact, tmp_path):
    model, p = exact
    data = _write(tmp_path / "in.jsonl", ROWS)
    cli_db, api_db = tmp_path / "cli.duckdb", tmp_path / "api.duckdb"
    shown = invoke("prm", "score", "--model", model, "--input", str(data), "--device", "cpu",
                   "--db", str(cli_db), "--json", "--threshold", "0.9")  # fmt: skip
    assert shown.exit_code == 0, shown.output
    cli = json.loads(shown.stdout)

    notices: list[clinjudge.PRMNotice] = []
    result = clinjudge.score_prm(data, model=model, device="cpu", db=api_db, threshold=0.9,
                                 on_notice=notices.append)  # fmt: skip
    assert isinstance(result, clinjudge.PRMScoreResult)
    assert result.run_id and result.db == str(api_db) and result.failed == 0
    timeless = {"flagged", "latency_s"}  # the CLI adds flagged; latency is a clock reading
    assert [r.model_dump(mode="json", exclude={"latency_s"}) for r in result.results] == [
        {k: v for k, v in r.items() if k not in timeless} for r in cli["results"]
    ]
    assert _stored(api_db, result.run_id) == _stored(cli_db, cli["run_id"])
    assert notices[-1] == clinjudge.PRMNotice(f"stored run {result.run_id} in {api_db}")
    frame = result.to_pandas()
    assert list(frame["candidate"]) == ["long"] * 3 + ["short", "1"]
    assert frame["score"].tolist() == pytest.approx([p] * 5, abs=1e-6)
    assert frame["flagged"].all()  # p ~ 0.77 < 0.9


def test_best_of_n_prm_picks_and_ranks(exact, tmp_path):
    model, _ = exact
    data = _write(tmp_path / "in.jsonl", ROWS)
    result = clinjudge.best_of_n_prm(data, model=model, device="cpu", store=False,
                                     aggregate="product")  # fmt: skip
    assert result.run_id is None and result.db is None and result.aggregate == "product"
    # Equal step scores: the one-step candidate has the larger product.
    assert [(pick.id, pick.best) for pick in result.items] == [("q1", "short"), ("q2", "1")]
    first = result.items[0]
    assert [c.candidate for c in first.ranking] == ["short", "long"]
    assert first.score == pytest.approx(first.ranking[0].score)
    picks = result.picks_to_pandas()
    assert picks[["id", "candidate", "rank", "best"]].values.tolist() == [
        ["q1", "short", 1, True], ["q1", "long", 2, False], ["q2", "1", 1, True]
    ]  # fmt: skip
    with pytest.raises(clinjudge.UserError, match="aggregate 'mode': choose from"):
        clinjudge.best_of_n_prm(data, model=model, aggregate="mode", store=False)


def test_evaluate_prm_report_is_stored_with_the_run(exact, tmp_path, db_path):
    model, _ = exact  # every step scores p ~ 0.77: predicted correct at 0.5
    data = _write(tmp_path / "labelled.jsonl", LABELLED)
    result = clinjudge.evaluate_prm(data, model=model, device="cpu", segment="lines",
                                    db=db_path)  # fmt: skip
    overall = result.report.overall
    # 3 correct steps predicted correct (TP=3), 2 erroneous predicted correct (FP=2)
    assert (overall.n_steps, overall.n_erroneous) == (5, 2)
    assert overall.f1 == pytest.approx(6 / 8)
    assert result.run_id is not None
    config = json.loads(query(db_path, "SELECT config FROM runs WHERE run_id = ?",
                              [result.run_id])[0][0])  # fmt: skip
    assert config["command"] == "eval"
    assert config["report"] == result.report.model_dump(mode="json")


def test_format_fields_as_a_mapping_equal_the_set_strings(exact, tmp_path):
    model, _ = exact
    data = _write(tmp_path / "in.jsonl", ROWS)
    by_map = clinjudge.score_prm(data, model=model, device="cpu", store=False,
                                 format_fields={"segmenter": "lines"})  # fmt: skip
    by_set = clinjudge.score_prm(data, model=model, device="cpu", store=False,
                                 format_fields=['segmenter="lines"'])  # fmt: skip
    assert [len(r.steps) for r in by_map.results] == [1, 1, 2]  # one line; two lines
    assert [r.model_dump(exclude={"latency_s"}) for r in by_map.results] == [
        r.model_dump(exclude={"latency_s"}) for r in by_set.results
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threshold": "high"}, "threshold: expected a finite number, got 'high'"),
        ({"threshold": math.nan}, "threshold: expected a finite number"),
        ({"batch_tokens": 0}, "batch_tokens: expected a whole number >= 1, got 0"),
        ({"store": "yes"}, "store: expected True or False, got 'yes'"),
        ({"format_fields": "segmenter=lines"}, "format_fields: expected a mapping or a list"),
        ({"devices": "cpu"}, "unknown setting 'devices'; PRM settings are"),
        ({"segment": "words"}, "segment 'words': choose medprm, chain, note, lines"),
        ({"resume": "r1"}, "resume and ray_replicas need ray"),
    ],
)
def test_bad_arguments_are_user_errors_naming_the_setting(exact, tmp_path, options, message):
    model, _ = exact
    data = _write(tmp_path / "in.jsonl", ROWS)
    with pytest.raises(clinjudge.UserError, match=message.replace("(", r"\(")) as caught:
        clinjudge.score_prm(data, model=model, **{"store": False, **options},
                            db=tmp_path / "x.duckdb")  # fmt: skip
    assert not (tmp_path / "x.duckdb").exists()
    assert caught.value.setting is None or caught.value.setting.split(",")[0] in {
        *options, "resume"
    }  # fmt: skip


def test_the_cli_says_a_stopped_ray_pass_as_before(capsys):
    opts = _Options(model="m", input=Path("in.jsonl"))

    def stopped(interrupted: bool) -> Any:
        def api(*_: Any, **__: Any) -> Any:
            raise clinjudge.PRMRunStopped("ray: scoring failed: boom", run_id="r1",
                                          interrupted=interrupted)  # fmt: skip

        return api

    with pytest.raises(typer.Exit) as failed:
        _call(stopped(False), opts)
    assert failed.value.exit_code == 1
    assert "ray: scoring failed: boom; the batches stored so far stay: --resume r1" in (
        capsys.readouterr().err
    )
    with pytest.raises(typer.Exit) as interrupted:
        _call(stopped(True), opts)
    assert interrupted.value.exit_code == 130
    assert "Interrupted. The batches stored so far stay; continue with --resume r1" in (
        capsys.readouterr().err
    )


def test_a_ray_run_resumed_through_the_api_scores_only_what_it_lacks(ray_cluster, tmp_path):
    address, _ = ray_cluster
    model = tmp_path / "tiny"
    save_tiny(model, "medprm", seed=7)
    rows = [{"id": f"n{n}", "candidate": c, "question": "q", "steps": [f"{c} step {n}", "end"]}
            for n in range(3) for c in ("a", "b")]  # fmt: skip
    data = _write(tmp_path / "chains.jsonl", rows)
    db = tmp_path / "ray.duckdb"
    common: dict[str, Any] = {"model": str(model), "device": "cpu", "db": db, "ray": address,
                              "ray_replicas": 1, "ray_batch": 2}  # fmt: skip
    first = clinjudge.score_prm(data, **common)
    assert first.run_id is not None
    whole = _stored(db, first.run_id)
    con = duckdb.connect(str(db))
    try:  # as if the driver had been killed before the last batch was stored
        for table in ("calls", "prm_steps"):
            con.execute(f"DELETE FROM {table} WHERE run_id = ? AND item_id = 'n2'",
                        [first.run_id])  # fmt: skip
    finally:
        con.close()

    notices: list[clinjudge.PRMNotice] = []
    again = clinjudge.score_prm(data, resume=first.run_id, on_notice=notices.append, **common)
    assert again.run_id == first.run_id
    assert f"ray: run {first.run_id}: 2 candidates to score, 4 already stored" in [
        n.text for n in notices
    ]
    assert _stored(db, first.run_id)["steps"] == whole["steps"]
    assert _stored(db, first.run_id)["calls"] == whole["calls"]

    def scores(result: clinjudge.PRMScoreResult) -> list[tuple[Any, ...]]:
        return [(r.id, r.candidate, r.steps, r.aggregates) for r in result.results]

    assert scores(again) == scores(first)
    config = json.loads(query(db, "SELECT config FROM runs WHERE run_id = ?",
                              [first.run_id])[0][0])  # fmt: skip
    assert config["ray"]["reused"] == 4 and config["ray"]["last_pass"]["chains"] == 2


def test_to_pandas_without_pandas_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    result = clinjudge.PRMScoreResult(run_id=None, db=None, model="m", threshold=0.5, results=[])
    assert result.to_arrow().column_names[:3] == ["id", "candidate", "step"]
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install pandas.*to_arrow\(\) gives the same"):
        result.to_pandas()


def test_a_candidates_warnings_reach_on_notice_before_it_is_stored(exact, tmp_path, db_path):
    model, _ = exact
    data = _write(tmp_path / "in.jsonl", ROWS)
    notices: list[clinjudge.PRMNotice] = []
    result = clinjudge.score_prm(data, model=model, device="cpu", max_length=60, db=db_path,
                                 on_notice=notices.append)  # fmt: skip
    warnings = [n.text for n in notices if n.level == "warning"]
    assert warnings and warnings[0].startswith("q1/long: truncated steps:")
    assert warnings == [f"{r.id}/{r.candidate}: {w}" for r in result.results for w in r.warnings]
    assert notices[-1].text.startswith("stored run ") and notices[-1].level == "info"
