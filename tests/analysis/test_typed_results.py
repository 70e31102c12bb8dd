"""Typed analysis results: attributes that say which comparison a number belongs to, and a
``to_dict()`` that is the ``--json`` layout exactly (the store's agreement cache keeps it too)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from clinjudge.analysis import (
    AgreementAnalysis,
    AttributeAgreement,
    RatingRecord,
    analyse_ratings,
)


def _study(seed: int = 3) -> list[RatingRecord]:
    rng = random.Random(seed)
    records = []
    for unit in range(12):
        truth = rng.randint(1, 5)
        for attribute in ("accurate", "useful", "voice"):
            for rater in ("dr_a", "dr_b", "dr_c", "judge"):
                if attribute == "voice":
                    score = float(rng.random() < 0.3)
                else:
                    score = float(min(5, max(1, truth + rng.choice((-1, 0, 0, 1)))))
                if rater == "dr_c" and unit == 0 and attribute == "useful":
                    continue  # one missing rating: ICC on complete units only
                records.append(RatingRecord(unit_id=f"u{unit}", rater_id=rater,
                                            attribute=attribute, score=score))  # fmt: skip
    return records


@pytest.fixture(scope="module")
def analysis() -> AgreementAnalysis:
    return analyse_ratings(_study(), judge="judge", binary_attributes={"voice"}, n_boot=40)


def test_dump_is_the_flat_json_layout_and_reads_back_equal(analysis: AgreementAnalysis) -> None:
    flat = analysis.to_dict()
    json.dumps(flat, allow_nan=False)  # strict JSON
    accurate = flat["per_attribute"]["accurate"]
    # The --json layout: one object per attribute, the physicians' keys and the judge's side
    # by side, in the order they have always had.
    assert list(accurate) == [
        "scale", "categories", "raters", "n_units", "n_ratings", "n_units_complete", "icc",
        "krippendorff_alpha", "gwet_ac2", "judge", "primary", "wilcoxon", "wilcoxon_pratt",
        "median_difference", "iqr", "quartiles", "differences", "substitution_statistic",
        "n_units_bootstrap", "substitution", "added_rater",
    ]  # fmt: skip
    voice = flat["per_attribute"]["voice"]
    assert "icc" not in voice and {"percent_agreement", "kappa"} <= set(voice)
    assert flat["pooled"]["attributes"] == ["accurate", "useful"]
    again = AgreementAnalysis.from_dict(json.loads(json.dumps(flat)))
    assert again == analysis
    assert again.to_dict() == flat


def test_named_parts_hold_the_judge_and_the_physicians_apart(
    analysis: AgreementAnalysis,
) -> None:
    flat = analysis.to_dict()["per_attribute"]["accurate"]
    block = analysis.per_attribute["accurate"]
    judged, among = block.judge_vs_physicians, block.physicians_among_themselves
    assert judged is not None and judged.icc is not None and among.icc is not None
    assert judged.icc.value == flat["primary"]["value"]
    assert judged.icc.ci95 == flat["primary"]["ci95"]
    assert among.icc.value == flat["icc"]["ICC3k"]["value"]
    assert set(among.icc_forms or {}) == {"ICC1", "ICC2", "ICC3", "ICC1k", "ICC2k", "ICC3k"}
    assert judged.icc.value != among.icc.value
    assert among.raters == ["dr_a", "dr_b", "dr_c"] and "judge" not in among.raters
    assert judged.judge is not None and judged.judge.rater == "judge"
    assert (
        judged.krippendorff_alpha["ordinal"].value
        == (flat["primary"]["krippendorff_alpha"]["ordinal"]["value"])
    )
    assert [c.rater for c in judged.substitution] == ["dr_a", "dr_b", "dr_c"]
    # The median difference is the judge's score minus the physicians' median, unit by unit.
    diffs = []
    by_unit: dict[str, dict[str, float]] = {}
    for r in _study():
        if r.attribute == "accurate" and r.score is not None:
            by_unit.setdefault(r.unit_id, {})[r.rater_id] = r.score
    for scores in by_unit.values():
        humans = [v for k, v in scores.items() if k != "judge"]
        diffs.append(scores["judge"] - float(np.median(humans)))
    assert judged.median_difference == pytest.approx(float(np.median(diffs)))
    assert sum(judged.differences.values()) == len(diffs)


def test_binary_blocks_have_kappa_and_no_icc(analysis: AgreementAnalysis) -> None:
    voice = analysis.per_attribute["voice"]
    assert voice.binary
    judged = voice.judge_vs_physicians
    assert judged is not None and judged.icc is None
    assert judged.kappa is not None and judged.kappa.method == "cohen"
    assert voice.physicians_among_themselves.icc is None
    assert voice.physicians_among_themselves.kappa is not None


def test_the_tidy_table_has_one_row_per_block_comparison_and_statistic(
    analysis: AgreementAnalysis,
) -> None:
    rows = analysis.to_arrow().to_pylist()
    keys = [(r["attribute"], r["comparison"], r["statistic"], r["rater"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert {r["attribute"] for r in rows} == {"accurate", "useful", "voice", "pooled"}
    useful = {
        r["statistic"]: r for r in rows
        if r["attribute"] == "useful" and r["comparison"] == "physicians_among_themselves"
    }  # fmt: skip
    among = analysis.per_attribute["useful"].physicians_among_themselves
    assert useful["ICC3k"]["n_units"] == among.n_units_complete == 11
    assert useful["krippendorff_alpha_ordinal"]["n_units"] == among.n_units == 12
    voice = {r["statistic"] for r in rows if r["attribute"] == "voice"}
    assert "ICC3k" not in voice and {"percent_agreement", "cohen_kappa", "fleiss_kappa"} <= voice


def test_a_block_without_a_judge_reads_from_its_dump() -> None:
    plain = analyse_ratings([r for r in _study() if r.rater_id != "judge"], n_boot=20)
    block = plain.per_attribute["accurate"]
    assert block.judge_vs_physicians is None
    assert AttributeAgreement.from_dict(block.to_dict()) == block
    assert "primary" not in block.to_dict()
