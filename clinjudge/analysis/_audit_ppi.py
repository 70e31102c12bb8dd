"""Judge-corrected audits: physicians' ratings on a sample of items turn the judge's scores into
estimates of the physicians' mean per vendor (and per vendor pair), by PPI++.

An item's label is the mean of its physicians' ratings of an attribute; the judge's prediction
is the run's final score. Rated items with a judge score form the labelled set, every other item
with a judge score the unlabelled one. The intervals are valid only when the rated items were
drawn at random from each vendor's items, so the sample is checked for signs that they were not.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
from scipy.stats import mannwhitneyu

from clinjudge.analysis._ppi import MeanEstimate, expected_half_widths, ppi_means

# vendor -> encounter -> attribute -> score (None when null or failed)
Scores = Mapping[str, Mapping[str, Mapping[str, float | None]]]
# (vendor, encounter) -> attribute -> mean of the physicians' ratings
Labels = dict[tuple[str, str], dict[str, float]]

_SHIFT_P = 0.01  # a labelled/unlabelled difference in judge scores this unlikely is reported


def physician_labels(
    ratings: Sequence[tuple[str, str, str, float | None]],
) -> Labels:
    """Mean physicians' rating per item and attribute (null ratings left out).

    Args:
        ratings: (vendor, encounter, attribute, score) of each rating.
    """
    collected: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for vendor, encounter, attribute, score in ratings:
        if score is not None:
            collected[(vendor, encounter)][attribute].append(float(score))
    return {
        key: {a: float(np.mean(v)) for a, v in by_attribute.items()}
        for key, by_attribute in collected.items()
    }


def _split(
    scores: Scores, labels: Labels, vendor: str, attribute: str
) -> tuple[list[float], list[float], list[float], list[str]]:
    y, yhat, unlabelled, rated = [], [], [], []
    for encounter, values in scores.get(vendor, {}).items():
        judged = values.get(attribute)
        if judged is None:
            continue
        label = labels.get((vendor, encounter), {}).get(attribute)
        if label is None:
            unlabelled.append(float(judged))
        else:
            y.append(label)
            yhat.append(float(judged))
            rated.append(encounter)
    return y, yhat, unlabelled, rated


def ppi_vendor_rows(
    scores: Scores, labels: Labels, vendors: Sequence[str], attributes: Sequence[str]
) -> list[dict[str, Any]]:
    """The ``ppi`` rows: per vendor and attribute, PPI++, physicians-only and judge-only means.

    Args:
        scores: Final judge scores per vendor and encounter.
        labels: Physicians' mean rating per (vendor, encounter) and attribute.
        vendors: Vendors, in report order.
        attributes: Attributes to estimate.
    """
    keys = list(itertools.product(vendors, attributes))
    parts = [_split(scores, labels, v, a) for v, a in keys]
    estimates = ppi_means([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts])
    return [
        {"vendor": v, "attribute": a, **_fields(e)}
        for (v, a), e in zip(keys, estimates, strict=True)
    ]


def ppi_pair_rows(
    scores: Scores, labels: Labels, vendors: Sequence[str], attributes: Sequence[str]
) -> list[dict[str, Any]]:
    """The ``ppi_pairs`` rows: per vendor pair and attribute, the mean difference (first minus
    second) on matched encounters; labelled where physicians rated both vendors' outputs.

    Args:
        scores: Final judge scores per vendor and encounter.
        labels: Physicians' mean rating per (vendor, encounter) and attribute.
        vendors: Vendors, in report order.
        attributes: Attributes to compare.
    """
    keys = [(a, b, attr) for a, b in itertools.combinations(vendors, 2) for attr in attributes]
    parts = []
    for a, b, attribute in keys:
        y, yhat, unlabelled = [], [], []
        for encounter in sorted(set(scores.get(a, {})) & set(scores.get(b, {}))):
            first, second = scores[a][encounter].get(attribute), scores[b][encounter].get(attribute)
            if first is None or second is None:
                continue
            la = labels.get((a, encounter), {}).get(attribute)
            lb = labels.get((b, encounter), {}).get(attribute)
            if la is None or lb is None:
                unlabelled.append(first - second)
            else:
                y.append(la - lb)
                yhat.append(first - second)
        parts.append((y, yhat, unlabelled))
    estimates = ppi_means([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts])
    rows = []
    for (a, b, attribute), e in zip(keys, estimates, strict=True):
        fields = _fields(e)
        rows.append(
            {
                "first": a,
                "second": b,
                "attribute": attribute,
                **{k: fields[k] for k in ("n", "N", "lambda", "estimate", "ci_low", "ci_high")},
                "classical_estimate": fields["classical_mean"],
                "classical_ci_low": fields["classical_ci_low"],
                "classical_ci_high": fields["classical_ci_high"],
                "judge_estimate": fields["judge_mean"],
            }
        )
    return rows


def _fields(estimate: MeanEstimate) -> dict[str, Any]:
    fields = asdict(estimate)
    fields["lambda"] = fields.pop("lam")
    return fields


def physician_sample(
    scores: Scores, labels: Labels, vendors: Sequence[str]
) -> list[dict[str, Any]]:
    """Which items physicians rated, per vendor: counts and encounter ids.

    Args:
        scores: Final judge scores per vendor and encounter.
        labels: Physicians' mean rating per (vendor, encounter) and attribute.
        vendors: Vendors, in report order.
    """
    rows = []
    for vendor in vendors:
        encounters = sorted(e for v, e in labels if v == vendor)
        rows.append(
            {
                "vendor": vendor,
                "items": len(scores.get(vendor, {})),
                "rated": len(encounters),
                "encounters": encounters,
            }
        )
    return rows


def sampling_warnings(
    scores: Scores,
    labels: Labels,
    vendors: Sequence[str],
    attributes: Sequence[str],
    flagged: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """Signs that the rated items were not drawn at random from each vendor's items.

    Args:
        scores: Final judge scores per vendor and encounter.
        labels: Physicians' mean rating per (vendor, encounter) and attribute.
        vendors: Vendors, in report order.
        attributes: Attributes estimated.
        flagged: (vendor, encounter) of flagged items.
    """
    warnings = []
    unrated = [v for v in vendors if not any(key[0] == v for key in labels)]
    if unrated and len(unrated) < len(vendors):
        warnings.append(
            f"no physician ratings for {', '.join(unrated)}: its physicians' mean cannot be "
            "estimated; rate a random sample of every vendor's items (judge audit plan)"
        )
    for vendor in vendors:
        for attribute in attributes:
            y, yhat, unlabelled, _ = _split(scores, labels, vendor, attribute)
            if len(yhat) < 5 or len(unlabelled) < 5 or len(set(yhat) | set(unlabelled)) < 2:
                continue
            p = float(mannwhitneyu(yhat, unlabelled).pvalue)
            if p < _SHIFT_P:
                warnings.append(
                    f"{vendor}: the rated items' judge scores of {attribute} differ from the "
                    f"unrated items' (Mann-Whitney p={p:.2g}); if the items were not drawn at "
                    "random, the intervals are not valid"
                )
                break
    warnings += _flag_warnings(labels, vendors, flagged, scores)
    return warnings


def _flag_warnings(
    labels: Labels, vendors: Sequence[str], flagged: Sequence[tuple[str, str]], scores: Scores
) -> list[str]:
    flagged_set = set(flagged)
    out = []
    for vendor in vendors:
        rated = [key for key in labels if key[0] == vendor]
        total = len(scores.get(vendor, {}))
        if len(rated) < 3 or not total:
            continue
        share_rated = sum(key in flagged_set for key in rated) / len(rated)
        share_all = sum(key[0] == vendor for key in flagged_set) / total
        if share_rated >= 0.9 and share_all < 0.5:
            out.append(
                f"{vendor}: {share_rated:.0%} of the rated items are flagged against "
                f"{share_all:.0%} of all its items; a sample of flagged items is not random and "
                "the intervals are not valid"
            )
    return out


def plan_sample(
    scores: Scores,
    vendors: Sequence[str],
    attributes: Sequence[str],
    *,
    size: int,
    seed: int,
    correlation: float,
) -> dict[str, Any]:
    """A seeded random sample of each vendor's judged items to give physicians, with the
    interval half-widths to expect.

    Args:
        scores: Final judge scores per vendor and encounter.
        vendors: Vendors, in report order.
        attributes: Attributes to estimate.
        size: Items to rate per vendor (fewer when a vendor has fewer judged items).
        seed: Random seed.
        correlation: Assumed correlation of judge and physicians' scores.
    """
    rng = np.random.default_rng(seed)
    sample, widths = [], []
    for vendor in vendors:
        judged = sorted(
            e
            for e, v in scores.get(vendor, {}).items()
            if any(v.get(a) is not None for a in attributes)
        )
        chosen = sorted(rng.choice(judged, size=min(size, len(judged)), replace=False).tolist())
        sample += [{"vendor": vendor, "encounter_id": e} for e in chosen]
        for attribute in attributes:
            values = {
                e: x for e, v in scores[vendor].items() if (x := v.get(attribute)) is not None
            }
            n = sum(e in values for e in chosen)
            if len(values) < 2 or n < 2:
                continue
            sd = float(np.std(list(values.values()), ddof=1))
            ppi, classical = expected_half_widths(sd, n, len(values) - n, correlation)
            widths.append(
                {
                    "vendor": vendor,
                    "attribute": attribute,
                    "n": n,
                    "N": len(values) - n,
                    "ppi_half_width": ppi,
                    "classical_half_width": classical,
                }
            )
    return {"sample": sample, "expected": widths, "seed": seed, "correlation": correlation}
