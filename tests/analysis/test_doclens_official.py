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
    "No chest pain.": (1, [4]),  # never asked: [9] does not exist
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
        {"citations": list({4, 0, 9}), "pred": 0, "provenance": []},  # list(set(ref))
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
    assert report is not None and report.compat == "official"
    got = {r.section: (r.citation_recall, r.citation_precision) for r in report.pooled}
    assert set(got) == set(expected)
    for section, values in expected.items():
        assert got[section] == pytest.approx(values), section
    assert got["plan"][1] == 0  # empty denominator: 0, not undefined


def test_the_same_run_by_clinjudge_rules(official_run):
    db, run_id = official_run
    with RunStore(db) as store:
        report = doclens_report(store, run_id, "clinjudge")
    assert report is not None
    rows = {r.section: r for r in report.pooled}
    sub = rows["subjective"]
    assert list({4, 0, 9})[:2] == [0, 9]
    # entailed: cough, fever, sleeps; chest pain is judged (as officially) on the first two of
    # list(set([4, 0, 9])), which name the unknown 9: not entailed, no call. Counted: [0]
    # (only citation), none of [1][2], none of chest pain's two, [3] of the borrowed [3];
    # eats well's [3] is not counted.
    assert (sub.statements_entailed, sub.statements) == (3, 5)
    assert (sub.citations_counted, sub.citations) == (2, 7)
    assert rows["plan"].citation_precision is None
    assert rows["total"].citation_recall == pytest.approx(3 / 6)


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
    for compat, precision in (("official", 2 / 9), ("clinjudge", 2 / 7)):
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
    # Judged on the official list's first two (no call: 9 is unknown); counted uncapped.
    assert stored["No chest pain."][0] == list({4, 0, 9})[:2]
    assert stored["No chest pain."][2]["citations"] == list({4, 0, 9})
    assert stored["No chest pain."][2]["unknown"] is True
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
    assert report is not None and report.compat == "clinjudge"


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


# More than ten citations (the official cap): the official evaluator deduplicates with
# list(set(ref)), checks that whole list for units out of range (then the sentence scores 0 and
# the whole list is stored and counted), and otherwise judges and counts its first ten.
MANY_TURNS = "\n".join(f"[patient] symptom number {n}" for n in range(14))
MANY = Item(
    id="many",
    notes=[MANY_TURNS],
    reference="Symptoms.",
    summary=(
        "Many symptoms"
        + "".join(f"[{n}]" for n in (11, 3, 10, 0, 9, 1, 8, 2, 7, 13, 6, 5))
        + ". Other symptoms"
        + "".join(f"[{n}]" for n in (12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 99))
        + ". Last symptom [4][4]."
    ),
    meta={"section": "subjective"},
)
MANY_NAMED = [0, 1, 2, 3, 10, 11, 12, 13]


def _reference_record(sentence: str, prediction: int) -> dict:
    """What eval_citation.py stores for a sentence with its own citations (14 units)."""
    ref = [int(r[1:]) for r in re.findall(r"\[\d+", sentence)]
    ref = list(set(ref))
    if any(ref_id >= 14 for ref_id in ref):
        return {"citations": ref, "pred": 0, "provenance": []}
    return {"citations": ref[:10], "pred": prediction, "provenance": MANY_NAMED}


def test_official_counts_over_ten_citations_as_the_official_evaluator(tmp_path):
    sentences = [s + "." for s in MANY.summary.split(". ")]
    sentences[-1] = sentences[-1].rstrip(".")
    records = {"subjective": [_reference_record(s, 1) for s in sentences]}
    assert len(records["subjective"][0]["citations"]) == 10  # the cap, in set order
    assert records["subjective"][1]["pred"] == 0  # 99 is out of range: all 11 counted

    def scripted(body: dict) -> str | None:
        if "supporting" not in body["messages"][0]["content"]:
            return None
        named = [n for n in _shown(body) if n in MANY_NAMED]
        return json.dumps({"explanation": "s", "supporting": named, "entailed": 1})

    data = write_jsonl(tmp_path / "items.jsonl", [MANY])
    db = tmp_path / "many.duckdb"
    with FakeOpenAIServer(make_responder(broken=scripted)) as server:
        result = invoke(
            "run", "--rubric", "doclens", "--data", str(data), "--db", str(db),
            "--model", "openai/local-judge", "--base-url", server.base_url,
            "--doclens", "compat=official", "--no-progress",
        )  # fmt: skip
        shown = [
            _shown(r)
            for r in server.requests
            if "<STATEMENT>\nMany symptoms.\n</STATEMENT>" in _user(r)
        ]
    assert result.exit_code == 0, result.stderr
    # The judge saw the ten units the official evaluator would have sent.
    assert shown and shown[0] == sorted(records["subjective"][0]["citations"])
    expected = official_citation_scores(records)
    with RunStore(db) as store:
        report = doclens_report(store, result.stdout.strip())
    assert report is not None
    got = {r.section: (r.citation_recall, r.citation_precision) for r in report.pooled}
    for section, values in expected.items():
        assert got[section] == pytest.approx(values, abs=1e-12), section


def _user(request: dict) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


def _shown(request: dict) -> list[int]:
    """The unit numbers listed in a citation request's source block."""
    units = _user(request).split("</STATEMENT>")[-1]
    return sorted(int(n) for n in re.findall(r"^\[(\d+)\]", units, re.MULTILINE))
