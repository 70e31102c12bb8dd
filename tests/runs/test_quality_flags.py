"""Suspect-judgment flags (issue 37, part 1): each rule on its own, then whole runs through the
CLI against the fake server — a junk judge is flagged everywhere a score is shown, the
simulated judge on the demo is not."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from clinjudge.runs._suspect import (
    degenerate,
    shingles,
    stated_score_conflict,
    stigma_conflict,
    template_echo,
    too_short,
    words,
)
from tests.cli._helpers import invoke, query
from tests.factories import make_items, write_jsonl
from tests.fake_openai import PDSQI9_KEYS, FakeOpenAIServer

DEMO = Path(__file__).resolve().parents[2] / "examples" / "pdsqi9_demo.jsonl"


# -- the rules, one by one ------------------------------------------------------------------


def test_degenerate_reasons_are_repeats_not_prose() -> None:
    assert degenerate("}. 1. 1. 1. 1. 1. 1. 1. 1. 1.") is not None
    loop = "The patient has diabetes and" + " the dose is wrong," * 5
    assert (degenerate(loop) or "").startswith("loops on a phrase ('the dose is' 5 times")
    prose = (
        "The summary states a metformin dose of 1000 mg twice daily while note 2 records 500 mg, "
        "so one medication fact contradicts the source."
    )
    assert degenerate(prose) is None
    assert degenerate("1 1 1") is None  # too short to judge repetition


def test_short_reasons_and_template_echoes() -> None:
    assert too_short("ok") == "1 word(s)" and too_short("Good summary overall.") is None
    echo = template_echo("The JSON object contains 11 keys.", set())
    assert echo == "talks about the reply's format, not the note"
    # Speaking of the note while naming the format is a reason, not an echo.
    assert (
        template_echo("The summary omits the JSON-worthy detail of the patient's A1c.", set())
        is None
    )
    anchor = shingles(words("The summary includes every problem that the notes document."))
    copied = "As required, the summary includes every problem that the notes document here."
    assert (template_echo(copied, anchor) or "").startswith("copies the rubric")
    own = "The summary includes the problems of note 1 but drops the anemia of note 3."
    assert template_echo(own, anchor) is None


@pytest.mark.parametrize(
    ("reason", "value", "flagged"),
    [
        ("I would rate this 4/5: minor omissions.", 1, True),
        ("I would rate this 4/5: minor omissions.", 4, False),
        ("Score: 2 because the dose is wrong.", 5, True),
        ("Rated 3 out of five.", 3, False),
        ("Version 2/3 of the note was used.", 1, False),  # not on a 1-5 scale's /5
        ("Better than a 2, worse than a 4.", 3, False),  # no score stated as given
        ("Scores 2/5 and 4/5 were both considered.", 3, False),  # two scores: left alone
    ],
)
def test_a_stated_score_must_match_the_score(reason: str, value: int, flagged: bool) -> None:
    assert (stated_score_conflict(reason, value, 1, 5) is not None) is flagged


def test_stigma_keys_against_their_reasons() -> None:
    assert stigma_conflict("No stigmatizing language is used.", 1) is not None
    assert stigma_conflict("No stigmatizing language is used.", 0) is None
    assert stigma_conflict("The summary uses stigmatizing language ('noncompliant').", 0)
    assert stigma_conflict("The summary uses stigmatizing language ('noncompliant').", 1) is None


# -- whole runs ------------------------------------------------------------------------------

FILLER = "}. 1. 1. 1. 1. 1. 1. 1. 1. 1. 1. 1."


def _junk(body: dict[str, Any]) -> dict[str, Any]:
    """A tiny model's junk: every score 1, filler reasons, a template echo."""
    del body
    reply: dict[str, Any] = {k: {"score": 1, "explanation": FILLER} for k in PDSQI9_KEYS}
    reply["voice_summ"] = {"score": 1, "explanation": "No stigmatizing language found here."}
    reply["rationale"] = "The JSON object contains 11 keys."
    return reply


def _run(data: Path, db: Path, server: FakeOpenAIServer, *extra: str) -> Any:
    return invoke(
        "run", "--data", str(data), "--model", "openai/fake", "--base-url", server.base_url,
        "--db", str(db), "--no-progress", "--explanations", "--max-tokens", "1000", *extra,
    )  # fmt: skip


def _words_of_junk() -> int:
    return len(json.dumps(_junk({})).split())


@pytest.fixture
def junk_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, Any]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(6))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer(responder=_junk) as server:
        # The fake counts a reply's words as its tokens: the cap is the reply's length.
        result = _run(data, db, server, "--max-tokens", str(_words_of_junk()))
    assert result.exit_code == 0, result.stderr
    return db, result.stdout.split()[0], result


def test_a_junk_judge_is_flagged_in_the_summary_and_the_store(junk_run: tuple) -> None:
    db, run_id, result = junk_run
    line = " ".join(result.stderr.split())
    assert "6 samples ok" in line and "suspect: 6 sample(s) flagged" in line
    assert "run flag: no_spread accurate: final score 1 on all 6 items" in line
    rows = query(db, "SELECT flag, attribute, count(*) FROM quality_flags GROUP BY ALL")
    flags = {(f, a): n for f, a, n in rows}
    assert flags[("at_token_cap", "")] == 6
    assert flags[("template_echo", "")] == 6  # the overall rationale
    assert flags[("degenerate_reason", "accurate")] == 6
    assert flags[("repeated_reason", "accurate")] == 6  # the same filler on every item
    assert flags[("score_contradiction", "voice_summ")] == 6  # set, "no stigmatizing language"
    assert flags[("no_spread", "accurate")] == 1
    assert ("no_spread", "voice_summ") not in flags  # a binary key may rightly never vary
    # Flags are evidence, not filters: the final scores are still there.
    assert query(db, "SELECT count(*) FROM judgments WHERE final AND value = 1")[0][0] > 0


def test_runs_show_export_agree_and_the_api_show_the_flags(junk_run: tuple, tmp_path: Path) -> None:
    import clinjudge

    db, run_id, _ = junk_run
    shown = invoke("runs", "show", run_id, "--db", str(db))
    assert shown.exit_code == 0 and "suspect-judgment flags" in shown.stdout
    assert "at_token_cap" in shown.stdout and "no_spread" in shown.stdout
    data = json.loads(invoke("runs", "show", run_id, "--db", str(db), "--json").stdout)
    assert data["quality_flags"]["suspect_samples"] == 6
    assert data["quality_flags"]["by_flag"]["at_token_cap"] == 6
    out = tmp_path / "flags.csv"
    exported = invoke(
        "export", run_id, "--db", str(db), "--table", "quality_flags", "--out", str(out)
    )
    assert exported.exit_code == 0, exported.stderr
    assert "at_token_cap" in out.read_text()
    judgments = tmp_path / "j.jsonl"
    assert invoke("export", run_id, "--db", str(db), "--out", str(judgments)).exit_code == 0
    rows = [json.loads(line) for line in judgments.read_text().splitlines()]
    assert all("at_token_cap" in r["suspect_flags"] for r in rows if not r["final"])
    run = clinjudge.load_run(run_id, db=db)
    assert "degenerate_reason" in run.quality_flags().column("flag").to_pylist()
    compared = json.loads(invoke("compare", run_id, "--db", str(db), "--json").stdout)
    assert compared["runs"][0]["suspect_samples"] == 6


def test_drop_suspect_leaves_flagged_samples_out_of_the_finals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer(responder=_junk) as server:
        result = _run(data, db, server, "--drop-suspect", "--allow-failures", "100%")
    assert result.exit_code == 0, result.stderr
    finals = query(db, "SELECT DISTINCT status, error FROM judgments WHERE final")
    assert finals == [("failed", "no sample kept: 1 suspect (dropped), 0 failed")]


def test_the_simulated_judge_raises_no_flag_on_the_demo(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    for mode in ("single", "panel", "magentic"):
        result = invoke(
            "run", "--data", str(DEMO), "--mode", mode, "--samples", "3", "--explanations",
            "--db", str(db), "--no-progress",
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        assert "suspect" not in result.stderr
    assert query(db, "SELECT count(*) FROM quality_flags")[0][0] == 0


def test_the_viewer_filters_and_badges_suspect_items(junk_run: tuple) -> None:
    from clinjudge.reports import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

        client = TestClient(create_app(junk_run[0], n_boot=20))
    run_id = junk_run[1]
    page = client.get(f"/runs/{run_id}/")
    assert page.status_code == 200
    assert "Suspect judgments" in page.text and 'class="badge suspect"' in page.text
    listed = client.get(f"/runs/{run_id}/?suspect=1")
    assert listed.status_code == 200 and '<span class="chip">suspect</span>' in listed.text
    item = client.get(f"/runs/{run_id}/items/item-0000")
    assert item.status_code == 200 and "at_token_cap" in item.text


def test_runs_flag_works_the_flags_out_again(junk_run: tuple) -> None:
    import duckdb

    db, run_id, _ = junk_run
    before = sorted(query(db, "SELECT * FROM quality_flags"))
    con = duckdb.connect(str(db))
    con.execute("DELETE FROM quality_flags")  # a run from before flags were recorded
    con.close()
    again = invoke("runs", "flag", run_id, "--db", str(db))
    assert again.exit_code == 0, again.stderr
    assert "at_token_cap" in again.stdout
    assert sorted(query(db, "SELECT * FROM quality_flags")) == before


HOSTILE_KEY = "<script>alert(1)</script>[bold]x[/bold]"


def test_a_hostile_key_in_a_reply_is_shown_as_text_wherever_its_flag_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clinjudge.reports import create_app

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def extra_key(body: dict[str, Any]) -> dict[str, Any]:
        del body
        reply: dict[str, Any] = {k: 3 for k in PDSQI9_KEYS}
        reply.update(abstraction=1, voice_summ=0, voice_note=0, **{HOSTILE_KEY: "hi"})
        return reply

    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer(responder=extra_key) as server:
        result = _run(data, db, server)
    assert result.exit_code == 0, result.stderr
    run_id = result.stdout.split()[0]
    flags = query(db, "SELECT flag, detail FROM quality_flags")
    assert {f for f, _ in flags} == {"reply_ambiguous"}
    assert all(HOSTILE_KEY in d for _, d in flags)
    shown = invoke("runs", "show", run_id, "--db", str(db))
    assert "reply_ambiguous" in shown.stdout
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

        client = TestClient(create_app(db, n_boot=20))
    page = client.get(f"/runs/{run_id}/items/item-0000")
    assert page.status_code == 200
    assert "<script>alert(1)" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;[bold]x[/bold]" in page.text
