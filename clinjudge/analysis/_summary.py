"""Summaries of runs: counts, tokens, cost, latency percentiles; score distributions, the
per-item table with failure reasons and flags. The rows come from ``runs``' named reads."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from clinjudge.analysis._summary_result import (
    ItemScoreRow,
    ItemScores,
    RunSummary,
    ScoreDistribution,
)
from clinjudge.inputs import PRM_ATTRIBUTE, FlagRule
from clinjudge.rubrics import Rubric
from clinjudge.runs import RunStore, quality_summary
from clinjudge.runs.analysis_reads import (
    ScoreCount,
    call_totals,
    calls_by_agent,
    failed_samples_by_reason,
    final_item_counts,
    final_score_counts,
    final_values,
    flagged_items,
    item_call_quantiles,
    item_page,
    reply_copies,
    sample_counts,
    top_sample_errors,
)


def run_summary(store: RunStore, run_id: str) -> RunSummary:
    """Everything `judge runs show` prints for a run (``to_dict()`` for plain data).

    Args:
        store: The run store.
        run_id: Run id or any unique part of it.
    """
    run = store.get_run(run_id)
    rid = run["run_id"]
    samples = sample_counts(store, rid)
    return RunSummary.model_validate(
        {
            "run_id": rid,
            "name": run["name"],
            "status": run["status"],
            "mode": run["mode"],
            "rubric": f"{run['rubric']} {run['rubric_version']}",
            "models": run["models"],
            "simulated": bool(run["simulated"]),
            "created_at": str(run["created_at"]),
            "finished_at": str(run["finished_at"]) if run["finished_at"] else None,
            "items": run["n_items"],
            "samples_per_item": run["n_samples"],
            **final_item_counts(store, rid),
            "samples_ok": samples["ok"],
            "samples_failed": samples["failed"],
            **call_totals(store, rid),
            **item_call_quantiles(store, rid),
            "by_agent": calls_by_agent(store, rid),
            "top_errors": top_sample_errors(store, rid, limit=10),
            "flagged_items": flagged_items(store, rid),
        }
    )


# ---------------------------------------------------------------------------------------------
# Scores without ratings: distributions, per-item table, failures and flags


def _median_of_counts(counts: dict[float, int]) -> float | None:
    values = sorted(counts)
    total = sum(counts.values())
    if not total:
        return None
    # Walk the cumulative counts instead of expanding them: no numpy on `judge runs show`.
    middle = [(total - 1) // 2, total // 2]
    picked: list[float] = []
    seen = 0
    for value in values:
        seen += counts[value]
        while middle and middle[0] < seen:
            picked.append(float(value))
            middle.pop(0)
    return (picked[0] + picked[1]) / 2


def score_distributions(
    store: RunStore,
    run_id: str,
    rubric: Rubric,
    *,
    final_counts: Sequence[ScoreCount] | None = None,
) -> list[ScoreDistribution]:
    """Counts of each attribute's final scores, in rubric order.

    Each :class:`ScoreDistribution` holds the attribute's ``key``, ``name``, ``scale``,
    ``min``, ``max``, ``counts`` (value -> items), ``n`` (items with a number), ``null`` (valid
    judgments without a number, e.g. a gated attribute), ``failed`` (items whose judgment
    failed), ``mean`` and ``median``.

    Args:
        store: The run store.
        run_id: Full run id.
        rubric: The run's rubric.
        final_counts: The rows of :func:`final_score_counts` when the caller has them already.
    """
    rows = final_score_counts(store, run_id) if final_counts is None else final_counts
    out = []
    for attribute in rubric.attributes:
        mine = [r for r in rows if r["attribute"] == attribute.key]
        counts: dict[float, int] = {}
        for r in mine:
            if r["status"] == "ok" and r["value"] is not None:
                counts[float(r["value"])] = counts.get(float(r["value"]), 0) + int(r["n"])
        n = sum(counts.values())
        out.append(
            ScoreDistribution(
                key=attribute.key,
                name=attribute.name,
                scale=attribute.scale.value,
                min=attribute.min,
                max=attribute.max,
                counts=dict(sorted(counts.items())),
                n=n,
                null=sum(int(r["n"]) for r in mine if r["status"] == "ok" and r["value"] is None),
                failed=sum(int(r["n"]) for r in mine if r["status"] != "ok"),
                mean=sum(v * c for v, c in counts.items()) / n if n else None,
                median=_median_of_counts(counts),
            )
        )
    return out


def _fmt_value(value: float) -> str:
    return f"{value:.3f}" if not float(value).is_integer() and abs(value) < 1.5 else f"{value:g}"


def _rule_hit(rule: FlagRule, score: float) -> str:
    if rule.attribute == PRM_ATTRIBUTE:
        return f"lowest PRM step {score:.3f} ({rule.text})"
    return f"{rule.attribute}={_fmt_value(score)} ({rule.text})"


def failure_reason(row: dict[str, Any]) -> str:
    """Why an item has no (or a weaker) judgment, from its final row and failed samples."""
    if row["unjudged"]:
        return "not judged (the run did not reach this item)"
    errors = Counter(row["errors"] or [])
    listed = "; ".join(f"{e} (x{n})" if n > 1 else e for e, n in errors.most_common())
    if row["failed"]:
        head = row["final_error"] or "judgment failed"
        return f"{head}: {listed}" if listed else head
    if row["samples_failed"]:
        return f"{row['samples_failed']} of {row['samples']} sample(s) failed: {listed}"
    return ""


def _flag_texts(row: dict[str, Any], rules: Sequence[FlagRule], values: dict) -> list[str]:
    found = json.loads(row["flags"]) if isinstance(row["flags"], str) else row["flags"] or []
    by_field: dict[str, list[str]] = {}
    for flag in found:
        by_field.setdefault(flag["field"], []).append(flag["name"])
    texts = [
        f"text addresses the judge: {', '.join(names)} in {field}"
        for field, names in by_field.items()
    ]
    for index, rule in enumerate(rules):
        if not row.get(f"rule_{index}"):
            continue
        score = row["prm_low"] if rule.attribute == PRM_ATTRIBUTE else values.get(rule.attribute)
        if score is not None and rule.fires(score):
            texts.append(_rule_hit(rule, score))
    return texts


def item_scores(
    store: RunStore,
    run_id: str,
    rules: Sequence[FlagRule] = (),
    *,
    limit: int | None = 200,
) -> ItemScores:
    """Final scores per item with failure reasons and flags, items needing attention first.

    Items whose judgment failed, that were not judged, or that are flagged (text addressing
    the judge in ``items.flags``, or a flag rule such as ``accurate<=2``) come first, then the
    rest, each group in input order; at most ``limit`` rows are returned, the counts cover all.

    Args:
        store: The run store.
        run_id: Full run id.
        rules: Flag rules (``clinjudge.inputs.parse_flag_rule``).
        limit: Most rows to return (None: all).

    Returns:
        :class:`ItemScores`: ``total``, ``failed``, ``unjudged``, ``flagged``, ``injected``,
        ``partial`` (items with some failed samples), ``rule_counts`` (rule text -> items),
        ``rows`` (an :class:`ItemScoreRow` each) and ``limit``.
    """
    page = item_page(store, run_id, rules, limit)
    counts = page.counts
    values = final_values(store, run_id, [r["item_id"] for r in page.rows])
    rows = []
    for r in page.rows:
        mine = values.get(r["item_id"], {})
        rows.append(
            ItemScoreRow(
                item_id=r["item_id"],
                vendor=r["vendor"],
                section=r["section"],
                excerpt=r["excerpt"],
                text_chars=r["text_chars"],
                status="not judged" if r["unjudged"] else "failed" if r["failed"] else "ok",
                values=mine,
                reason=failure_reason(r),
                flags=_flag_texts(r, rules, mine),
            )
        )
    return ItemScores(
        total=int(counts["total"]),
        failed=int(counts["failed"]),
        unjudged=int(counts["unjudged"]),
        flagged=int(counts["flagged"]),
        injected=int(counts["injected"]),
        partial=int(counts["partial"]),
        rule_counts={rule.text: int(counts[f"rule_{i}"]) for i, rule in enumerate(rules)},
        rows=rows,
        limit=limit,
    )


def failures_by_reason(store: RunStore, run_id: str, examples: int = 5) -> list[dict[str, Any]]:
    """Failed samples grouped by error: samples, items and the first few item ids.

    Args:
        store: The run store.
        run_id: Full run id.
        examples: How many item ids to list per reason.
    """
    rows: list[dict[str, Any]] = []
    for reason in failed_samples_by_reason(store, run_id):
        row: dict[str, Any] = dict(reason)
        row["example_items"] = row.pop("ids")[:examples]
        rows.append(row)
    return rows


def suspect_samples_note(store: RunStore, run_id: str) -> str | None:
    """A warning when samples of the run carry suspect-judgment flags (docs/trust.md), or
    when the run's scores themselves are flagged; None when nothing is flagged.

    Args:
        store: The run store.
        run_id: The run.
    """
    quality = quality_summary(store, run_id)
    parts = []
    if quality["suspect_samples"]:
        why = ", ".join(f"{flag} {n}" for flag, n in quality["by_flag"].items())
        parts.append(f"{quality['suspect_samples']} sample(s) carry suspect-judgment flags ({why})")
    parts += [f"{f['flag']} {f['attribute']}: {f['detail']}" for f in quality["run_flags"]]
    if not parts:
        return None
    return "; ".join(parts) + "; counted as they are (see `judge runs show`, docs/trust.md)"


def identical_samples_note(store: RunStore, run_id: str) -> str | None:
    """A warning when repeated samples are copies: every item with two or more valid samples
    got the same replies, word for word, in each of them.

    A server that decodes greedily (or ignores temperature) answers the same prompt the same
    way, so its samples add cost and no information; the median of copies is one sample.

    Args:
        store: The run store.
        run_id: Full run id.

    Returns:
        The warning, or None when some item's samples differ or none has two valid samples.
    """
    row = reply_copies(store, run_id)
    items = int(row["items"] or 0)
    if not items or row["copies"] != items:
        return None
    return (
        f"every item's samples are identical replies ({items} item(s) with {row['fewest']} or "
        "more valid samples): the endpoint decodes greedily or ignores the temperature, so "
        "repeated samples add cost but no information; raise --temperature if the server "
        "honours it, or use --samples 1 (docs/models.md, 'Local and CPU endpoints')"
    )
