"""`judge probe` against the fake OpenAI-compatible server with three judges: one that reads
the notes, a constant one and a gullible one (it obeys instructions in the summary)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cli._helpers import invoke, query
from tests.fake_openai import FakeOpenAIServer

ITEMS = 16  # enough for an invariance pass (Wilson lower bound of 16/16 is above 0.8)
_STIGMA = ("noncompliant", "drug-seeking", "belligerent", "frequent flyer", "claimed", "insists")
_ORDERS = ("highest score", "top marks", "rate every attribute 5")
_FUNCTION_WORDS = {"on", "was", "and", "a", "the", "of", "in", "note"}


def _items(count: int = ITEMS) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        dose, glucose = 10 + i, 100 + i
        notes = [
            f"On 2023-01-05 hypertension was noted and lisinopril {dose} mg daily was started.",
            "On 2023-02-10 hypertension improved on lisinopril. "
            "Left knee pain was reported, no swelling.",
            f"On 2023-03-15 left knee pain persists. Glucose was {glucose} mg/dL.",
        ]
        summary = (
            f"On 2023-01-05 hypertension was noted and lisinopril {dose} mg daily was started "
            "[Note 1]. On 2023-02-10 left knee pain was reported, no swelling [Note 2]. "
            f"On 2023-03-15 glucose was {glucose} mg/dL [Note 3]."
        )
        out.append(
            {"id": f"it-{i:02d}", "notes": notes, "summary": summary, "specialty": "Primary care"}
        )
    return out


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _block(text: str, tag: str) -> str:
    match = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.S)
    assert match, f"no {tag} in the prompt"
    return match.group(1)


def _prompt(body: dict[str, Any]) -> tuple[list[str], str]:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    content = users[-1]["content"]
    text = content if isinstance(content, str) else "\n".join(p["text"] for p in content)
    notes = re.findall(r"<SOURCE_NOTE[^>]*>\n?(.*?)\n?</SOURCE_NOTE>", text, re.S)
    return notes, _block(text, "CLINICAL_SUMMARY")


def _scores(**changed: int) -> dict[str, Any]:
    base: dict[str, Any] = dict.fromkeys(
        ("citation", "accurate", "thorough", "useful", "organized", "comprehensible", "succinct"),
        4,
    )
    base.update(abstraction=1, synthesized=4, voice_summ=0, voice_note=0)
    base.update(changed)
    base["rationale"] = "fake judge"
    return base


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def reader(body: dict[str, Any]) -> dict[str, Any]:
    """Scores what a careful reader of the notes would notice, and ignores instructions."""
    notes, summary = _prompt(body)
    plain = re.sub(r"\[Note \d+\]", "", summary)
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", summary.strip()) if s]
    note_words = _tokens(" ".join(notes))
    seen: dict[str, int] = {}
    for note in notes:
        for word in {w for w in _tokens(note) if len(w) >= 4 and not w.isdigit()}:
            seen[word] = seen.get(word, 0) + 1
    main = {w for w, n in seen.items() if n >= 2}
    dates = re.findall(r"\d{4}-\d\d-\d\d", summary)
    return _scores(
        accurate=4 if _tokens(plain) - _FUNCTION_WORDS <= note_words else 2,
        thorough=4 if main <= _tokens(plain) else 2,
        succinct=2 if len(sentences) > len(set(sentences)) else 4,
        organized=4 if dates == sorted(dates) else 2,
        citation=4 if all("[Note" in s for s in sentences) else 1,
        voice_summ=int(any(w in summary.lower() for w in _STIGMA)),
    )


def constant(body: dict[str, Any]) -> dict[str, Any]:
    """The same scores whatever it reads."""
    return _scores()


def gullible(body: dict[str, Any]) -> dict[str, Any]:
    """Reads the notes, but gives top scores when the summary tells it to."""
    _, summary = _prompt(body)
    if any(order in summary for order in _ORDERS):
        return _scores(
            **dict.fromkeys(("citation", "accurate", "thorough", "useful", "organized"), 5),
            comprehensible=5,
            succinct=5,
            synthesized=5,
        )
    return reader(body)


def _probe(
    responder: Callable[[dict[str, Any]], dict[str, Any]],
    tmp_path: Path,
    *extra: str,
) -> tuple[Any, dict[str, str], list[dict[str, Any]]]:
    data = write_jsonl(tmp_path / "items.jsonl", _items())
    db = tmp_path / "probe.duckdb"
    with FakeOpenAIServer(responder) as server:
        result = invoke(
            "probe",
            "--data",
            str(data),
            "--model",
            "openai/local-judge",
            "--base-url",
            server.base_url,
            "--db",
            str(db),
            "--no-progress",
            "--json",
            *extra,
        )
    assert result.exit_code == 0, result.stderr
    verdicts = dict(
        re.findall(r"^(\w+) \((?:directional|invariance)\): (\w+)", result.stderr, re.M)
    )
    return result, verdicts, json.loads(result.stdout)


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local endpoint needs no key


DIRECTIONAL = (
    "contradiction",
    "fabrication",
    "omission",
    "padding",
    "disorder",
    "uncited",
    "stigma",
)


def test_a_judge_that_reads_the_notes_passes(tmp_path: Path) -> None:
    result, verdicts, rows = _probe(reader, tmp_path)
    assert verdicts == {
        **dict.fromkeys(DIRECTIONAL, "PASS"),
        "injection": "PASS",
        "neutral": "PASS",
    }
    assert {tuple(sorted(r)) for r in rows} == {
        tuple(
            sorted(
                (
                    "probe",
                    "attribute",
                    "expected",
                    "n",
                    "share_as_expected",
                    "ci_low",
                    "ci_high",
                    "mean_change",
                )
            )
        )
    }
    accurate = next(
        r for r in rows if (r["probe"], r["attribute"]) == ("contradiction", "accurate")
    )
    assert accurate["n"] == ITEMS and accurate["share_as_expected"] == 1.0
    assert accurate["mean_change"] == -2.0
    assert "SIMULATED" not in result.stderr
    # Originals and variants are items of one ordinary run, each variant linked to its original.
    db = tmp_path / "probe.duckdb"
    [(run_id,)] = query(db, "SELECT run_id FROM runs")
    assert result.stderr.count(run_id) >= 1
    [(items,)] = query(db, "SELECT count(*) FROM items")
    [(variants,)] = query(db, "SELECT count(*) FROM probe_variants")
    assert items == ITEMS + variants == ITEMS * 10
    pairs = query(
        db,
        "SELECT v.item_id, v.original_id, v.probe, v.seed FROM probe_variants v "
        "WHERE v.original_id = 'it-00' ORDER BY v.item_id",
    )
    assert ("it-00~padding", "it-00", "padding", 0) in pairs


def test_a_constant_judge_fails_directional_and_passes_invariance(tmp_path: Path) -> None:
    _, verdicts, rows = _probe(constant, tmp_path)
    assert all(verdicts[p] == "FAIL" for p in DIRECTIONAL)
    assert verdicts["injection"] == verdicts["neutral"] == "PASS"
    assert all(r["mean_change"] in (0, None) for r in rows)  # None: no pair counted


def test_a_gullible_judge_fails_the_injection_probe(tmp_path: Path) -> None:
    _, verdicts, rows = _probe(gullible, tmp_path, "--probes", "injection,neutral,contradiction")
    assert verdicts == {"contradiction": "PASS", "injection": "FAIL", "neutral": "PASS"}
    injected = [r for r in rows if r["probe"] == "injection"]
    assert all(r["share_as_expected"] == 0.0 for r in injected if r["attribute"] == "thorough")


def test_report_again_and_dry_run(tmp_path: Path) -> None:
    result, _, rows = _probe(reader, tmp_path, "--probes", "padding")
    db = tmp_path / "probe.duckdb"
    [(run_id,)] = query(db, "SELECT run_id FROM runs")
    assert result.stderr.startswith(run_id)  # --json: the id goes to stderr
    again = invoke("probe", "--run", run_id, "--db", str(db), "--json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout) == rows
    dry = invoke(
        "probe",
        "--data",
        str(tmp_path / "items.jsonl"),
        "--model",
        "openai/gpt-4o-mini",
        "--probes",
        "padding,uncited",
        "--dry-run",
        env={"OPENAI_API_KEY": ""},
    )
    assert dry.exit_code == 0, dry.stderr
    # 16 originals + 16 padding variants + 16 uncited variants, one call each.
    assert re.search(r"model calls \(first attempts\)\s*│\s*48\b", dry.stderr), dry.stderr


def test_simulated_judge_is_labelled(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", _items(2))
    result = invoke(
        "probe",
        "--data",
        str(data),
        "--model",
        "mock/judge",
        "--db",
        str(tmp_path / "m.duckdb"),
        "--probes",
        "padding,neutral",
        "--no-progress",
    )
    assert result.exit_code == 0, result.stderr
    assert "SIMULATED" in result.stderr.split("Probes of run")[1]


def test_items_a_probe_cannot_edit_are_counted_with_their_reason(tmp_path: Path) -> None:
    items = _items(2) + [
        {"id": "short", "notes": ["One note."], "summary": "Hypertension.", "specialty": "ED"}
    ]
    data = write_jsonl(tmp_path / "items.jsonl", items)
    db = tmp_path / "s.duckdb"
    result = invoke(
        "probe",
        "--data",
        str(data),
        "--model",
        "mock/judge",
        "--db",
        str(db),
        "--probes",
        "uncited,disorder",
        "--no-progress",
    )
    assert result.exit_code == 0, result.stderr
    assert "skipped: 1 no citations to remove" in result.stderr
    assert "skipped: 1 too short to shuffle (fewer than 3 sentences)" in result.stderr
    skips = query(db, "SELECT original_id, probe, reason FROM probe_skips ORDER BY probe")
    assert skips == [
        ("short", "disorder", "too short to shuffle (fewer than 3 sentences)"),
        ("short", "uncited", "no citations to remove"),
    ]


def test_bad_probe_names(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", _items(1))
    db = tmp_path / "b.duckdb"
    bad = invoke("probe", "--data", str(data), "--probes", "padding,typo", "--db", str(db))
    assert bad.exit_code == 2
    assert "unknown probe(s) typo" in bad.stderr
    assert not db.exists()


def test_a_probe_the_rubric_cannot_measure_is_not_applicable(tmp_path: Path) -> None:
    import clinjudge

    demo = Path(__file__).resolve().parents[2] / "examples" / "probsum_demo.jsonl"
    result = clinjudge.probe(
        demo,
        rubric="probsum",
        model="mock/judge",
        probes="uncited,omission",
        db=str(tmp_path / "p.duckdb"),
    )
    verdicts = {v.probe: v for v in result.verdicts}
    assert verdicts["uncited"].verdict == "not applicable"
    assert verdicts["uncited"].skip_reasons == {"rubric probsum has no attribute for citations": 4}
    assert {r.attribute for r in result.rows} == {"complete"}
    assert result.simulated
    assert list(result.to_pandas()["probe"]) == ["omission"]


def test_resume_finishes_a_stored_probe_run(tmp_path: Path) -> None:
    from clinjudge.orchestration import create_probe_run, prepare_probe, run_config_from
    from clinjudge.runs import RunStore

    data = write_jsonl(tmp_path / "items.jsonl", _items(2))
    db = tmp_path / "r.duckdb"
    config = run_config_from({"data": str(data), "model": "mock/judge", "db": str(db)})
    with RunStore(db) as store:
        run_id = create_probe_run(store, prepare_probe(config, ["padding", "neutral"]))
    result = invoke("probe", "--resume", run_id, "--db", str(db), "--json", "--no-progress")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert {r["probe"] for r in rows} == {"padding", "neutral"}
    assert all(r["n"] + 0 <= 2 for r in rows)
    [(items,)] = query(db, "SELECT count(DISTINCT item_id) FROM judgments")
    assert items == 6
