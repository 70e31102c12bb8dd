"""Final per-item scores: medians of valid samples, failed samples, the abstraction gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clinjudge.rubrics import Rubric
from clinjudge.runs import FINAL_AGENT, RunStore, finalize_run
from clinjudge.runs._aggregate import final_rows
from clinjudge.runs._store import FINAL_SAMPLE


def _sample(**values: float | None) -> dict[str, float | None]:
    base: dict[str, float | None] = {
        "citation": 4,
        "accurate": 4,
        "thorough": 4,
        "useful": 4,
        "organized": 4,
        "comprehensible": 4,
        "succinct": 4,
        "abstraction": 1,
        "synthesized": 4,
        "voice_summ": 0,
        "voice_note": 0,
    }
    base.update(values)
    return base


def _by_key(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["attribute"]: r for r in rows}


def _values(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    return {r["attribute"]: r["value"] for r in rows}


def test_rows_cover_every_key_in_rubric_order(pdsqi9: Rubric) -> None:
    rows = final_rows("r", "i", pdsqi9, [_sample()], 0)
    assert [r["attribute"] for r in rows] == list(pdsqi9.keys)
    assert len(rows) == 11
    for row in rows:
        assert (row["run_id"], row["item_id"], row["sample"], row["agent"], row["final"]) == (
            "r",
            "i",
            FINAL_SAMPLE,
            FINAL_AGENT,
            True,
        )
        assert row["status"] == "ok"
        assert row["rationale"] == "median of 1 valid sample(s)"


def test_median_of_odd_count(pdsqi9: Rubric) -> None:
    samples = [_sample(accurate=1), _sample(accurate=5), _sample(accurate=3)]
    assert _values(final_rows("r", "i", pdsqi9, samples, 0))["accurate"] == 3


def test_median_of_even_count_can_be_half(pdsqi9: Rubric) -> None:
    samples = [_sample(accurate=2, voice_summ=0), _sample(accurate=3, voice_summ=1)]
    values = _values(final_rows("r", "i", pdsqi9, samples, 0))
    assert values["accurate"] == 2.5
    assert values["voice_summ"] == 0.5
    assert values["thorough"] == 4


def test_failed_samples_are_left_out_with_a_note(pdsqi9: Rubric) -> None:
    rows = final_rows("r", "i", pdsqi9, [_sample(accurate=2), _sample(accurate=5)], 1)
    by_key = _by_key(rows)
    assert by_key["accurate"]["value"] == 3.5
    assert all(r["status"] == "ok" for r in rows)
    assert by_key["accurate"]["rationale"] == "median of 2 valid sample(s), 1 failed"


def test_all_failed_gives_failed_final_rows(pdsqi9: Rubric) -> None:
    rows = final_rows("r", "i", pdsqi9, [], 3)
    assert len(rows) == 11
    for row in rows:
        assert row["status"] == "failed"
        assert row["value"] is None
        assert row["final"] is True
        assert row["error"] == "all 3 sample(s) failed"


def test_gated_attribute_is_null_when_median_abstraction_is_zero(pdsqi9: Rubric) -> None:
    samples = [
        _sample(abstraction=0, synthesized=None),
        _sample(abstraction=0, synthesized=None),
        _sample(abstraction=1, synthesized=5),
    ]
    values = _values(final_rows("r", "i", pdsqi9, samples, 0))
    assert values["abstraction"] == 0
    assert values["synthesized"] is None


def test_gated_attribute_is_numeric_when_median_abstraction_is_one(pdsqi9: Rubric) -> None:
    samples = [
        _sample(abstraction=1, synthesized=2),
        _sample(abstraction=1, synthesized=5),
        _sample(abstraction=0, synthesized=None),
    ]
    values = _values(final_rows("r", "i", pdsqi9, samples, 0))
    assert values["abstraction"] == 1
    assert values["synthesized"] == 3.5  # median of the numeric ones only


def test_gate_tie_counts_as_needed(pdsqi9: Rubric) -> None:
    samples = [_sample(abstraction=0, synthesized=None), _sample(abstraction=1, synthesized=3)]
    values = _values(final_rows("r", "i", pdsqi9, samples, 0))
    assert values["abstraction"] == 0.5
    assert values["synthesized"] == 3


def test_gate_open_but_no_sample_gave_a_number(pdsqi9: Rubric) -> None:
    samples = [_sample(abstraction=1, synthesized=None)]
    values = _values(final_rows("r", "i", pdsqi9, samples, 0))
    assert values["synthesized"] is None


# -- finalize_run on a store -------------------------------------------------------------------


def _store_samples(
    store: RunStore, item: str, samples: list[dict[str, float | None] | None]
) -> None:
    """Write judge samples 1..n for an item; None stands for a failed sample."""
    sample_rows, judgment_rows = [], []
    for number, values in enumerate(samples, start=1):
        status = "ok" if values is not None else "failed"
        key = {"run_id": "r", "item_id": item, "sample": number, "agent": "judge"}
        sample_rows.append(
            {**key, "status": status, "error": None if values else "parse: bad json"}
        )
        for attribute, value in (values or _sample()).items():
            judgment_rows.append(
                {
                    **key,
                    "attribute": attribute,
                    "final": False,
                    "status": status,
                    "value": value if values is not None else None,
                }
            )
    store.write_batch({"samples": sample_rows, "judgments": judgment_rows})


def _finals(store: RunStore) -> dict[str, dict[str, Any]]:
    rows = store.query("SELECT * FROM judgments WHERE final ORDER BY item_id, attribute")
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        out.setdefault(row["item_id"], {})[row["attribute"]] = row
    return out


def test_finalize_run_writes_finals_and_is_idempotent(db_path: Path, pdsqi9: Rubric) -> None:
    with RunStore(db_path) as store:
        _store_samples(store, "a", [_sample(accurate=1), _sample(accurate=2), _sample(accurate=4)])
        _store_samples(store, "b", [_sample(accurate=5), None, _sample(accurate=2)])
        _store_samples(store, "c", [None, None, None])
        _store_samples(store, "d", [_sample(), _sample()])  # incomplete: 2 of 3 samples
        assert finalize_run(store, "r", pdsqi9, 3) == 3
        first = store.query("SELECT * FROM judgments ORDER BY ALL")
        assert finalize_run(store, "r", pdsqi9, 3) == 0
        assert store.query("SELECT * FROM judgments ORDER BY ALL") == first
        finals = _finals(store)
    assert set(finals) == {"a", "b", "c"}
    assert all(len(rows) == 11 for rows in finals.values())
    assert finals["a"]["accurate"]["value"] == 2
    assert finals["b"]["accurate"]["value"] == 3.5
    assert finals["b"]["accurate"]["rationale"] == "median of 2 valid sample(s), 1 failed"
    assert {r["status"] for r in finals["c"].values()} == {"failed"}
    assert {r["value"] for r in finals["c"].values()} == {None}
    assert all(
        r["sample"] == FINAL_SAMPLE and r["agent"] == FINAL_AGENT
        for rows in finals.values()
        for r in rows.values()
    )


def test_finalize_picks_up_items_completed_later(db_path: Path, pdsqi9: Rubric) -> None:
    with RunStore(db_path) as store:
        _store_samples(store, "a", [_sample(accurate=1)])
        assert finalize_run(store, "r", pdsqi9, 2) == 0
        store.write_batch(
            {
                "samples": [
                    {"run_id": "r", "item_id": "a", "sample": 2, "agent": "judge", "status": "ok"}
                ],
                "judgments": [
                    {
                        "run_id": "r",
                        "item_id": "a",
                        "sample": 2,
                        "agent": "judge",
                        "attribute": k,
                        "value": v,
                        "final": False,
                        "status": "ok",
                    }
                    for k, v in _sample(accurate=4).items()
                ],
            }
        )
        assert finalize_run(store, "r", pdsqi9, 2) == 1
        assert _finals(store)["a"]["accurate"]["value"] == 2.5


def test_finalize_applies_the_gate(db_path: Path, pdsqi9: Rubric) -> None:
    samples = [_sample(abstraction=g, synthesized=4 if g else None) for g in (0, 0, 1)]
    with RunStore(db_path) as store:
        _store_samples(store, "a", samples)
        finalize_run(store, "r", pdsqi9, len(samples))
        finals = _finals(store)["a"]
    assert finals["abstraction"]["value"] == 0
    assert finals["synthesized"]["value"] is None
