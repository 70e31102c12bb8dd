"""`judge run`: bad input, --dry-run, --config files, and --resume errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cli._helpers import invoke, query, scalar
from tests.factories import make_items, write_jsonl


@pytest.fixture(autouse=True)
def _no_default_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CLINJUDGE_MODEL", raising=False)
    monkeypatch.chdir(tmp_path)  # a stray default runs/ directory would land here


def _good_line(item_id: str) -> str:
    return json.dumps({"id": item_id, "notes": ["A note."], "summary": "S.", "specialty": "PC"})


def _bad_jsonl_syntax(tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "bad.jsonl"
    path.write_text(_good_line("a") + "\n\n" + '{"id": "b", "summary": \n')
    return path, [f"{path}:line 3", "not valid JSON"]


def _missing_field(tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "missing.jsonl"
    path.write_text(
        _good_line("a") + "\n" + json.dumps({"id": "b", "notes": ["n"], "specialty": "PC"}) + "\n"
    )
    return path, [f"{path}:line 2", "field summary"]


def _bad_csv(tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "bad.csv"
    path.write_text('id,notes,summary,specialty\na,"[""n""]",S,PC\nb,[oops,S,PC\n')
    return path, [f"{path}:row 2", "field notes", "not valid JSON"]


def _syntax_and_field(tmp_path: Path) -> tuple[Path, list[str]]:
    """A line that is not JSON, then a line without a summary: both are reported."""
    path = tmp_path / "both.jsonl"
    missing = json.dumps({"id": "c", "notes": ["n"], "specialty": "PC"})
    path.write_text(_good_line("a") + "\n" + '{"id": "b",\n' + missing + "\n")
    return path, [f"{path}:line 2: not valid JSON", f"{path}:line 3: field summary"]


BAD_INPUTS = [_bad_jsonl_syntax, _missing_field, _bad_csv, _syntax_and_field]
IDS = ["jsonl_syntax", "missing_field", "csv", "syntax_and_field"]


@pytest.mark.parametrize("make_bad", BAD_INPUTS, ids=IDS)
def test_bad_input_exits_2_and_creates_no_db(tmp_path: Path, make_bad) -> None:
    data, expected = make_bad(tmp_path)
    db = tmp_path / "runs" / "x.duckdb"
    result = invoke("run", "--data", str(data), "--model", "mock/judge", "--db", str(db))
    assert result.exit_code == 2
    assert result.stdout == ""
    stderr = " ".join(result.stderr.split())  # rich may wrap long lines
    for fragment in expected:
        assert fragment in stderr, result.stderr
    assert not db.exists()
    assert not db.parent.exists()


@pytest.mark.parametrize("make_bad", BAD_INPUTS, ids=IDS)
def test_bad_input_adds_nothing_to_an_existing_db(
    tmp_path: Path, items_file: Path, db_path: Path, make_bad
) -> None:
    first = invoke(
        "run",
        "--data",
        str(items_file),
        "--model",
        "mock/judge",
        "--db",
        str(db_path),
        "--no-progress",
    )
    assert first.exit_code == 0
    before = query(
        db_path,
        "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM items),"
        " (SELECT count(*) FROM judgments)",
    )
    data, _ = make_bad(tmp_path)
    result = invoke("run", "--data", str(data), "--model", "mock/judge", "--db", str(db_path))
    assert result.exit_code == 2
    after = query(
        db_path,
        "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM items),"
        " (SELECT count(*) FROM judgments)",
    )
    assert after == before


def test_missing_data_file(tmp_path: Path) -> None:
    result = invoke(
        "run",
        "--data",
        str(tmp_path / "nope.jsonl"),
        "--model",
        "mock/judge",
        "--db",
        str(tmp_path / "x.duckdb"),
    )
    assert result.exit_code == 2
    assert "nope.jsonl: no such file" in result.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_no_data_given(tmp_path: Path) -> None:
    result = invoke("run", "--model", "mock/judge", "--db", str(tmp_path / "x.duckdb"))
    assert result.exit_code == 2
    assert "--data" in result.stderr


def test_bad_model_string(items_file: Path, tmp_path: Path) -> None:
    result = invoke(
        "run", "--data", str(items_file), "--model", "gpt4", "--db", str(tmp_path / "x.duckdb")
    )
    assert result.exit_code == 2
    assert "field judge.model" in result.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_dry_run_estimates_and_writes_nothing(items_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "dry" / "x.duckdb"
    result = invoke(
        "run",
        "--data",
        str(items_file),
        "--model",
        "openai/gpt-4o-mini",
        "--samples",
        "3",
        "--db",
        str(db),
        "--dry-run",
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert "Dry run" in result.stderr
    assert "model calls (first attempts)" in result.stderr
    assert " 18 " in result.stderr  # 6 items x 3 samples
    assert "estimated cost" in result.stderr
    assert not db.exists()
    assert not db.parent.exists()


def test_dry_run_needs_no_key(
    items_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = invoke(
        "run",
        "--data",
        str(items_file),
        "--model",
        "openai/gpt-4o-mini",
        "--db",
        str(tmp_path / "x.duckdb"),
        "--dry-run",
    )
    assert result.exit_code == 0, result.stderr


# -- config files ------------------------------------------------------------------------------


def _config(tmp_path: Path, **settings: object) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def test_config_file_sets_the_run(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "three.jsonl", make_items(3))
    db = tmp_path / "cfg.duckdb"
    config = _config(
        tmp_path,
        data=str(data),
        samples=3,
        name="from-config",
        db=str(db),
        concurrency=2,
        judge={"model": "mock/other", "temperature": 0.5},
    )
    result = invoke("run", "--config", str(config), "--no-progress")
    assert result.exit_code == 0, result.stderr
    run_id = result.stdout.strip()
    name, n_samples, model, stored = query(
        db,
        "SELECT name, n_samples, json_extract_string(models, '$.judge'), config FROM runs "
        "WHERE run_id = ?",
        [run_id],
    )[0]
    assert (name, n_samples, model) == ("from-config", 3, "mock/other")
    stored = json.loads(stored)
    assert stored["concurrency"] == 2
    assert stored["judge"]["temperature"] == 0.5
    assert scalar(db, "SELECT count(*) FROM samples") == 9


def test_flags_override_the_config_file(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "three.jsonl", make_items(3))
    db = tmp_path / "cfg.duckdb"
    config = _config(
        tmp_path,
        data=str(data),
        samples=3,
        name="from-config",
        db=str(db),
        judge={"model": "mock/other", "temperature": 0.5},
    )
    result = invoke(
        "run",
        "--config",
        str(config),
        "--samples",
        "1",
        "--name",
        "flagged",
        "--model",
        "mock/judge",
        "--temperature",
        "0.2",
        "--no-progress",
    )
    assert result.exit_code == 0, result.stderr
    name, n_samples, model, stored = query(
        db, "SELECT name, n_samples, json_extract_string(models, '$.judge'), config FROM runs"
    )[0]
    assert (name, n_samples, model) == ("flagged", 1, "mock/judge")
    assert json.loads(stored)["judge"]["temperature"] == 0.2
    assert scalar(db, "SELECT count(*) FROM samples") == 3


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"samples": 0}, "field samples"),
        ({"sample": 2}, "field sample"),
        ({"judge": {"model": "mock/judge", "temprature": 0.1}}, "field judge.temprature"),
        ({"judge": {"model": "mock/judge", "temperature": 7}}, "field judge.temperature"),
        ({"retry": {"max_attempts": 0}}, "field retry.max_attempts"),
    ],
    ids=["samples_zero", "unknown_key", "unknown_judge_key", "bad_temperature", "bad_retry"],
)
def test_invalid_config_names_the_field(
    tmp_path: Path, items_file: Path, settings: dict, field: str
) -> None:
    db = tmp_path / "x.duckdb"
    config = _config(tmp_path, data=str(items_file), db=str(db), **settings)
    result = invoke("run", "--config", str(config))
    assert result.exit_code == 2
    assert f"{config}: invalid configuration" in result.stderr
    assert field in result.stderr
    assert not db.exists()


def test_config_not_yaml_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    result = invoke("run", "--config", str(path))
    assert result.exit_code == 2
    assert "must hold a mapping" in result.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("samples: [1, 2\n")
    result = invoke("run", "--config", str(broken))
    assert result.exit_code == 2
    assert "not valid YAML" in result.stderr


# -- resume errors -----------------------------------------------------------------------------


def test_resume_unknown_run(items_file: Path, db_path: Path) -> None:
    assert (
        invoke("run", "--data", str(items_file), "--db", str(db_path), "--no-progress").exit_code
        == 0
    )
    result = invoke("run", "--resume", "nope", "--db", str(db_path))
    assert result.exit_code == 2
    assert "no run 'nope'" in result.stderr
    assert result.stdout == ""


def test_resume_with_missing_db_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "typo" / "x.duckdb"
    result = invoke("run", "--resume", "20250101", "--db", str(db))
    assert result.exit_code == 2
    assert "no such database" in result.stderr
    assert not db.parent.exists()


def test_resume_of_finished_run_does_nothing_more(items_file: Path, db_path: Path) -> None:
    first = invoke("run", "--data", str(items_file), "--db", str(db_path), "--no-progress")
    run_id = first.stdout.strip()
    before = query(db_path, "SELECT * FROM judgments ORDER BY ALL")
    again = invoke("run", "--resume", run_id[:17], "--db", str(db_path), "--no-progress")
    assert again.exit_code == 0, again.stderr
    assert again.stdout.strip() == run_id
    assert "already complete" in again.stderr
    assert query(db_path, "SELECT * FROM judgments ORDER BY ALL") == before
    assert scalar(db_path, "SELECT status FROM runs") == "completed"


def test_prompt_beyond_context_window_is_refused(tmp_path: Path) -> None:
    note = "The patient reports chest pain radiating to the left arm with sweating. " * 9000
    data = tmp_path / "big.jsonl"
    rows = [
        {"id": "ok-1", "notes": ["short note"], "summary": "Fine.", "specialty": "Primary Care"},
        {
            "id": "huge-1",
            "notes": ["short", note],
            "summary": "Summary.",
            "specialty": "Primary Care",
        },
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    db = tmp_path / "big.duckdb"
    result = invoke("run", "--data", str(data), "--model", "openai/gpt-4o-mini",
                    "--base-url", "http://127.0.0.1:9/v1", "--db", str(db))  # fmt: skip
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "item 'huge-1': field notes.1.text" in message
    assert "128000-token context window of openai/gpt-4o-mini" in message
    assert "ok-1" not in message
    assert not db.exists()
