"""`judge prm score|best-of-n|eval` on a tiny checkpoint, with results in DuckDB."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.cli._helpers import invoke, query, scalar
from tests.prm_bridge._tiny import save_exact_medprm
from tests.requirements import require_module


@pytest.fixture(scope="module")
def exact(tmp_path_factory) -> tuple[str, float]:
    """A checkpoint whose P(+) is the same known value at every step tag."""
    path = tmp_path_factory.mktemp("exact")
    return str(path), save_exact_medprm(path, a=1.2)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


ROWS = [
    {"id": "q1", "candidate": "long", "question": "Q?", "text": "Step 1: a. Step 2: b. Step 3: c."},
    {"id": "q1", "candidate": "short", "question": "Q?", "steps": ["Step 1: only one."]},
    {"id": "q1", "candidate": "short2", "question": "Q?", "steps": ["also one"]},
    {"id": "q2", "question": "Other", "text": "first line\nsecond line", "documents": ["d1"]},
]


def test_score_json_and_store(exact, tmp_path, db_path):
    model, p = exact
    data = _write(tmp_path / "in.jsonl", ROWS)
    result = invoke(
        "prm", "score", "--model", model, "--input", str(data), "--device", "cpu",
        "--db", str(db_path), "--json", "--threshold", "0.9",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    results = out["results"]
    assert [(r["id"], r["candidate"], len(r["steps"])) for r in results] == [
        ("q1", "long", 3),
        ("q1", "short", 1),
        ("q1", "short2", 1),
        ("q2", "1", 1),  # Med-PRM: text without `Step n:` markers is one step
    ]
    first = results[0]
    assert [s["text"] for s in first["steps"]] == ["a.", "b.", "c."]
    assert [s["score"] for s in first["steps"]] == pytest.approx([p] * 3, abs=1e-6)
    assert first["flagged"] == [1, 2, 3]  # p ~ 0.77 < 0.9
    assert first["aggregates"]["product"] == pytest.approx(3 * math.log(p), abs=1e-5)
    assert first["aggregates"]["threshold"] == 0.0
    run_id = out["run_id"]
    assert scalar(db_path, "SELECT mode FROM runs WHERE run_id = ?", [run_id]) == "prm"
    rows = query(
        db_path,
        "SELECT item_id, candidate, step, kind, score, flagged FROM prm_steps "
        "WHERE run_id = ? ORDER BY item_id, candidate, step",
        [run_id],
    )
    assert len(rows) == 6 and rows[0][:4] == ("q1", "long", 1, "step")
    assert rows[0][4] == pytest.approx(p, abs=1e-6) and rows[0][5] is True
    calls = query(
        db_path,
        "SELECT item_id, sample, role, status, prompt_tokens FROM calls WHERE run_id = ? "
        "ORDER BY item_id, sample",
        [run_id],
    )
    assert [c[:4] for c in calls] == [
        ("q1", 1, "prm", "ok"),
        ("q1", 2, "prm", "ok"),
        ("q1", 3, "prm", "ok"),
        ("q2", 1, "prm", "ok"),
    ]
    assert all(c[4] > 0 for c in calls)
    listed = invoke("runs", "list", "--db", str(db_path))
    assert listed.exit_code == 0 and run_id in listed.stdout
    shown = invoke("runs", "show", run_id, "--db", str(db_path))
    assert shown.exit_code == 0 and "prm" in shown.stdout


def test_best_of_n_aggregates_and_ties(exact, tmp_path):
    model, _ = exact
    data = _write(tmp_path / "in.jsonl", ROWS)
    common = ["--model", model, "--input", str(data), "--device", "cpu", "--no-store", "--json"]
    product = json.loads(invoke("prm", "best-of-n", *common, "--aggregate", "product").stdout)
    # equal step scores: fewer steps give a larger product; "short" and "short2" tie -> first
    assert [(i["id"], i["best"]) for i in product["items"]] == [("q1", "short"), ("q2", "1")]
    assert [c["candidate"] for c in product["items"][0]["ranking"]] == ["short", "short2", "long"]
    minimum = json.loads(invoke("prm", "best-of-n", *common, "--aggregate", "min").stdout)
    assert minimum["items"][0]["best"] == "long"  # all tie: the earliest wins
    bad = invoke("prm", "best-of-n", *common, "--aggregate", "mode")
    assert bad.exit_code == 2 and "choose from" in bad.stderr


def test_eval_reports_prmscore(exact, tmp_path, db_path):
    model, p = exact  # every step scores p ~ 0.77: predicted correct at 0.5
    rows = [
        {"id": "e1", "steps": [{"text": "ok", "label": 1}, {"text": "bad", "label": 0,
                                                            "error_type": "Hallucination"}]},
        {"id": "e2", "text": "one\ntwo\nthree", "labels": ["+", "+", "-"]},
        {"id": "e3", "steps": ["fine", "fine too"], "labels": [1, 1]},
    ]  # fmt: skip
    data = _write(tmp_path / "labelled.jsonl", rows)
    result = invoke(
        "prm", "eval", "--model", model, "--input", str(data), "--device", "cpu",
        "--segment", "lines", "--db", str(db_path), "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    overall = report["overall"]
    # 5 correct steps all predicted correct (TP=5), 2 erroneous predicted correct (FP=2)
    assert (overall["n_steps"], overall["n_erroneous"]) == (7, 2)
    assert overall["f1"] == pytest.approx(10 / 12)
    assert overall["f1_negative"] == 0.0
    assert overall["prm_score"] == pytest.approx(5 / 12)
    assert overall["accuracy_erroneous"] == 0.0
    first = report["first_error"]
    assert (first["accuracy_with_error"], first["accuracy_without_error"]) == (0.0, 1.0)
    assert set(report["by_error_type"]) == {"Hallucination"}
    labels = query(
        db_path,
        "SELECT label FROM prm_steps WHERE run_id = ? AND item_id = 'e2' ORDER BY step",
        [report["run_id"]],
    )
    assert [r[0] for r in labels] == [1, 1, 0]


def test_bad_input_names_line_and_field_and_writes_nothing(exact, tmp_path, db_path):
    model, _ = exact
    rows = [
        {"id": "ok", "text": "Step 1: fine"},
        {"id": "x", "text": "a", "steps": ["b"]},
        {"id": "y", "text": "one\ntwo", "labels": [1]},
        {"candidate": "c"},
    ]
    data = _write(tmp_path / "bad.jsonl", rows)
    (tmp_path / "bad.jsonl").write_text(data.read_text() + "{not json\n")
    result = invoke(
        "prm", "eval", "--model", model, "--input", str(data), "--segment", "lines",
        "--db", str(db_path),
    )  # fmt: skip
    assert result.exit_code == 2
    err = " ".join(result.stderr.split())
    assert "bad.jsonl:line 5: not valid JSON" in err
    result = invoke(
        "prm", "eval", "--model", model, "--input", str(_write(tmp_path / "b2.jsonl", rows)),
        "--segment", "lines", "--db", str(db_path),
    )  # fmt: skip
    err = " ".join(result.stderr.split())
    assert result.exit_code == 2
    assert "line 2: field (record): give exactly one of text, steps or note" in err
    assert "line 3: field labels: 1 values for 2 steps" in err
    assert "line 4: field id: Field required" in err
    assert "line 1: field labels: no step labels" in err
    assert not db_path.exists()


def test_bad_preset_and_missing_model(tmp_path):
    require_module("transformers")  # without it the missing extra is reported first
    data = _write(tmp_path / "in.jsonl", ROWS[:1])
    bad = invoke("prm", "score", "--model", "x", "--input", str(data), "--preset", "nope")
    assert bad.exit_code == 2 and "unknown PRM preset 'nope'" in bad.stderr
    bad = invoke("prm", "score", "--model", "x", "--input", str(data), "--set", "softmax=all")
    assert bad.exit_code == 2 and "field softmax" in bad.stderr
    missing = invoke(
        "prm", "score", "--model", str(tmp_path / "nowhere"), "--input", str(data), "--no-store"
    )
    assert missing.exit_code == 2 and "cannot load the tokenizer" in " ".join(
        missing.stderr.split()
    )


def test_prm_runs_export_steps_and_refuse_judgment_commands(exact, tmp_path, db_path):
    model, p = exact
    data = _write(tmp_path / "in.jsonl", ROWS)
    result = invoke(
        "prm", "score", "--model", model, "--input", str(data), "--device", "cpu",
        "--db", str(db_path), "--json",
    )  # fmt: skip
    run_id = json.loads(result.stdout)["run_id"]
    out = tmp_path / "steps.jsonl"
    exported = invoke("export", run_id, "--out", str(out), "--table", "prm_steps",
                      "--db", str(db_path))  # fmt: skip
    assert exported.exit_code == 0, exported.stderr
    steps = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(steps) == 3 + 1 + 1 + 1
    assert steps[0]["score"] == pytest.approx(p, abs=1e-6)
    judgments = invoke("export", run_id, "--out", str(tmp_path / "j.jsonl"), "--db", str(db_path))
    assert judgments.exit_code == 2 and "--table prm_steps" in judgments.stderr
    assert not (tmp_path / "j.jsonl").exists()
    for command in (["report", run_id, "--out", str(tmp_path / "rep")], ["agree", run_id]):
        refused = invoke(*command, "--db", str(db_path))
        assert refused.exit_code == 2, command
        assert "PRM scoring run" in " ".join(refused.stderr.split())


def test_judge_run_prm_section(exact, tmp_path, db_path):
    """--prm-section scores only that section; an item without it gets a PRM error naming the
    headings, and its judgment still happens."""
    from clinjudge.rubrics import Item
    from tests.factories import write_jsonl

    model, p = exact
    with_plan = "CHIEF COMPLAINT\nCough.\nPLAN\nRest at home. Drink fluids."
    items = [
        Item(id="a", notes=["n1", "n2", "n3"], summary=with_plan, specialty="Primary Care"),
        Item(id="b", notes=["n1", "n2", "n3"], summary="HPI:\nCough.", specialty="Primary Care"),
    ]
    data = write_jsonl(tmp_path / "items.jsonl", items)
    result = invoke(
        "run", "--data", str(data), "--model", "mock/judge", "--prm", model,
        "--prm-section", "plan", "--db", str(db_path), "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    run_id = result.stdout.strip()
    rows = query(
        db_path,
        "SELECT item_id, text FROM prm_steps WHERE run_id = ? ORDER BY item_id, step",
        [run_id],
    )
    assert rows == [("a", "Rest at home. Drink fluids.")]  # medprm: one unmarked step
    errors = query(
        db_path,
        "SELECT item_id, error FROM calls WHERE run_id = ? AND role = 'prm' ORDER BY item_id",
        [run_id],
    )
    assert errors[0] == ("a", None)
    assert "section headed 'plan'" in errors[1][1] and "HPI" in errors[1][1]


def test_prm_clinic_scores_the_assessment_and_plan_by_default(tmp_path, db_path):
    from tests.prm_bridge._tiny import save_tiny

    save_tiny(tmp_path / "clinic", "prm-clinic", seed=4)
    soap = "HPI:\nCough.\nASSESSMENT AND PLAN\nAsthma.\n• Continue the inhaler."
    data = _write(
        tmp_path / "in.jsonl", [{"id": "a", "text": soap}, {"id": "b", "text": "HPI:\nCough."}]
    )
    args = ["prm", "score", "--model", str(tmp_path / "clinic"), "--preset", "prm-clinic",
            "--input", str(data), "--device", "cpu", "--no-store", "--json"]  # fmt: skip
    failed = invoke(*args)
    assert failed.exit_code == 2
    assert "line 2: field text: no assessment-and-plan section" in failed.stderr
    assert "headings found: HPI" in failed.stderr
    whole = invoke(*args, "--set", "section=all")
    assert whole.exit_code == 0, whole.stderr
    steps = [s["text"] for s in json.loads(whole.stdout)["results"][0]["steps"]]
    assert steps[:3] == ["Cough.", "", "Asthma."] and "HPI" not in steps
    data.write_text(json.dumps({"id": "a", "text": soap}) + "\n", encoding="utf-8")
    ap = invoke(*args)
    assert ap.exit_code == 0, ap.stderr
    kinds = [(s["kind"], s["text"]) for s in json.loads(ap.stdout)["results"][0]["steps"]]
    assert kinds[:2] == [("problem", "Asthma."), ("sentence", "Continue the inhaler.")]
