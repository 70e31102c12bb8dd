"""`--doclens compat=official`: the official DocLens evaluator's arithmetic, from the same run.

The judge's citation replies are scripted per statement. The expected official numbers come
from records written by hand the way the official evaluator builds them (its citation list, its
prediction, the judge's provenance) and a transcription of its aggregation written here: per
section, entailed statements over statements, and over entailed statements the citations found
in the provenance over all citations; 0 for an empty denominator.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from clinjudge.analysis import doclens_report
from clinjudge.rubrics import Item
from clinjudge.runs import RunStore
from tests.cli._helpers import invoke, query
from tests.doclens_fake import make_responder
from tests.factories import write_jsonl
from tests.fake_openai import FakeOpenAIServer

DIALOGUE = (
    "[patient] i have had a cough for three days\n"
    "[patient] no fever\n"
    "[patient] i sleep well\n"
    "[patient] i eat well\n"
    "[patient] no chest pain"
)
ITEMS = [
    Item(
        id="x",
        notes=[DIALOGUE],
        reference="Cough for three days. No fever. Sleeps well.",
        summary=(
            "Cough for three days [0]. No fever [1][2]. No chest pain [4][0][9]. "
            "Sleeps well. Eats well [3][3]."
        ),
        meta={"section": "subjective"},
    ),
    Item(
        id="y",
        notes=["[doctor] rest at home\n[patient] okay"],
        reference="Rest at home.",
        summary="Rest at home.",
        meta={"section": "plan"},
    ),
]
# What the judge answers for each statement: (entailed, the units it names as support).
REPLIES = {
    "Cough for three days.": (1, []),  # one citation, none named
    "No fever.": (1, []),  # entailed, two citations, none named
    "No chest pain.": (1, [4]),  # judged on [4][0] (cap 2); [9] does not exist
    "Sleeps well.": (1, [3]),  # borrows [3][3] from the next statement
    "Eats well.": (0, [3]),
}

# The official evaluator's records, by hand: its citation list (own: deduplicated and uncapped;
# borrowed: as written), its prediction (0 without a call when a citation is out of range or
# there is none) and the provenance of the reply.
OFFICIAL_RECORDS = {
    "subjective": [
        {"citations": [0], "pred": 1, "provenance": []},
        {"citations": [1, 2], "pred": 1, "provenance": []},
        {"citations": [4, 0, 9], "pred": 0, "provenance": []},
        {"citations": [3, 3], "pred": 1, "provenance": [3]},
        {"citations": [3], "pred": 0, "provenance": [3]},
    ],
    "plan": [{"citations": [], "pred": 0, "provenance": []}],
}


def official_citation_scores(records: dict[str, list[dict]]) -> dict[str, tuple[float, float]]:
    """Citation recall and precision per section and total, as the official aggregation."""

    def ratio(a: int, b: int) -> float:
        return a / b if b else 0

    out = {}
    everything = [r for rows in records.values() for r in rows]
    for section, rows in [*records.items(), ("total", everything)]:
        entailed = sum(r["pred"] == 1 for r in rows)
        correct = sum(
            sum(c in r["provenance"] for c in r["citations"]) for r in rows if r["pred"] == 1
        )
        out[section] = (
            ratio(entailed, len(rows)),
            ratio(correct, sum(len(r["citations"]) for r in rows)),
        )
    return out


def _statement(user: str) -> str:
    return re.search(r"<STATEMENT>\n(.*?)\n</STATEMENT>", user, re.DOTALL).group(1)


def _scripted(body: dict) -> str | None:
    if "supporting" not in body["messages"][0]["content"]:
        return None
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    if "<STATEMENT>" not in user:
        return None
    entailed, named = REPLIES[_statement(user)]
    return json.dumps({"explanation": "scripted", "supporting": named, "entailed": entailed})


def _run(tmp: Path, compat: str) -> tuple[Path, str, FakeOpenAIServer]:
    data = write_jsonl(tmp / "items.jsonl", ITEMS)
    db = tmp / f"{compat}.duckdb"
    server = FakeOpenAIServer(make_responder(broken=_scripted))
    with server:
        config = {
            "rubric": "doclens",
            "data": str(data),
            "db": str(db),
            "judge": {"model": "openai/local-judge", "base_url": server.base_url},
            "doclens": {"max_citations": 2},
        }
        (tmp / "judge.yaml").write_text(yaml.safe_dump(config))
        result = invoke(
            "run", "--config", str(tmp / "judge.yaml"), "--doclens", f"compat={compat}",
            "--no-progress",
        )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return db, result.stdout.strip(), server


@pytest.fixture(scope="module")
def official_run(tmp_path_factory) -> tuple[Path, str]:
    db, run_id, _ = _run(tmp_path_factory.mktemp("official"), "official")
    return db, run_id


def test_official_arithmetic_matches_the_reference(official_run):
    db, run_id = official_run
    expected = official_citation_scores(OFFICIAL_RECORDS)
    with RunStore(db) as store:
        report = doclens_report(store, run_id)  # the run's own setting: official
    assert report["compat"] == "official"
    got = {r["section"]: (r["citation_recall"], r["citation_precision"]) for r in report["pooled"]}
    assert set(got) == set(expected)
    for section, values in expected.items():
        assert got[section] == pytest.approx(values), section
    assert got["plan"][1] == 0  # empty denominator: 0, not undefined


def test_the_same_run_by_clinjudge_rules(official_run):
    db, run_id = official_run
    with RunStore(db) as store:
        report = doclens_report(store, run_id, "clinjudge")
    rows = {r["section"]: r for r in report["pooled"]}
    sub = rows["subjective"]
    # entailed: cough, fever, chest pain, sleeps; counted: [0] (only citation), none of
    # [1][2], [4] of [4][0], [3] of the borrowed [3]; eats well's [3] is not counted
    assert (sub["statements_entailed"], sub["statements"]) == (4, 5)
    assert (sub["citations_counted"], sub["citations"]) == (3, 7)
    assert rows["plan"]["citation_precision"] is None
    assert rows["total"]["citation_recall"] == pytest.approx(4 / 6)


def test_runs_show_and_export_take_the_setting(official_run, tmp_path):
    db, run_id = official_run
    shown = invoke("runs", "show", run_id, "--db", str(db))
    assert "official DocLens arithmetic" in shown.stdout
    assert "output statements" in shown.stdout and "cited statements" not in shown.stdout
    ours = invoke("runs", "show", run_id, "--db", str(db), "--doclens-compat", "clinjudge")
    assert "clinjudge rules" in ours.stdout
    as_json = json.loads(
        invoke("runs", "show", run_id, "--db", str(db), "--json", "--doclens-compat",
               "clinjudge").stdout
    )  # fmt: skip
    assert as_json["doclens"]["compat"] == "clinjudge"
    bad = invoke("runs", "show", run_id, "--db", str(db), "--doclens-compat", "loose")
    assert bad.exit_code == 2 and "compat" in bad.stderr
    for compat, precision in (("official", 2 / 9), ("clinjudge", 3 / 7)):
        out = tmp_path / f"{compat}.jsonl"
        result = invoke(
            "export", run_id, "--out", str(out), "--table", "doclens", "--db", str(db),
            "--doclens-compat", compat,
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        total = [json.loads(line) for line in out.read_text().splitlines()][-1]
        assert (total["compat"], total["section"]) == (compat, "total")
        assert total["citation_precision"] == pytest.approx(precision)


def test_stored_claims_keep_what_the_official_arithmetic_needs(official_run):
    db, run_id = official_run
    rows = query(
        db,
        "SELECT text, citations, supporting, official FROM claims WHERE run_id = ? "
        "AND kind = 'citation' AND item_id = 'x' ORDER BY idx",
        [run_id],
    )
    stored = {text: (json.loads(c), json.loads(s), json.loads(o)) for text, c, s, o in rows}
    assert stored["No chest pain."][0] == [4, 0]  # judged on the capped list
    assert stored["No chest pain."][2] == {"citations": [4, 0, 9], "named": [4], "unknown": True}
    assert stored["Sleeps well."][2]["citations"] == [3, 3]
    assert stored["Cough for three days."][1:] == (
        [0],
        {"citations": [0], "named": [], "unknown": False},
    )


def test_clinjudge_run_reasks_an_entailed_reply_naming_no_citation(tmp_path):
    db, run_id, server = _run(tmp_path, "clinjudge")
    fever = [
        r for r in server.requests
        if "<STATEMENT>\nNo fever.\n</STATEMENT>" in json.dumps(r["messages"]).replace("\\n", "\n")
    ]  # fmt: skip
    assert len(fever) > 1  # re-asked
    rows = query(
        db, "SELECT verdict FROM claims WHERE run_id = ? AND text = 'No fever.' AND kind = "
        "'citation'", [run_id],
    )  # fmt: skip
    assert rows == [("failed",)]
    with RunStore(db) as store:
        report = doclens_report(store, run_id)
    assert report["compat"] == "clinjudge"


def test_official_nli_joins_the_other_citations_with_a_newline():
    import asyncio

    from clinjudge.judges.doclens._judges import NLIJudge, Unit
    from clinjudge.judges.doclens._settings import DocLensSettings

    premises: list[str] = []

    class Model:
        def entailment_probs(self, ps: list[str], hs: list[str]) -> list[float]:
            premises.extend(ps)
            return [0.1 if p == "two" else 0.9 for p in ps]  # "two" alone does not entail

    for compat, glue in (("official", "\n"), ("clinjudge", " ")):
        judge = object.__new__(NLIJudge)
        judge._ctx, judge._name, judge.model, judge.threshold = None, "m", Model(), 0.5
        judge.official = DocLensSettings(compat=compat).compat == "official"
        premises.clear()
        unit = Unit("citation", 0, "s", (1, 2, 3), cited={1: "one", 2: "two", 3: "three"})
        asyncio.run(judge.statement(unit))
        assert premises[0] == "one two three"  # the joint premise is joined with a space
        assert f"one{glue}three" in premises
