"""Agreement between a stored run and the physicians' ratings in ``human_ratings``.

For each run: the human raters' scores of the run's items (matched on ``item_id``) and the
run's final judgment (the median of its valid samples) of the same (item, attribute) pairs as
one more rater called ``judge``, analysed with :func:`clinjudge.runs._agreement.analyse_ratings`.
Attributes the rubric marks ``agreement: false`` (PDSQI-9 ``abstraction``, a gate) are left out;
categories come from the rubric's scales and binary attributes get binary statistics.
"""

from __future__ import annotations

import json
import math
from typing import Any

from clinjudge.rubrics import Rubric, ScaleKind
from clinjudge.runs._agreement import (
    RatingRecord,
    analyse_ratings,
    load_ratings_file,
)
from clinjudge.runs._store import RunStore, StoreError

JUDGE_RATER = "judge"


class AgreementError(ValueError):
    """A run cannot be compared with the physicians' ratings (for example, none overlap)."""


def run_rubric(run: dict[str, Any]) -> Rubric:
    """The rubric a stored run was judged with.

    Raises:
        StoreError: The run has no rubric (a ``judge prm`` scoring run).
    """
    data = run["rubric_json"]
    if data is None:
        raise StoreError(
            f"run {run['run_id']} has no rubric (mode {run.get('mode')}): a PRM scoring run has "
            "step scores, not judgments; see `judge runs show` and "
            "`judge export --table prm_steps`"
        )
    return Rubric.model_validate(json.loads(data) if isinstance(data, str) else data)


def agreement_attributes(rubric: Rubric) -> list[str]:
    """Keys of the attributes that enter agreement analysis, in rubric order."""
    return [a.key for a in rubric.attributes if a.agreement]


def rubric_categories(rubric: Rubric) -> dict[str, list[float]]:
    """Declared scale points of each agreement attribute (for Gwet's AC2 and alpha)."""
    return {a.key: [float(v) for v in a.values] for a in rubric.attributes if a.agreement}


def binary_attributes(rubric: Rubric) -> set[str]:
    """Agreement attributes on a binary scale (reported with percent agreement and kappa)."""
    return {a.key for a in rubric.attributes if a.agreement and a.scale is ScaleKind.binary}


def run_rating_records(store: RunStore, run_id: str) -> tuple[dict[str, Any], list[RatingRecord]]:
    """The human and judge records of one run, ready for ``analyse_ratings``.

    Args:
        store: The run store.
        run_id: Run id or unique prefix.

    Returns:
        The run's row (with its rubric parsed) and the list of ``RatingRecord``.

    Raises:
        AgreementError: No human rating covers an item of the run (or a human rater is named
            ``judge``).
    """
    run = store.get_run(run_id)
    rid = run["run_id"]
    rubric = run_rubric(run)
    attributes = agreement_attributes(rubric)
    n_items = store.query("SELECT count(*) AS n FROM items WHERE run_id = ?", [rid])[0]["n"]
    if not store.has_table("human_ratings"):
        raise AgreementError(
            f"{store.path} holds no human ratings; import them with `judge ratings import FILE`"
        )
    humans = store.query(
        """
        SELECT h.item_id, h.rater_id, h.attribute, h.score
        FROM human_ratings h JOIN items i ON i.item_id = h.item_id AND i.run_id = ?
        WHERE h.attribute IN (SELECT unnest(?))
        ORDER BY i.position, h.rater_id
        """,
        [rid, attributes],
    )
    if not humans:
        n_rated = store.query("SELECT count(DISTINCT item_id) AS n FROM human_ratings")[0]["n"]
        raise AgreementError(
            f"no human ratings overlap run {rid}: the run has {n_items} item(s), "
            f"{store.path} has ratings of {n_rated} item(s), and no item_id is in both "
            f"(attributes considered: {', '.join(attributes)})"
        )
    if any(row["rater_id"] == JUDGE_RATER for row in humans):
        raise AgreementError(
            f"a human rater is named {JUDGE_RATER!r}, the name reserved for the judge; "
            "rename that rater and import the ratings again"
        )
    rated_units = {(row["item_id"], row["attribute"]) for row in humans}
    finals = store.query(
        """
        SELECT item_id, attribute, value, status FROM judgments
        WHERE run_id = ? AND final AND attribute IN (SELECT unnest(?))
        """,
        [rid, attributes],
    )
    order = {key: index for index, key in enumerate(attributes)}
    humans.sort(key=lambda row: order[row["attribute"]])  # stable: item order kept within
    records = [
        RatingRecord(
            unit_id=row["item_id"],
            rater_id=row["rater_id"],
            score=row["score"],
            attribute=row["attribute"],
        )
        for row in humans
    ]
    finals.sort(key=lambda row: order[row["attribute"]])
    records.extend(
        RatingRecord(
            unit_id=row["item_id"],
            rater_id=JUDGE_RATER,
            score=row["value"] if row["status"] == "ok" else None,
            attribute=row["attribute"],
        )
        for row in finals
        if (row["item_id"], row["attribute"]) in rated_units
    )
    run["rubric_parsed"] = rubric
    run["n_items_run"] = n_items
    run["n_units_judged"] = sum(
        1 for row in finals if (row["item_id"], row["attribute"]) in rated_units
    )
    return run, records


def _abs_diff_mean(differences: dict[Any, Any] | None) -> tuple[float | None, int]:
    if not differences:
        return None, 0
    total = weight = 0.0
    for diff, count in differences.items():
        total += abs(float(diff)) * float(count)
        weight += float(count)
    return (total / weight if weight else None), int(weight)


def mean_abs_difference(analysis: dict[str, Any], binary: set[str]) -> dict[str, Any]:
    """Mean |judge - human median| per attribute and pooled over the non-binary attributes.

    Derived from the ``differences`` histograms of the analysis, so it covers exactly the units
    the analysis used.
    """
    per_attribute: dict[str, float | None] = {}
    total = weight = 0.0
    for attribute, block in analysis.get("per_attribute", {}).items():
        value, n = _abs_diff_mean(block.get("differences"))
        per_attribute[attribute] = value
        if attribute not in binary and value is not None:
            total += value * n
            weight += n
    return {"per_attribute": per_attribute, "pooled": total / weight if weight else None}


def _clean(value: Any) -> Any:
    """NaN and infinities become None so the result is valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _clean(value.item())
    return value


def agreement_for_run(
    store: RunStore, run_id: str, *, n_boot: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Agreement of a run's judge with the physicians, per attribute and pooled.

    Args:
        store: The run store.
        run_id: Run id or unique prefix.
        n_boot: Bootstrap resamples (substitution / added-rater tests, alpha CI).
        seed: Bootstrap seed.

    Returns:
        The run's identity (``run_id``, ``name``, ``rubric``, ``mode``, ``model``, ``simulated``,
        ``raters``, counts), ``mean_abs_difference`` and everything ``analyse_ratings`` returns
        (``per_attribute``, ``pooled``, ``notes``).
    """
    run, records = run_rating_records(store, run_id)
    rubric: Rubric = run["rubric_parsed"]
    binary = binary_attributes(rubric)
    analysis = analyse_ratings(
        records,
        judge=JUDGE_RATER,
        categories=rubric_categories(rubric),
        binary_attributes=binary,
        n_boot=n_boot,
        seed=seed,
    )
    humans = [r for r in records if r.rater_id != JUDGE_RATER]
    result = {
        "run_id": run["run_id"],
        "name": run["name"],
        "rubric": f"{run['rubric']} {run['rubric_version']}",
        "mode": run["mode"],
        "model": (run["models"] or {}).get("judge"),
        "simulated": bool(run["simulated"]),
        "judge_rater": JUDGE_RATER,
        "judge_value": "final (median of the run's valid samples) per item and attribute",
        "raters": sorted({r.rater_id for r in humans}),
        "n_items_run": run["n_items_run"],
        "n_items_rated": len({r.unit_id for r in humans}),
        "n_human_ratings": len(humans),
        "n_judge_units": run["n_units_judged"],
        "attributes": agreement_attributes(rubric),
        "binary_attributes": sorted(binary),
        "n_boot": n_boot,
        "seed": seed,
        **analysis,
    }
    result["mean_abs_difference"] = mean_abs_difference(analysis, binary)
    return _clean(result)


def agreement_for_file(
    path: str, *, judge: str | None = None, n_boot: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """``analyse_ratings`` on a standalone ratings file (no database).

    Args:
        path: JSONL, CSV or Parquet with ``unit_id``, ``rater_id``, ``score`` and optionally
            ``attribute``.
        judge: The rater to treat as the judge (compared with the others' median), if any.
        n_boot: Bootstrap resamples.
        seed: Bootstrap seed.
    """
    records = load_ratings_file(path)
    if judge is not None and not any(r.rater_id == judge for r in records):
        raise AgreementError(f"{path}: no ratings by rater {judge!r} (the --judge rater)")
    return _clean(analyse_ratings(records, judge=judge, n_boot=n_boot, seed=seed))
