"""Agreement between a stored run and the physicians' ratings in ``human_ratings``.

For each run: the human raters' scores of the run's items (matched on ``item_id``) and the
run's final judgment (the median of its valid samples) of the same (item, attribute) pairs as
one more rater called ``judge``, analysed with :func:`clinjudge.analysis.analyse_ratings`.
Attributes the rubric marks ``agreement: false`` (PDSQI-9 ``abstraction``, a gate) are left out;
categories come from the rubric's scales and binary attributes get binary statistics.

Rows are read from the store as Arrow columns (``runs.human_ratings_of_run`` and
``runs.final_scores_of_rated``: no per-row Python objects), and each analysis is kept in the
store's ``agreement_cache`` (``runs.load_agreement``, ``runs.save_agreement``) keyed by run and
settings, with a fingerprint of its exact input: ``compare`` and ``report --compare`` reuse it
until the ratings, the run's judgments or the settings change.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from clinjudge.analysis._agreement import RatingRecord, analyse_ratings, ratings_table
from clinjudge.analysis._agreement_result import (
    AgreementAnalysis,
    AgreementResult,
    MeanAbsDifference,
)
from clinjudge.analysis._statistics import computed_statistics
from clinjudge.analysis._summary import identical_samples_note, suspect_samples_note
from clinjudge.errors import UserError
from clinjudge.inputs import load_ratings
from clinjudge.rubrics import DEFAULT_REDUCER, Rubric, ScaleKind
from clinjudge.runs import RunStore, StoreError, save_agreement
from clinjudge.runs.analysis_reads import (
    final_scores_of_rated,
    human_ratings_of_run,
    load_agreement,
    rated_item_count,
    run_item_count,
)

JUDGE_RATER = "judge"

AGREEMENT_CACHE_VERSION = "1"
"""Part of every cache key: bump it when the analysis changes its numbers or its layout."""


class AgreementError(UserError):
    """A run cannot be compared with the physicians' ratings (for example, none overlap)."""


def run_reducer(run: dict[str, Any]) -> dict[str, str]:
    """``{"reducer": name}`` for a run whose final scores are not the median of its samples
    (``--reduce``), else ``{}``: results set the field only then, so a default run's ``--json``
    reads as it did before runs could choose.

    Args:
        run: The run's stored row.
    """
    name = (run.get("config") or {}).get("reduce")
    return {"reducer": name} if name and name != DEFAULT_REDUCER else {}


def run_rubric(run: dict[str, Any]) -> Rubric:
    """The rubric a stored run was judged with.

    Raises:
        StoreError: The run has no rubric (a ``judge prm`` scoring run).
    """
    data = run["rubric_json"]
    if data is None:
        raise StoreError(
            f"run {run['run_id']} has no rubric (mode {run.get('mode')}): a PRM scoring run has "
            "step scores, not judgments (export table prm_steps)",
            setting="table=prm_steps",
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


def run_ratings_table(store: RunStore, run_id: str) -> tuple[dict[str, Any], pa.Table]:
    """The human and judge ratings of one run as an Arrow table, ready for ``analyse_ratings``.

    Columns ``unit_id``, ``rater_id``, ``attribute``, ``score``: the physicians' ratings of the
    run's items (attributes in rubric order, then items in run order, then raters), followed by
    the run's final judgment of each rated (item, attribute) as rater ``judge`` (null when it
    failed).

    Args:
        store: The run store.
        run_id: Run id or any unique part of it.

    Returns:
        The run's row (with ``rubric_parsed``, ``n_items_run`` and ``n_units_judged`` added)
        and the table.

    Raises:
        AgreementError: No human rating covers an item of the run (or a human rater is named
            ``judge``).
    """
    run = store.get_run(run_id)
    rid = run["run_id"]
    rubric = run_rubric(run)
    attributes = agreement_attributes(rubric)
    n_items = run_item_count(store, rid)
    stored = human_ratings_of_run(store, rid, attributes)
    if stored is None:
        raise AgreementError(
            f"{store.path} holds no human ratings; import them with `judge ratings import FILE`"
        )
    humans = ratings_table(stored)  # the store's item_id is the analysis' unit_id
    if humans.num_rows == 0:
        n_rated = rated_item_count(store)
        raise AgreementError(
            f"no human ratings overlap run {rid}: the run has {n_items} item(s), "
            f"{store.path} has ratings of {n_rated} item(s), and no item_id is in both "
            f"(attributes considered: {', '.join(attributes)})"
        )
    if pc.any(pc.equal(humans.column("rater_id"), JUDGE_RATER)).as_py():
        raise AgreementError(
            f"a human rater is named {JUDGE_RATER!r}, the name reserved for the judge; "
            "rename that rater and import the ratings again"
        )
    finals = ratings_table(final_scores_of_rated(store, rid, attributes, JUDGE_RATER))
    table = pa.concat_tables([humans, finals.cast(humans.schema)])
    run["rubric_parsed"] = rubric
    run["n_items_run"] = n_items
    run["n_units_judged"] = finals.num_rows
    return run, table


def run_rating_records(store: RunStore, run_id: str) -> tuple[dict[str, Any], list[RatingRecord]]:
    """The human and judge records of one run as ``RatingRecord`` objects.

    Same rows as :func:`run_ratings_table` (which large studies should use: it holds no
    per-row Python objects).
    """
    run, table = run_ratings_table(store, run_id)
    return run, [RatingRecord(**row) for row in table.to_pylist()]


def input_fingerprint(table: pa.Table, *extra: Any) -> str:
    """SHA-256 of the ratings table's content in order (and of ``extra`` JSON-able values)."""
    digest = hashlib.sha256()
    for name in ("unit_id", "rater_id", "attribute"):
        encoded = pc.dictionary_encode(table.column(name)).combine_chunks()
        digest.update(json.dumps(encoded.dictionary.to_pylist()).encode())
        digest.update(encoded.indices.fill_null(-1).to_numpy().astype("<i8").tobytes())
    digest.update(table.column("score").to_numpy().astype("<f8").tobytes())  # null is NaN
    digest.update(json.dumps(extra, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _cache_settings(n_boot: int, seed: int) -> str:
    settings: dict[str, Any] = {"n_boot": n_boot, "seed": seed, "version": AGREEMENT_CACHE_VERSION}
    computed = sorted(s.name for s in computed_statistics())
    if computed:  # an analysis kept before a statistic was registered lacks it
        settings["statistics"] = computed
    return json.dumps(settings, sort_keys=True)


def _abs_diff_mean(differences: dict[str, int] | None) -> tuple[float | None, int]:
    if not differences:
        return None, 0
    total = weight = 0.0
    for diff, count in differences.items():
        total += abs(float(diff)) * float(count)
        weight += float(count)
    return (total / weight if weight else None), int(weight)


def mean_abs_difference(analysis: AgreementAnalysis, binary: set[str]) -> MeanAbsDifference:
    """Mean |judge - human median| per attribute and pooled over the non-binary attributes.

    Derived from the ``differences`` histograms of the analysis, so it covers exactly the units
    the analysis used.
    """
    per_attribute: dict[str, float | None] = {}
    total = weight = 0.0
    for attribute, block in analysis.per_attribute.items():
        judged = block.judge_vs_physicians
        value, n = _abs_diff_mean(judged.differences if judged else None)
        per_attribute[attribute] = value
        if attribute not in binary and value is not None:
            total += value * n
            weight += n
    return MeanAbsDifference(per_attribute=per_attribute, pooled=total / weight if weight else None)


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
    store: RunStore, run_id: str, *, n_boot: int = 1000, seed: int = 0, cache: bool = True
) -> AgreementResult:
    """Agreement of a run's judge with the physicians, per attribute and pooled.

    Args:
        store: The run store.
        run_id: Run id or any unique part of it.
        n_boot: Bootstrap resamples (substitution / added-rater tests, alpha CI).
        seed: Bootstrap seed.
        cache: Reuse an analysis kept in the store's ``agreement_cache`` for the same input
            fingerprint and settings, and keep a new one there (when the store is writable).

    Returns:
        The run's identity (``run_id``, ``name``, ``rubric``, ``mode``, ``model``, ``simulated``,
        ``raters``, counts), ``mean_abs_difference``, ``cached`` (whether the analysis came
        from the cache), ``samples_warning`` (the judge's repeated samples are copies, see
        :func:`identical_samples_note`; also in ``notes``) and everything ``analyse_ratings``
        returns (``per_attribute``, ``pooled``, ``notes``); ``to_dict()`` is ``--json``.
    """
    run, table = run_ratings_table(store, run_id)
    rubric: Rubric = run["rubric_parsed"]
    binary = binary_attributes(rubric)
    settings = _cache_settings(n_boot, seed)
    fingerprint = input_fingerprint(table, rubric.model_dump(mode="json"))
    kept = load_agreement(store, run["run_id"], settings, fingerprint) if cache else None
    cached = kept is not None
    if kept is not None:
        analysis = AgreementAnalysis.from_dict(kept)
    else:
        analysis = analyse_ratings(
            table,
            judge=JUDGE_RATER,
            categories=rubric_categories(rubric),
            binary_attributes=binary,
            n_boot=n_boot,
            seed=seed,
        )
        if cache:
            save_agreement(store, run["run_id"], settings, fingerprint, analysis.to_dict())
    humans = table.filter(pc.not_equal(table.column("rater_id"), JUDGE_RATER))
    chosen = run_reducer(run)
    reducer = chosen.get("reducer", DEFAULT_REDUCER)
    result = {
        **chosen,
        "run_id": run["run_id"],
        "name": run["name"],
        "rubric": f"{run['rubric']} {run['rubric_version']}",
        "mode": run["mode"],
        "model": (run["models"] or {}).get("judge"),
        "simulated": bool(run["simulated"]),
        "judge_rater": JUDGE_RATER,
        "judge_value": f"final ({reducer} of the run's valid samples) per item and attribute",
        "raters": sorted(pc.unique(humans.column("rater_id")).to_pylist()),
        "n_items_run": run["n_items_run"],
        "n_items_rated": len(pc.unique(humans.column("unit_id"))),
        "n_human_ratings": humans.num_rows,
        "n_judge_units": run["n_units_judged"],
        "attributes": agreement_attributes(rubric),
        "binary_attributes": sorted(binary),
        "n_boot": n_boot,
        "seed": seed,
        "cached": cached,
        "per_attribute": analysis.per_attribute,
        "pooled": analysis.pooled,
        "notes": analysis.notes,
        "mean_abs_difference": mean_abs_difference(analysis, binary),
    }
    # Not part of the cached analysis: it reads the run's replies, not the ratings.
    warning = identical_samples_note(store, run["run_id"])
    result["samples_warning"] = warning
    if warning is not None:
        result["notes"] = [*analysis.notes, f"judge samples: {warning}"]
    suspect = suspect_samples_note(store, run["run_id"])
    result["suspect_warning"] = suspect
    if suspect is not None:
        result["notes"] = [*result["notes"], f"suspect judgments: {suspect}"]
    return AgreementResult.model_validate(_clean(result))


def agreement_for_file(
    path: str, *, judge: str | None = None, n_boot: int = 1000, seed: int = 0
) -> AgreementAnalysis:
    """``analyse_ratings`` on a standalone ratings file (no database).

    Args:
        path: JSONL, CSV or Parquet with ``item_id`` (or ``unit_id``, its older name),
            ``rater_id``, ``score`` and optionally ``attribute``, read by
            :func:`clinjudge.inputs.load_ratings` without a rubric.
        judge: The rater to treat as the judge (compared with the others' median), if any.
        n_boot: Bootstrap resamples.
        seed: Bootstrap seed.
    """
    records = load_ratings(path)
    if judge is not None and not any(r.rater_id == judge for r in records):
        raise AgreementError(f"{path}: no ratings by rater {judge!r} (the judge rater)")
    return analyse_ratings(records, judge=judge, n_boot=n_boot, seed=seed)
