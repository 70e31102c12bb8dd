"""Vendor audits: one judge configuration over several vendors' outputs on the same encounters.

An audit is an ordinary run whose items carry a vendor: the stored item id is
``f"{vendor}::{encounter_id}"``, ``item.vendor`` names the vendor and ``meta.encounter_id``
the encounter, so vendors are matched by encounter. From the final per-item scores this module
computes, per vendor and attribute, the mean, median and a bootstrap 95% CI of the mean;
Wilcoxon signed-rank tests between every pair of vendors on their matched encounters, with Holm's
correction across all comparisons; flagged items from simple rules (``accurate<=2``); and cost
and time per vendor from the calls. The report is drawn by :mod:`clinjudge.reports`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

import numpy as np

from clinjudge.analysis._agreement_run import run_reducer, run_rubric
from clinjudge.analysis._audit_ppi import (
    interval_warnings,
    physician_labels,
    physician_sample,
    plan_sample,
    ppi_pair_rows,
    ppi_vendor_rows,
    sampling_warnings,
    unmatched_rating_warnings,
)
from clinjudge.analysis._audit_result import AuditPlan, AuditStatistics
from clinjudge.analysis._stats import wilcoxon_paired
from clinjudge.errors import UserError
from clinjudge.inputs import (
    PRM_ATTRIBUTE,
    FlagRule,
    audit_item_id,
    default_flag_rules,
    number_text,
    parse_flag_rule,
    unmatched_encounters,
)
from clinjudge.rubrics import Rubric, ScaleKind
from clinjudge.runs import HumanRating, RunStore
from clinjudge.runs.analysis_reads import (
    AuditScoreRow,
    audit_score_rows,
    audit_settings,
    flagged_items,
    has_prm_steps,
    lowest_prm_scores,
    vendor_call_totals,
)

NO_PRM_NOTE = "No PRM step scores are stored for this run, so PRM rules (prm<...) flag nothing."
AUDIT_BOOT = 2000
"""Bootstrap resamples of an audit's CIs of the means unless told otherwise: one setting for
`judge audit`, the API and the viewer, which recomputes an audit with the settings stored with
it (``runs.record_audit_settings``) and this one otherwise."""


class AuditError(UserError):
    """An audit cannot be computed (not an audit run, ...)."""


def run_flag_rules(
    store: RunStore, run_id: str, rubric: Rubric, texts: Sequence[str] | None = None
) -> list[FlagRule]:
    """The flag rules applied to a run: ``texts`` parsed against its rubric, or by default those
    of ``DEFAULT_FLAG_RULES`` that apply (``prm<...`` only when the run stored PRM step scores).

    Args:
        store: The run store.
        run_id: The run (full id).
        rubric: The run's rubric.
        texts: Rules as written, or None for the defaults.
    """
    if texts is None:
        texts = default_flag_rules(rubric, prm_used=has_prm_steps(store, run_id))
    return [parse_flag_rule(text, rubric) for text in texts]


# Scores: vendor -> encounter id -> attribute -> value (None when null or failed).
Scores = dict[str, dict[str, dict[str, float | None]]]


def _reason(rule: FlagRule, score: float) -> str:
    if rule.attribute == PRM_ATTRIBUTE:
        return f"lowest PRM step {score:.3f} ({rule.text})"
    return f"{rule.attribute}={number_text(score)} ({rule.text})"


def flag_items(
    scores: Scores,
    rules: Sequence[FlagRule],
    failed: Sequence[tuple[str, str]] = (),
    addressed: Mapping[tuple[str, str], Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """Items that trip at least one rule, with every reason; failed judgments and outputs whose
    text addresses the judge are flagged too.

    Args:
        scores: Final scores per vendor and encounter.
        rules: Flag rules.
        failed: (vendor, encounter id) pairs whose judgment failed.
        addressed: (vendor, encounter id) -> what in its text addresses the judge
            (``items.flags``), e.g. ``score_request in summary``.
    """
    flagged: dict[tuple[str, str], list[str]] = {}
    for vendor, encounters in scores.items():
        for encounter, values in encounters.items():
            for rule in rules:
                score = values.get(rule.attribute)
                if rule.fires(score):
                    assert score is not None
                    flagged.setdefault((vendor, encounter), []).append(_reason(rule, score))
    for vendor, encounter in failed:
        flagged.setdefault((vendor, encounter), []).append("no valid judgment (all samples failed)")
    for key, found in (addressed or {}).items():
        flagged.setdefault(key, []).append(f"text addresses the judge: {', '.join(found)}")
    order = {v: i for i, v in enumerate(scores)}
    return [
        {
            "item_id": audit_item_id(vendor, encounter),
            "vendor": vendor,
            "encounter_id": encounter,
            "reasons": reasons,
        }
        for (vendor, encounter), reasons in sorted(
            flagged.items(), key=lambda kv: (order.get(kv[0][0], 0), kv[0][1])
        )
    ]


# ---------------------------------------------------------------------------------------------
# Statistics


def bootstrap_mean_ci(
    values: Sequence[float], n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of the mean, all resamples drawn in one array.

    Args:
        values: The observations (no missing values).
        n_boot: Resamples.
        seed: Random seed.
        level: Coverage.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return None
    if x.size == 1 or n_boot < 1:
        return (float(x.mean()), float(x.mean()))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return (float(lo), float(hi))


def vendor_summaries(
    scores: Scores, attributes: Sequence[str], *, n_boot: int = 2000, seed: int = 0
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per vendor and attribute: n, mean, median and bootstrap 95% CI of the mean.

    Args:
        scores: Final scores per vendor and encounter.
        attributes: Attributes to summarise.
        n_boot: Bootstrap resamples.
        seed: Bootstrap seed.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for vendor, encounters in scores.items():
        out[vendor] = {}
        for attribute in attributes:
            values = [x for v in encounters.values() if (x := v.get(attribute)) is not None]
            if not values:
                out[vendor][attribute] = {"n": 0, "mean": None, "median": None, "ci95": None}
                continue
            ci = bootstrap_mean_ci(values, n_boot, seed)
            out[vendor][attribute] = {
                "n": len(values),
                "mean": float(np.mean(values)),
                "median": float(np.median(values)),
                "ci95": list(ci) if ci else None,
            }
    return out


def holm_adjust(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p values (missing or NaN p stay missing, and do not count)."""
    valid = [(i, float(p)) for i, p in enumerate(p_values) if p is not None and not math.isnan(p)]
    m = len(valid)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (index, p) in enumerate(sorted(valid, key=lambda ip: ip[1])):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[index] = running
    return adjusted


def paired_comparisons(
    scores: Scores, attributes: Sequence[str], *, alpha: float = 0.05
) -> list[dict[str, Any]]:
    """Wilcoxon signed-rank tests of every vendor pair on matched encounters, per attribute.

    The difference is first vendor minus second; zero differences are dropped (``wilcox``).
    ``p_holm`` is Holm-corrected across all comparisons returned.

    Args:
        scores: Final scores per vendor and encounter.
        attributes: Attributes to compare.
        alpha: Significance level for the ``significant`` flag (on ``p_holm``).
    """
    rows: list[dict[str, Any]] = []
    for a, b in itertools.combinations(list(scores), 2):
        shared = sorted(set(scores[a]) & set(scores[b]))
        for attribute in attributes:
            pairs = [(scores[a][e].get(attribute), scores[b][e].get(attribute)) for e in shared]
            pairs_ok = [(x, y) for x, y in pairs if x is not None and y is not None]
            x = np.array([p[0] for p in pairs_ok], dtype=float)
            y = np.array([p[1] for p in pairs_ok], dtype=float)
            test = wilcoxon_paired(x, y) if x.size else None
            p = test["p"] if test else None
            rows.append(
                {
                    "vendor_a": a,
                    "vendor_b": b,
                    "attribute": attribute,
                    "n_pairs": int(x.size),
                    "n_zero_differences": test["n_zero_differences"] if test else 0,
                    "median_difference": float(np.median(x - y)) if x.size else None,
                    "mean_difference": float(np.mean(x - y)) if x.size else None,
                    "statistic": _finite(test["statistic"]) if test else None,
                    "p": _finite(p),
                    "method": test["method"] if test else None,
                }
            )
    for row, adjusted in zip(rows, holm_adjust([r["p"] for r in rows]), strict=True):
        row["p_holm"] = adjusted
        row["significant"] = adjusted is not None and adjusted < alpha
    return rows


def _finite(value: Any) -> float | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return float(value)


# ---------------------------------------------------------------------------------------------
# From the store


def _vendor_costs(store: RunStore, run_id: str, vendors: Sequence[str]) -> dict[str, Any]:
    by_vendor: dict[str | None, Any] = {r["vendor"]: r for r in vendor_call_totals(store, run_id)}
    out = {}
    for vendor in vendors:
        r = by_vendor.get(vendor, {})
        items = int(r.get("items") or 0)
        cost = r.get("cost_usd")
        latency = float(r.get("latency_s") or 0.0)
        out[vendor] = {
            "items": items,
            "calls": int(r.get("calls") or 0),
            "tokens_in": int(r.get("tokens_in") or 0),
            "tokens_out": int(r.get("tokens_out") or 0),
            "cost_usd": cost,
            "cost_known": int(r.get("calls_unpriced") or 0) == 0,
            "cost_per_item_usd": cost / items if cost is not None and items else None,
            "latency_s": latency,
            "latency_per_item_s": latency / items if items else None,
        }
    return out


def audit_for_run(
    store: RunStore,
    run_id: str,
    *,
    rules: Sequence[str] | None = None,
    n_boot: int | None = None,
    seed: int | None = None,
    alpha: float = 0.05,
    ratings: Sequence[HumanRating] | None = None,
    strict: bool = False,
) -> AuditStatistics:
    """Every audit statistic of a stored audit run (nothing is judged).

    Args:
        store: The run store.
        run_id: Run id or any unique part of it.
        rules: Flag rules (``attribute<=value`` and friends); default: those of
            ``DEFAULT_FLAG_RULES`` that apply to the run's rubric (``prm<...`` only when the run
            stored PRM step scores).
        n_boot: Bootstrap resamples for the CIs of the means; default: those the audit was
            last computed with (stored with the run), else ``AUDIT_BOOT``.
        seed: Bootstrap seed; default: the stored one, else 0.
        alpha: Significance level applied to Holm-corrected p values.
        ratings: Physicians' ratings of a random sample of the run's items: adds the
            judge-corrected (PPI++) estimates of the physicians' means (``ppi``, ``ppi_pairs``,
            ``physician_sample``).
        strict: Refuse ratings that name a vendor or item the run does not have (raise
            :class:`AuditError`) instead of leaving them out with a warning.
    """
    run = store.get_run(run_id)
    rid = run["run_id"]
    stored = audit_settings(run)
    n_boot = int(stored.get("n_boot", AUDIT_BOOT)) if n_boot is None else n_boot
    seed = int(stored.get("seed", 0)) if seed is None else seed
    rubric = run_rubric(run)
    parsed = run_flag_rules(store, rid, rubric, rules)
    rows = audit_score_rows(store, rid)
    vendors, scores, failed, pending, presence = _final_scores(rid, rows)
    prm_lows = _lowest_prm_steps(store, rid, rows)
    for (vendor, encounter), low in prm_lows.items():
        scores[vendor].setdefault(encounter, {})[PRM_ATTRIBUTE] = low
    attributes = list(rubric.keys)
    # Gates such as abstraction are not qualities to compare; DocLens proportions are, though
    # they stay out of agreement with physicians' Likert ratings.
    compared = [a.key for a in rubric.attributes if a.agreement or a.scale is ScaleKind.proportion]
    notes = []
    if pending:
        notes.append(f"{len(pending)} item(s) have no final score yet (run unfinished).")
    if failed:
        notes.append(f"{len(failed)} item(s) failed every sample; they are flagged.")
    unmatched = unmatched_encounters(presence, vendors)
    if unmatched:
        notes.append(
            f"{len(unmatched)} encounter(s) are missing for some vendor(s); they are judged and "
            "summarised but left out of the paired tests for the vendors that lack them."
        )
    if not prm_lows and any(r.attribute == PRM_ATTRIBUTE for r in parsed):
        notes.append(NO_PRM_NOTE)
    left_out = [a for a in attributes if a not in compared]
    if left_out:
        notes.append(
            f"Not compared between vendors (the rubric marks them agreement: false, e.g. gates): "
            f"{', '.join(left_out)}."
        )
    flagged = flag_items(scores, parsed, sorted(failed), _addressed(store, rid, rows))
    corrected = (
        _judge_corrected(rubric, rows, scores, vendors, flagged, ratings, notes, strict=strict)
        if ratings is not None
        else {}
    )
    return AuditStatistics.model_validate(
        {
            "run_id": rid,
            "name": run["name"],
            "status": run["status"],
            "simulated": bool(run["simulated"]),
            "rubric": f"{run['rubric']} {run['rubric_version']}",
            "mode": run["mode"],
            "models": run["models"],
            "samples_per_item": run["n_samples"],
            **run_reducer(run),
            "vendors": vendors,
            "n_encounters": len(presence),
            "n_items": len({r["item_id"] for r in rows}),
            "unmatched": unmatched,
            "attributes": attributes,
            "summaries": vendor_summaries(scores, attributes, n_boot=n_boot, seed=seed),
            "comparisons": paired_comparisons(scores, compared, alpha=alpha),
            "flag_rules": [r.text for r in parsed],
            "flagged": flagged,
            "cost": _vendor_costs(store, rid, vendors),
            "settings": {"n_boot": n_boot, "seed": seed, "alpha": alpha, "zero_method": "wilcox"},
            "notes": notes,
            **corrected,
        }
    )


def _judge_corrected(
    rubric: Rubric,
    rows: Sequence[AuditScoreRow],
    scores: Scores,
    vendors: list[str],
    flagged: list[dict[str, Any]],
    ratings: Sequence[HumanRating],
    notes: list[str],
    *,
    strict: bool = False,
) -> dict[str, Any]:
    """The PPI++ part of an audit: physicians' means per vendor and vendor pair."""
    where = _locations(rows)
    matched = [r for r in ratings if r.item_id in where]
    if ratings and not matched:
        example = next(iter(where), "VENDOR::ENCOUNTER")
        raise AuditError(
            f"no rating names an item of this run (item ids look like {example!r}, or give "
            "vendor and item_id columns)",
            setting="ratings",
        )
    unplaced = unplaced_ratings(ratings, where, vendors, strict=strict)
    if len(matched) < len(ratings):
        notes.append(
            f"{len(ratings) - len(matched)} rating(s) name items that are not in this run; "
            "left out."
        )
    labels = physician_labels(
        [(*where[r.item_id], r.attribute, r.score) for r in matched if r.attribute is not None]
    )
    attributes = [a.key for a in rubric.attributes if a.agreement]
    flagged_keys = [(f["vendor"], f["encounter_id"]) for f in flagged]
    vendor_rows = ppi_vendor_rows(scores, labels, vendors, attributes)
    pair_rows = ppi_pair_rows(scores, labels, vendors, attributes)
    return {
        "ppi": vendor_rows,
        "ppi_pairs": pair_rows,
        "physician_sample": physician_sample(scores, labels, vendors),
        "ppi_warnings": [
            *unplaced,
            *sampling_warnings(scores, labels, vendors, attributes, flagged_keys),
            *interval_warnings(vendor_rows, pair_rows),
        ],
    }


def unplaced_ratings(
    ratings: Sequence[HumanRating],
    item_ids: Collection[str],
    vendors: Sequence[str],
    *,
    strict: bool = False,
) -> list[str]:
    """Warnings naming each vendor and item the ratings name that the audit does not have;
    with ``strict`` those ratings are refused instead, since leaving them out changes the
    estimates.

    Args:
        ratings: Physicians' ratings (item ids as stored, ``VENDOR::ID``).
        item_ids: The audit's item ids.
        vendors: The audit's vendors, in report order.
        strict: Raise :class:`AuditError` rather than warn.
    """
    warnings = unmatched_rating_warnings([r.item_id for r in ratings], item_ids, vendors)
    if strict and warnings:
        raise AuditError(
            "ratings that this audit cannot place (refused with strict; without it they are "
            f"left out with a warning): {'; '.join(warnings)}",
            setting="ratings",
        )
    return warnings


def _final_scores(
    run_id: str, rows: Sequence[AuditScoreRow]
) -> tuple[list[str], Scores, set[tuple[str, str]], set[tuple[str, str]], dict[str, set[str]]]:
    """Vendors, final scores, failed and pending (vendor, encounter) pairs, and which vendors
    have each encounter, from an audit run's item and final-judgment rows."""
    if not rows or any(r["vendor"] is None or r["encounter"] is None for r in rows):
        raise AuditError(
            f"run {run_id} is not a vendor audit (its items lack a vendor or "
            "meta.encounter_id); audit vendors' files to create one"
        )
    vendors: list[str] = []
    scores: Scores = {}
    failed: set[tuple[str, str]] = set()
    pending: set[tuple[str, str]] = set()
    presence: dict[str, set[str]] = {}
    for r in rows:
        vendor, encounter = cast(str, r["vendor"]), cast(str, r["encounter"])  # checked above
        if vendor not in vendors:
            vendors.append(vendor)
        presence.setdefault(encounter, set()).add(vendor)
        if r["attribute"] is None:
            pending.add((vendor, encounter))
            continue
        if r["status"] == "failed":
            failed.add((vendor, encounter))
            continue
        scores.setdefault(vendor, {}).setdefault(encounter, {})[r["attribute"]] = r["value"]
    return vendors, {v: scores.get(v, {}) for v in vendors}, failed, pending, presence


def _locations(rows: Sequence[AuditScoreRow]) -> dict[str, tuple[str, str]]:
    """Item id -> (vendor, encounter id) of an audit run's rows (once :func:`_final_scores`
    has checked that every row has both)."""
    return {r["item_id"]: (cast(str, r["vendor"]), cast(str, r["encounter"])) for r in rows}


def audit_plan(
    store: RunStore, run_id: str, *, size: int = 40, seed: int = 0, correlation: float = 0.7
) -> AuditPlan:
    """A seeded random sample of each vendor's judged items for physicians to rate, and the
    interval half-widths to expect from it (PPI++ and physicians alone).

    The :class:`AuditPlan` holds ``run_id``, ``size``, ``sample`` (vendor, encounter id and
    item id of each item to rate), ``expected`` (per vendor and attribute, the half-widths with
    ``n`` rated and ``N`` judge-only items), ``seed`` and ``correlation``.

    Args:
        store: The run store.
        run_id: Run id or unique part of it.
        size: Items per vendor.
        seed: Random seed.
        correlation: Assumed judge-physician correlation (0 to 1).
    """
    if size < 2:
        raise AuditError("the sample needs at least 2 items per vendor", setting="size")
    if not 0 <= correlation <= 1:
        raise AuditError("correlation must be between 0 and 1", setting="correlation")
    run = store.get_run(run_id)
    rubric = run_rubric(run)
    vendors, scores, *_ = _final_scores(run["run_id"], audit_score_rows(store, run["run_id"]))
    attributes = [a.key for a in rubric.attributes if a.agreement]
    plan = plan_sample(scores, vendors, attributes, size=size, seed=seed, correlation=correlation)
    for row in plan["sample"]:
        row["item_id"] = audit_item_id(row["vendor"], row["encounter_id"])
    return AuditPlan.model_validate({"run_id": run["run_id"], "size": size, **plan})


def _addressed(
    store: RunStore, run_id: str, rows: Sequence[AuditScoreRow]
) -> dict[tuple[str, str], list[str]]:
    """(vendor, encounter) -> flags of text that addresses the judge (``items.flags``)."""
    where = _locations(rows)
    found: dict[tuple[str, str], list[str]] = {}
    for entry in flagged_items(store, run_id):
        if entry["item_id"] in where:
            names = sorted({f"{f['name']} in {f['field']}" for f in entry["flags"]})
            found[where[entry["item_id"]]] = names
    return found


def _lowest_prm_steps(
    store: RunStore, run_id: str, rows: Sequence[AuditScoreRow]
) -> dict[tuple[str, str], float]:
    """(vendor, encounter) -> lowest PRM step score of that item's output, where scored."""
    where = _locations(rows)
    lows = lowest_prm_scores(store, run_id)
    return {where[item_id]: low for item_id, low in lows.items() if item_id in where}
