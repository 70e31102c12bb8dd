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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from clinjudge.analysis._ppi import MeanEstimate, expected_half_widths, ppi_means
from clinjudge.inputs import audit_item_id

# vendor -> encounter -> attribute -> score (None when null or failed)
Scores = Mapping[str, Mapping[str, Mapping[str, float | None]]]
# (vendor, encounter) -> attribute -> mean of the physicians' ratings
Labels = dict[tuple[str, str], dict[str, float]]

_SHIFT_P = 0.01  # a labelled/unlabelled difference in judge scores this unlikely is reported

# Fewer rated items than this and an interval is reported as unreliable. The interval is
# ppi_py's: a normal quantile with the population (ddof 0) variance. For normally distributed
# ratings its real coverage with n rated items is P(|t(n-1)| < 1.96 sqrt((n-1)/n)): 60% at n=2,
# 75% at 3, 85% at 5, 90% at 10, 93% at 20. Ten is where it first reaches 90%; Likert ratings
# (few values, skewed) do no better. The interval itself stays ppi_py's.
MIN_RATED = 10

# Widths below this are zero: equal ratings averaged in floating point may differ in the last bit.
_ZERO_WIDTH = 1e-9


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
    """The ``ppi`` rows: per vendor and attribute, PPI++, physicians-only and judge-only means,
    and ``interval_warning`` (see :func:`interval_warning`).

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
        fields = _fields(e, pair=True)
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
                "interval_warning": fields["interval_warning"],
            }
        )
    return rows


def _fields(estimate: MeanEstimate, *, pair: bool = False) -> dict[str, Any]:
    fields = asdict(estimate)
    fields["lambda"] = fields.pop("lam")
    fields["interval_warning"] = interval_warning(estimate, pair=pair)
    return fields


def _zero_width(low: float | None, high: float | None) -> bool:
    return low is not None and high is not None and high - low <= _ZERO_WIDTH


def interval_warning(estimate: MeanEstimate, *, pair: bool = False) -> str | None:
    """Why a group's interval is missing or not to be trusted, in a few words; None when it is
    fine. The interval is left as ``ppi_py`` defines it; this only says what it cannot show.

    Args:
        estimate: The group's estimates.
        pair: A vendor pair's difference (its n counts items rated for both vendors).
    """
    one, many = _units(pair)
    if estimate.n == 0:
        return f"undefined: no {many if not pair else one}"
    if estimate.n == 1:
        return f"undefined: 1 {one} (an interval needs at least 2; {MIN_RATED} for a reliable one)"
    parts = []
    if _zero_width(estimate.classical_ci_low, estimate.classical_ci_high):
        # The physicians' ratings are all equal; lambda is then 0 and PPI++ is the same interval.
        parts.append("zero width: the ratings do not vary")
    elif _zero_width(estimate.ci_low, estimate.ci_high):
        # Possible with lambda > 0: ratings equal to lambda x the judge's score plus a constant
        # on the rated items, and one judge score on every unrated item.
        parts.append("zero width: the ratings less lambda x the judge's scores do not vary")
    if estimate.n < MIN_RATED:
        parts.append(f"n={estimate.n} < {MIN_RATED}: interval unreliable")
    return "; ".join(parts) or None


def _units(pair: bool) -> tuple[str, str]:
    """What n counts, singular and plural."""
    if pair:
        return "item rated for both vendors", "items rated for both vendors"
    return "rated item", "rated items"


def interval_warnings(
    vendor_rows: Sequence[Mapping[str, Any]], pair_rows: Sequence[Mapping[str, Any]]
) -> list[str]:
    """The ``ppi_warnings`` lines for intervals that are missing, of zero width or from fewer
    than :data:`MIN_RATED` rated items: one line per vendor (or pair) and reason, naming the
    attributes. Groups with no rated item at all are left to the rows (and to the warning about
    vendors without ratings): every unrated pair would otherwise get a line.

    Args:
        vendor_rows: The ``ppi`` rows.
        pair_rows: The ``ppi_pairs`` rows.
    """
    # (group, is a pair, reason) -> (attribute, n), in row order
    found: dict[tuple[str, bool, str], list[tuple[str, int]]] = defaultdict(list)
    rows = [(r, False) for r in vendor_rows] + [(r, True) for r in pair_rows]
    for row, pair in rows:
        n = row["n"]
        group = f"{row['first']} - {row['second']}" if pair else row["vendor"]
        entry = (row["attribute"], n)
        if n == 1:
            found[(group, pair, "one")].append(entry)
            continue
        if n == 0:
            continue
        if _zero_width(row["classical_ci_low"], row["classical_ci_high"]):
            found[(group, pair, "zero")].append(entry)
        elif _zero_width(row["ci_low"], row["ci_high"]):
            found[(group, pair, "zero PPI++")].append(entry)
        if n < MIN_RATED:
            found[(group, pair, "few")].append(entry)
    lines = []
    for (group, pair, reason), attributes in found.items():
        listed = _listed(attributes)
        one, many = _units(pair)
        if reason == "one":
            listed = ", ".join(a for a, _ in attributes)
            lines.append(
                f"{group}: no estimate for {listed}: 1 {one}, and an interval needs at least 2 "
                f"({MIN_RATED} for a reliable one); rate more items (judge audit plan)"
            )
        elif reason.startswith("zero"):
            values = "rating differences" if pair else "ratings"
            if reason == "zero PPI++":
                values += " less lambda x the judge's scores, and the unrated items' scores,"
            lines.append(
                f"{group}: zero-width interval for {listed}: the {values} it rests on do not "
                "vary, so it shows no uncertainty; that is a small sample, not certainty"
            )
        else:
            lines.append(
                f"{group}: fewer than {MIN_RATED} {many} for {listed}: a 95% interval from so "
                "few ratings misses the mean far more often than 1 time in 20; rate more items "
                "(judge audit plan)"
            )
    return lines


def _listed(attributes: Sequence[tuple[str, int]]) -> str:
    """``a, b (n=3)`` when every n is the same, else ``a (n=3), b (n=4)``."""
    counts = {n for _, n in attributes}
    if len(counts) == 1:
        return f"{', '.join(a for a, _ in attributes)} (n={counts.pop()})"
    return ", ".join(f"{a} (n={n})" for a, n in attributes)


def unmatched_rating_warnings(
    item_ids: Sequence[str], known: Collection[str], vendors: Sequence[str]
) -> list[str]:
    """One line per vendor the ratings name that the audit does not have, and per item of a
    known vendor (or without a vendor) that it does not have; with how many ratings each loses.

    Args:
        item_ids: The stored item id (``VENDOR::ID``) of each rating, in file order.
        known: The audit's item ids.
        vendors: The audit's vendors, in report order.
    """
    unknown_vendors: dict[str, int] = {}
    unknown_items: dict[str, int] = {}
    for item_id in item_ids:
        if item_id in known:
            continue
        # Known vendors are matched by prefix, since an encounter id may itself hold the
        # separator; for an unknown one, the part before the first separator names it.
        ours = [v for v in vendors if item_id.startswith(audit_item_id(v, ""))]
        vendor, sep, _ = item_id.partition(audit_item_id("", ""))
        if ours or not sep:
            unknown_items[item_id] = unknown_items.get(item_id, 0) + 1
        else:
            unknown_vendors[vendor] = unknown_vendors.get(vendor, 0) + 1
    lines = []
    for vendor, count in unknown_vendors.items():
        folded = [v for v in vendors if v.casefold() == vendor.casefold()]
        hint = f"; did you mean {folded[0]!r}?" if folded else ";"
        lines.append(
            f"ratings name vendor {vendor!r}, which this audit does not have (its vendors: "
            f"{', '.join(vendors)}){hint} {'Its' if folded else 'its'} {count} rating(s) are "
            "left out"
        )
    for item_id, count in unknown_items.items():
        lines.append(
            f"ratings name item {item_id!r}, which this audit does not have; its {count} "
            "rating(s) are left out"
        )
    return lines


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
            from scipy.stats import mannwhitneyu  # loaded only for a test that is made

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


def plan_warning(n: int, sd: float) -> str | None:
    """Why an expected half-width is not to be taken at its word, in a few words; None when
    nothing is known against it. A plan's widths are the judge's spread standing in for the
    physicians': with no spread they promise ±0.00 (#39).

    Args:
        n: Items of the sample with a judge score.
        sd: Standard deviation of the judge's scores of the vendor's items.
    """
    parts = []
    if sd == 0:
        parts.append(
            "±0.00 only because the judge gave every item the same score; the physicians' "
            "scores will vary and widen it"
        )
    if n < MIN_RATED:
        parts.append(f"n={n} < {MIN_RATED}: the interval will be unreliable")
    return "; ".join(parts) or None


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
                    "warning": plan_warning(n, sd),
                }
            )
    return {"sample": sample, "expected": widths, "seed": seed, "correlation": correlation}
