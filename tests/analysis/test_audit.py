"""Vendor audits: inputs, flag rules, statistics on hand-built tables, and a judged audit run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clinjudge.analysis import (
    AuditError,
    AuditStatistics,
    bootstrap_mean_ci,
    flag_items,
    holm_adjust,
    paired_comparisons,
    vendor_summaries,
)
from clinjudge.analysis import audit_for_run as _audit_for_run
from clinjudge.inputs import InputError, iter_audit_items, load_audit_items, parse_flag_rule
from clinjudge.judges import ModelSettings
from clinjudge.orchestration import RunConfig, create_run, execute_run, prepare_audit
from clinjudge.reports import write_audit_report
from clinjudge.reports._audit_report import render_audit_report
from clinjudge.rubrics import Item, Rubric
from clinjudge.runs import RunStore
from tests.factories import write_jsonl
from tests.fake_openai import FakeOpenAIServer, pdsqi9_scores

LIKERT = ["citation", "accurate", "thorough", "useful", "organized", "comprehensible", "succinct"]


def audit_for_run(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``audit_for_run`` as ``judge audit --json`` prints it: the layout these tests pin down
    (the typed result is read by attribute in tests/analysis/test_typed_results.py)."""
    return _audit_for_run(*args, **kwargs).to_dict()


def _encounters(count: int, vendor: str, skip: tuple[int, ...] = ()) -> list[Item]:
    return [
        Item(
            id=f"enc-{n:03d}",
            notes=[f"Visit 1: synthetic note for patient {n}.", "Visit 2: follow-up."],
            summary=f"Synthetic summary of encounter {n} written by {vendor} [Note 1].",
            specialty="Primary Care",
        )
        for n in range(count)
        if n not in skip
    ]


def _table(n: int, shift: float = 1.0) -> dict[str, dict[str, dict[str, float | None]]]:
    """Vendor A and C alike; vendor B exactly ``shift`` lower on `accurate` everywhere."""
    rng = np.random.default_rng(7)
    scores: dict[str, dict[str, dict[str, float | None]]] = {"A": {}, "B": {}, "C": {}}
    for e in range(n):
        base = {k: float(rng.integers(2, 6)) for k in LIKERT}
        scores["A"][f"e{e}"] = dict(base)
        scores["B"][f"e{e}"] = {**base, "accurate": base["accurate"] - shift}
        scores["C"][f"e{e}"] = dict(base)
    return scores


# ---------------------------------------------------------------------------------------------
# Statistics on hand-built tables


def test_holm_adjust_matches_hand_computation() -> None:
    assert holm_adjust([0.01, 0.04, 0.03, None, float("nan")]) == pytest.approx(
        [0.03, 0.06, 0.06, None, None]
    )
    assert holm_adjust([0.5, 0.9]) == [1.0, 1.0]
    assert holm_adjust([]) == []


def test_bootstrap_ci_covers_the_mean_and_is_reproducible() -> None:
    values = np.random.default_rng(1).integers(1, 6, size=40).astype(float)
    lo, hi = bootstrap_mean_ci(values, n_boot=2000, seed=3)
    assert lo < values.mean() < hi
    assert hi - lo < 1.5
    assert bootstrap_mean_ci(values, n_boot=2000, seed=3) == (lo, hi)
    assert bootstrap_mean_ci([4.0]) == (4.0, 4.0)
    assert bootstrap_mean_ci([]) is None


def test_vendor_summaries_mean_median_ci_n() -> None:
    scores = _table(30)
    summary = vendor_summaries(scores, LIKERT, n_boot=1000, seed=0)
    a, b = summary["A"]["accurate"], summary["B"]["accurate"]
    assert a["n"] == b["n"] == 30
    assert a["mean"] - b["mean"] == pytest.approx(1.0)
    assert a["median"] - b["median"] == pytest.approx(1.0)
    for block in (a, b):
        assert block["ci95"][0] <= block["mean"] <= block["ci95"][1]
    empty = vendor_summaries({"A": {"e": {"accurate": None}}}, ["accurate"])
    assert empty["A"]["accurate"] == {"n": 0, "mean": None, "median": None, "ci95": None}


def test_vendor_b_one_point_worse_is_significant_after_holm() -> None:
    rows = paired_comparisons(_table(20), LIKERT)
    assert len(rows) == 3 * len(LIKERT)  # A-B, A-C, B-C
    by_key = {(r["vendor_a"], r["vendor_b"], r["attribute"]): r for r in rows}
    ab = by_key[("A", "B", "accurate")]
    assert ab["n_pairs"] == 20
    assert ab["median_difference"] == 1.0 and ab["mean_difference"] == 1.0
    assert ab["p_holm"] < 0.05 and ab["significant"]
    assert ab["p_holm"] >= ab["p"]
    bc = by_key[("B", "C", "accurate")]
    assert bc["median_difference"] == -1.0 and bc["significant"]
    for (a, b, attribute), r in by_key.items():
        if attribute != "accurate" or (a, b) == ("A", "C"):
            assert r["p"] == 1.0 and not r["significant"]  # identical scores
    # With few encounters the same shift does not survive the correction.
    few = {
        (r["vendor_a"], r["vendor_b"], r["attribute"]): r
        for r in paired_comparisons(_table(4), LIKERT)
    }
    assert not few[("A", "B", "accurate")]["significant"]


def test_pairs_use_only_matched_encounters() -> None:
    scores = _table(12)
    del scores["C"]["e0"]
    scores["B"]["e1"]["accurate"] = None  # a null never pairs
    by_key = {
        (r["vendor_a"], r["vendor_b"], r["attribute"]): r
        for r in paired_comparisons(scores, ["accurate"])
    }
    assert by_key[("A", "C", "accurate")]["n_pairs"] == 11
    assert by_key[("A", "B", "accurate")]["n_pairs"] == 11
    assert by_key[("B", "C", "accurate")]["n_pairs"] == 10


def test_flag_rules_fire_on_the_right_items(pdsqi9: Rubric) -> None:
    rules = [parse_flag_rule("accurate<=2", pdsqi9), parse_flag_rule("voice_summ>=1", pdsqi9)]
    scores = {
        "A": {"e1": {"accurate": 5, "voice_summ": 0}, "e2": {"accurate": 2, "voice_summ": 1}},
        "B": {"e1": {"accurate": 3, "voice_summ": 1}, "e2": {"accurate": 2.5, "voice_summ": 0}},
    }
    flagged = flag_items(scores, rules, failed=[("B", "e3")])
    assert [(f["vendor"], f["encounter_id"]) for f in flagged] == [
        ("A", "e2"),
        ("B", "e1"),
        ("B", "e3"),
    ]
    assert flagged[0]["item_id"] == "A::e2"
    assert flagged[0]["reasons"] == ["accurate=2 (accurate<=2)", "voice_summ=1 (voice_summ>=1)"]
    assert flagged[1]["reasons"] == ["voice_summ=1 (voice_summ>=1)"]
    assert "no valid judgment" in flagged[2]["reasons"][0]
    exact = flag_items(scores, [parse_flag_rule("accurate == 3")])
    assert [f["item_id"] for f in exact] == ["B::e1"]


# ---------------------------------------------------------------------------------------------
# Inputs


def test_load_audit_items_matches_by_encounter(tmp_path: Path, pdsqi9: Rubric) -> None:
    a = write_jsonl(tmp_path / "alpha.jsonl", _encounters(5, "alpha"))
    b = write_jsonl(tmp_path / "beta.jsonl", _encounters(5, "beta", skip=(2,)))
    loaded = load_audit_items([a, b], pdsqi9)
    assert loaded.vendors == ["alpha", "beta"]
    assert len(loaded.ids) == 9
    assert loaded.ids[0] == "alpha::enc-000" and loaded.encounter_ids[0] == "enc-000"
    problems: list[str] = []
    first = next(iter_audit_items([a, b], pdsqi9, problems))[1]
    assert first.id == "alpha::enc-000" and not problems
    assert first.vendor == "alpha" and first.meta["encounter_id"] == "enc-000"
    assert loaded.unmatched == [
        {"encounter_id": "enc-002", "present": ["alpha"], "missing": ["beta"]}
    ]


def test_one_file_needs_a_vendor_on_every_record(tmp_path: Path, pdsqi9: Rubric) -> None:
    items = [
        i.model_copy(update={"vendor": "x" if n % 2 else "y"})
        for n, i in enumerate(_encounters(4, "v"))
    ]
    items += [i.model_copy(update={"vendor": "x"}) for i in _encounters(1, "x")]
    both = write_jsonl(tmp_path / "both.jsonl", items)
    loaded = load_audit_items([both], pdsqi9)
    assert loaded.vendors == ["y", "x"]
    assert {u["encounter_id"] for u in loaded.unmatched} == {"enc-001", "enc-002", "enc-003"}
    bare = write_jsonl(tmp_path / "bare.jsonl", _encounters(2, "v"))
    with pytest.raises(InputError, match="field vendor"):
        load_audit_items([bare], pdsqi9)
    solo = write_jsonl(
        tmp_path / "solo.jsonl",
        [i.model_copy(update={"vendor": "x"}) for i in _encounters(2, "x")],
    )
    with pytest.raises(InputError, match="at least two vendors"):
        load_audit_items([solo], pdsqi9)


def test_duplicate_encounter_of_one_vendor_is_an_error(tmp_path: Path, pdsqi9: Rubric) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", _encounters(2, "a"))
    records = [{**i.model_dump(exclude_none=True), "vendor": "a"} for i in _encounters(1, "b")]
    b = tmp_path / "b.jsonl"
    b.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(InputError, match="twice"):
        load_audit_items([a, b], pdsqi9)


# ---------------------------------------------------------------------------------------------
# A judged audit run against the fake server


def _vendor_responder(body: dict[str, Any]) -> dict[str, Any]:
    """Scores follow the encounter; `beta` is always 2 points less accurate than `alpha`."""
    text = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    encounter = text.split("encounter ", 1)[1].split(" ", 1)[0]
    scores = pdsqi9_scores(encounter)
    scores["accurate"] = 2 if "written by beta" in text else 4
    scores["voice_summ"] = 1 if "written by gamma" in text else 0
    return scores


def test_audit_run_end_to_end(
    tmp_path: Path, db_path: Path, pdsqi9: Rubric, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    paths = [
        write_jsonl(tmp_path / "alpha.jsonl", _encounters(12, "alpha")),
        write_jsonl(tmp_path / "beta.jsonl", _encounters(12, "beta")),
        write_jsonl(tmp_path / "gamma.jsonl", _encounters(12, "gamma", skip=(5,))),
    ]
    with FakeOpenAIServer(responder=_vendor_responder) as server:
        config = RunConfig(
            data=",".join(map(str, paths)),
            judge=ModelSettings(model="openai/local-judge", base_url=server.base_url, timeout=5),
            db=str(db_path),
        )
        prepared, audit_items = prepare_audit(config, [str(p) for p in paths])
        assert audit_items.unmatched[0]["encounter_id"] == "enc-005"
        with RunStore(db_path) as store:
            run_id = create_run(store, prepared)
            tally = execute_run(store, run_id, prepared, show_progress=False)
    assert (tally.ok, tally.failed) == (35, 0)
    with RunStore(db_path, read_only=True) as store:
        audit = audit_for_run(store, run_id[:10], n_boot=500, seed=1)
    assert audit["vendors"] == ["alpha", "beta", "gamma"]
    assert audit["n_encounters"] == 12 and audit["n_items"] == 35
    assert not audit["simulated"]
    assert audit["summaries"]["alpha"]["accurate"]["mean"] == 4.0
    assert audit["summaries"]["beta"]["accurate"]["mean"] == 2.0
    assert audit["summaries"]["gamma"]["accurate"]["n"] == 11
    rows = {(c["vendor_a"], c["vendor_b"], c["attribute"]): c for c in audit["comparisons"]}
    assert "abstraction" not in {c["attribute"] for c in audit["comparisons"]}
    ab = rows[("alpha", "beta", "accurate")]
    assert ab["n_pairs"] == 12 and ab["median_difference"] == 2.0 and ab["significant"]
    assert rows[("alpha", "gamma", "accurate")]["n_pairs"] == 11
    assert rows[("alpha", "gamma", "citation")]["p"] == 1.0  # same encounter, same scores
    flagged = {(f["vendor"], f["encounter_id"]): f["reasons"] for f in audit["flagged"]}
    assert len(flagged) == 12 + 11
    assert flagged[("beta", "enc-000")] == ["accurate=2 (accurate<=2)"]
    assert flagged[("gamma", "enc-000")] == ["voice_summ=1 (voice_summ>=1)"]
    assert not any(v == "alpha" for v, _ in flagged)
    # No PRM step scores stored: the prm<0.5 default is left out (and needs no note).
    assert audit["flag_rules"] == ["accurate<=2", "voice_summ>=1"]
    assert not any("No PRM step scores" in note for note in audit["notes"])
    assert audit["unmatched"] == [
        {"encounter_id": "enc-005", "present": ["alpha", "beta"], "missing": ["gamma"]}
    ]
    cost = audit["cost"]
    assert cost["gamma"]["items"] == 11 and cost["alpha"]["calls"] == 12
    assert cost["alpha"]["latency_per_item_s"] > 0
    html_text, md_text = render_audit_report(AuditStatistics.model_validate(audit))
    assert "SIMULATED" not in html_text
    assert "<script" not in html_text and "<svg" in html_text
    assert "enc-005" in md_text and "alpha vs beta" in md_text
    files = write_audit_report(AuditStatistics.model_validate(audit), tmp_path / "report")
    assert files.html.read_text() == html_text


def test_prm_rule_flags_items_with_a_low_step(
    tmp_path: Path, db_path: Path, pdsqi9: Rubric
) -> None:
    paths = [
        write_jsonl(tmp_path / "alpha.jsonl", _encounters(3, "alpha")),
        write_jsonl(tmp_path / "beta.jsonl", _encounters(3, "beta")),
    ]
    config = RunConfig(
        data=",".join(map(str, paths)), judge=ModelSettings(model="mock/judge"), db=str(db_path)
    )
    prepared, _ = prepare_audit(config, [str(p) for p in paths])
    with RunStore(db_path) as store:
        run_id = create_run(store, prepared)
        execute_run(store, run_id, prepared, show_progress=False)
        steps = [("alpha::enc-001", 0, 0.9), ("alpha::enc-001", 1, 0.31), ("beta::enc-002", 0, 0.7)]
        store.insert_rows(
            "prm_steps",
            [
                {"run_id": run_id, "item_id": i, "candidate": "summary", "step": n, "score": p}
                for i, n, p in steps
            ],
        )
        audit = audit_for_run(store, run_id, rules=["prm<0.5"], n_boot=100)
        lenient = audit_for_run(store, run_id, rules=["prm<0.75"], n_boot=100)
    assert [(f["item_id"], f["reasons"]) for f in audit["flagged"]] == [
        ("alpha::enc-001", ["lowest PRM step 0.310 (prm<0.5)"])
    ]
    assert {f["item_id"] for f in lenient["flagged"]} == {"alpha::enc-001", "beta::enc-002"}
    assert "prm" not in audit["attributes"]
    assert not any("No PRM step scores" in note for note in audit["notes"])


def test_a_plain_run_is_not_an_audit(items_file: Path, db_path: Path) -> None:
    from clinjudge.orchestration import prepare_run

    config = RunConfig(data=str(items_file), judge=ModelSettings(model="mock/judge"))
    prepared = prepare_run(config)
    with RunStore(db_path) as store:
        run_id = create_run(store, prepared)
        execute_run(store, run_id, prepared, show_progress=False)
        with pytest.raises(AuditError, match="not a vendor audit"):
            audit_for_run(store, run_id)
