"""PDSQI-9's abstraction -> synthesized gate: coerced by default, re-asked with ``gate: strict``.

Epic's published prompt asks for integers everywhere and its example output gives
``synthesized: 1``, so a number for ``synthesized`` when ``abstraction`` is 0 is read as null
(the number is kept); ``abstraction`` 1 without a synthesized score stays invalid.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from clinjudge.rubrics import JudgmentParseError, Rubric, load_rubric, parse_judgment
from tests.cli._helpers import invoke, query
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

RUBRIC = load_rubric("pdsqi9")
SCORES = {
    "citation": 4, "accurate": 5, "thorough": 3, "useful": 4, "organized": 2,
    "comprehensible": 5, "succinct": 3, "abstraction": 0, "synthesized": 1,
    "voice_summ": 0, "voice_note": 0,
}  # fmt: skip


def strict(rubric: Rubric) -> Rubric:
    return rubric.model_copy(
        update={"settings": rubric.settings.model_copy(update={"gate": "strict"})}
    )


def test_score_under_a_closed_gate_is_stored_as_null_and_kept():
    parsed = parse_judgment(json.dumps(SCORES), RUBRIC)
    assert parsed.values["synthesized"] is None
    assert parsed.coerced == {"synthesized": 1}
    assert {k: v for k, v in parsed.values.items() if k != "synthesized"} == {
        k: v for k, v in SCORES.items() if k != "synthesized"
    }


@pytest.mark.parametrize("given", [1, 5, "3", {"score": 4, "explanation": "grouped well"}])
def test_every_written_form_of_a_score_is_coerced(given):
    parsed = parse_judgment(json.dumps({**SCORES, "synthesized": given}), RUBRIC)
    assert parsed.values["synthesized"] is None and "synthesized" in parsed.coerced


def test_null_or_zero_under_a_closed_gate_is_no_coercion():
    for given in (None, "NA", 0):
        parsed = parse_judgment(json.dumps({**SCORES, "synthesized": given}), RUBRIC)
        assert parsed.values["synthesized"] is None and parsed.coerced == {}


def test_open_gate_still_needs_a_score():
    for rubric in (RUBRIC, strict(RUBRIC)):
        with pytest.raises(JudgmentParseError, match="synthesized may be null only"):
            parse_judgment(json.dumps({**SCORES, "abstraction": 1, "synthesized": None}), rubric)
    parsed = parse_judgment(json.dumps({**SCORES, "abstraction": 1, "synthesized": 4}), RUBRIC)
    assert parsed.values["synthesized"] == 4 and parsed.coerced == {}


def test_strict_gate_rejects_the_score():
    with pytest.raises(JudgmentParseError, match="synthesized must be null when abstraction is 0"):
        parse_judgment(json.dumps(SCORES), strict(RUBRIC))


def test_rubric_file_settings(tmp_path):
    from clinjudge.rubrics import RubricError, load_rubric_file

    data = RUBRIC.model_dump(mode="json")
    data["settings"] = {"gate": "strict"}
    path = tmp_path / "strict.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert load_rubric_file(path).settings.gate == "strict"
    data["settings"] = {"gate": "lenient"}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(RubricError, match="gate"):
        load_rubric_file(path)


def _run(server: FakeOpenAIServer, data: Path, db: Path, rubric: str) -> str:
    result = invoke(
        "run", "--data", str(data), "--rubric", rubric, "--model", "openai/local-judge",
        "--base-url", server.base_url, "--db", str(db), "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


def test_run_stores_null_keeps_the_raw_value_and_counts_it(
    fake_openai: FakeOpenAIServer, tmp_path: Path, db_path: Path, monkeypatch
):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    fake_openai.script([json.dumps(SCORES)])
    run_id = _run(fake_openai, data, db_path, "pdsqi9")
    assert fake_openai.request_count == 1  # no paid re-ask
    rows = query(
        db_path,
        "SELECT value, raw_value FROM judgments WHERE run_id = ? AND attribute = 'synthesized' "
        "AND NOT final",
        [run_id],
    )
    assert rows == [(None, 1.0)]
    shown = invoke("runs", "show", run_id, "--db", str(db_path), "--json")
    assert json.loads(shown.stdout)["gate_coerced"] == {"synthesized": 1}
    table = invoke("runs", "show", run_id, "--db", str(db_path))
    assert "gate coerced to null" in table.stdout and "synthesized 1" in table.stdout

    # gate: strict keeps the re-ask
    rubric = RUBRIC.model_dump(mode="json")
    rubric["settings"] = {"gate": "strict"}
    path = tmp_path / "pdsqi9_strict.yaml"
    path.write_text(yaml.safe_dump(rubric), encoding="utf-8")
    fake_openai.script([json.dumps(SCORES), json.dumps({**SCORES, "synthesized": None})])
    strict_run = _run(fake_openai, data, db_path, str(path))
    assert fake_openai.request_count == 3
    rows = query(
        db_path,
        "SELECT value, raw_value FROM judgments WHERE run_id = ? AND attribute = 'synthesized' "
        "AND NOT final",
        [strict_run],
    )
    assert rows == [(None, None)]
    shown = invoke("runs", "show", strict_run, "--db", str(db_path), "--json")
    assert "gate_coerced" not in json.loads(shown.stdout)
