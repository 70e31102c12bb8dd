"""Summaries of runs: counts, tokens, cost, latency percentiles."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from clinjudge.inputs import PRM_ATTRIBUTE, FlagRule
from clinjudge.rubrics import Rubric
from clinjudge.runs import DECIDING_AGENT_SQL, FINAL_AGENT, FINAL_SAMPLE, RunStore


def list_runs(store: RunStore) -> list[dict[str, Any]]:
    """Every run, newest first, with its item count and model."""
    return store.query(
        """
        SELECT run_id, name, created_at, status, mode, rubric, n_items, n_samples, simulated,
               json_extract_string(models, '$.judge') AS model
        FROM runs ORDER BY created_at DESC
        """
    )


def flagged_items(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """Items whose text addresses the judge, with the flags found (``items.flags``).

    Args:
        store: The run store.
        run_id: Full run id.
    """
    if not store.has_column("items", "flags"):  # a database written before flags existed
        return []
    rows = store.query(
        "SELECT item_id, flags FROM items WHERE run_id = ? AND json_array_length(flags) > 0 "
        "ORDER BY position",
        [run_id],
    )
    return [{"item_id": r["item_id"], "flags": json.loads(r["flags"])} for r in rows]


def _one(store: RunStore, sql: str, run_id: str) -> dict[str, Any]:
    rows = store.query(sql, [run_id])
    return rows[0] if rows else {}


def run_summary(store: RunStore, run_id: str) -> dict[str, Any]:
    """Everything `judge runs show` prints for a run.

    Args:
        store: The run store.
        run_id: Run id or unique prefix.
    """
    run = store.get_run(run_id)
    rid = run["run_id"]
    items = _one(
        store,
        """
        SELECT count(DISTINCT item_id) FILTER (WHERE status = 'ok') AS items_ok,
               count(DISTINCT item_id) FILTER (WHERE status = 'failed') AS items_failed
        FROM judgments WHERE run_id = ? AND final""",
        rid,
    )
    samples = _one(
        store,
        """
        SELECT count(*) FILTER (WHERE status = 'ok') AS samples_ok,
               count(*) FILTER (WHERE status <> 'ok') AS samples_failed
        FROM samples WHERE run_id = ? AND sample > 0 AND """
        + DECIDING_AGENT_SQL,
        rid,
    )
    calls = _one(
        store,
        """
        SELECT count(*) AS calls, count(*) FILTER (WHERE status <> 'ok') AS calls_failed,
               coalesce(sum(prompt_tokens), 0) AS tokens_in,
               coalesce(sum(completion_tokens), 0) AS tokens_out,
               bool_or(tokens_estimated) AS tokens_estimated,
               sum(cost_usd) AS cost_usd,
               count(*) FILTER (WHERE status = 'ok' AND cost_usd IS NULL) AS calls_unpriced,
               quantile_cont(latency_s, 0.5) AS call_latency_p50_s,
               quantile_cont(latency_s, 0.95) AS call_latency_p95_s
        FROM calls WHERE run_id = ?""",
        rid,
    )
    per_item = _one(
        store,
        """
        SELECT quantile_cont(t, 0.5) AS item_latency_p50_s,
               quantile_cont(t, 0.95) AS item_latency_p95_s,
               quantile_cont(c, 0.5) AS item_cost_p50_usd
        FROM (SELECT item_id, sum(latency_s) AS t, sum(cost_usd) AS c
              FROM calls WHERE run_id = ? GROUP BY item_id)""",
        rid,
    )
    by_agent = store.query(
        """
        SELECT role, agent, model, count(*) AS calls,
               coalesce(sum(prompt_tokens), 0) AS tokens_in,
               coalesce(sum(completion_tokens), 0) AS tokens_out,
               sum(cost_usd) AS cost_usd,
               coalesce(sum(latency_s), 0) AS latency_s_sum
        FROM calls WHERE run_id = ?
        GROUP BY role, agent, model ORDER BY role, agent, model""",
        [rid],
    )
    errors = store.query(
        """
        SELECT error, count(*) AS n FROM samples WHERE run_id = ? AND status = 'failed'
        GROUP BY error ORDER BY n DESC LIMIT 10""",
        [rid],
    )
    return {
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
        **items,
        **samples,
        **calls,
        **per_item,
        "by_agent": by_agent,
        "top_errors": errors,
        "flagged_items": flagged_items(store, rid),
    }


# ---------------------------------------------------------------------------------------------
# Scores without ratings: distributions, per-item table, failures and flags

_FINAL_WHERE = "run_id = ? AND final AND sample = ? AND agent = ?"
_SQL_OPS = {"<=": "<=", ">=": ">=", "==": "=", "<": "<", ">": ">"}


def _median_of_counts(counts: dict[float, int]) -> float | None:
    values = sorted(counts)
    total = sum(counts.values())
    if not total:
        return None
    expanded = np.repeat(np.asarray(values, dtype=float), [counts[v] for v in values])
    return float(np.median(expanded))


def final_score_counts(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """One scan of a run's final judgments: rows of ``attribute``, ``value``, ``status``, ``n``.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    return store.query(
        f"SELECT attribute, value, status, count(*) AS n FROM judgments WHERE {_FINAL_WHERE} "
        "GROUP BY attribute, value, status",
        [run_id, FINAL_SAMPLE, FINAL_AGENT],
    )


def score_distributions(
    store: RunStore,
    run_id: str,
    rubric: Rubric,
    *,
    final_counts: Sequence[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Counts of each attribute's final scores, in rubric order.

    Each entry holds the attribute's ``key``, ``name``, ``scale``, ``min``, ``max``, ``counts``
    (value -> items), ``n`` (items with a number), ``null`` (valid judgments without a number,
    e.g. a gated attribute), ``failed`` (items whose judgment failed), ``mean`` and ``median``.

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
            {
                "key": attribute.key,
                "name": attribute.name,
                "scale": attribute.scale.value,
                "min": attribute.min,
                "max": attribute.max,
                "counts": dict(sorted(counts.items())),
                "n": n,
                "null": sum(
                    int(r["n"]) for r in mine if r["status"] == "ok" and r["value"] is None
                ),
                "failed": sum(int(r["n"]) for r in mine if r["status"] != "ok"),
                "mean": sum(v * c for v, c in counts.items()) / n if n else None,
                "median": _median_of_counts(counts),
            }
        )
    return out


def _rule_sql(rules: Sequence[FlagRule]) -> tuple[str, list[Any], str]:
    """Columns of the finals CTE that evaluate score rules, and the outer rule columns."""
    inner, params, outer = [], [], []
    for index, rule in enumerate(rules):
        op = _SQL_OPS[rule.op]  # KeyError for anything but the five operators
        if rule.attribute == PRM_ATTRIBUTE:
            outer.append(f"coalesce(p.prm_low {op} {float(rule.value)!r}, false) AS rule_{index}")
            continue
        inner.append(f", bool_or(attribute = ? AND value {op} ?) AS rule_{index}")
        params += [rule.attribute, float(rule.value)]
        outer.append(f"coalesce(f.rule_{index}, false) AS rule_{index}")
    return "".join(inner), params, "".join(f", {c}" for c in outer)


def _items_cte(store: RunStore, run_id: str, rules: Sequence[FlagRule]) -> tuple[str, list[Any]]:
    """``WITH ... t AS (...)``: one row per item with failure and flag columns."""
    inner, rule_params, outer = _rule_sql(rules)
    flags = "i.flags" if store.has_column("items", "flags") else "'[]'::JSON"
    prm = (
        "SELECT item_id, min(score) AS prm_low FROM prm_steps WHERE run_id = ? "
        "AND score IS NOT NULL GROUP BY item_id"
        if store.has_table("prm_steps")
        else "SELECT NULL::VARCHAR AS item_id, NULL::DOUBLE AS prm_low WHERE ? IS NULL"
    )
    rule_any = " OR ".join(f"rule_{i}" for i in range(len(rules))) or "false"
    sql = f"""
    WITH f AS (
        SELECT item_id, bool_or(status <> 'ok') AS failed,
               min(error) FILTER (WHERE status <> 'ok') AS final_error{inner}
        FROM judgments WHERE {_FINAL_WHERE} GROUP BY item_id),
    s AS (
        SELECT item_id, count(*) AS samples, count(*) FILTER (WHERE status = 'failed') AS
               samples_failed, list(coalesce(error, 'unknown error') ORDER BY sample, agent)
               FILTER (WHERE status = 'failed') AS errors
        FROM samples WHERE run_id = ? GROUP BY item_id),
    p AS ({prm}),
    u AS (
        SELECT i.item_id, i.position, i.vendor, json_extract_string(i.meta, '$.section')
               AS section, coalesce({flags}, '[]') AS flags, left(i.summary, 160) AS excerpt,
               length(i.summary) AS text_chars, f.final_error,
               coalesce(f.failed, false) AS failed, f.item_id IS NULL AS unjudged,
               coalesce(s.samples, 0) AS samples, coalesce(s.samples_failed, 0)
               AS samples_failed, s.errors, p.prm_low{outer}
        FROM items i LEFT JOIN f ON f.item_id = i.item_id LEFT JOIN s ON s.item_id = i.item_id
             LEFT JOIN p ON p.item_id = i.item_id
        WHERE i.run_id = ?),
    t AS (
        SELECT *, json_array_length(flags) > 0 AS injected,
               json_array_length(flags) > 0 OR {rule_any} AS flagged FROM u)
    """
    params = [*rule_params, run_id, FINAL_SAMPLE, FINAL_AGENT, run_id, run_id, run_id]
    return sql, params


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
) -> dict[str, Any]:
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
        ``total``, ``failed``, ``unjudged``, ``flagged``, ``injected``, ``partial`` (items with
        some failed samples), ``rule_counts`` (rule text -> items), ``rows`` and ``limit``.
    """
    cte, params = _items_cte(store, run_id, rules)
    rule_sums = "".join(
        f", count(*) FILTER (WHERE rule_{i}) AS rule_{i}" for i in range(len(rules))
    )
    (counts,) = store.query(
        f"""{cte} SELECT count(*) AS total, count(*) FILTER (WHERE failed) AS failed,
        count(*) FILTER (WHERE unjudged) AS unjudged, count(*) FILTER (WHERE flagged) AS flagged,
        count(*) FILTER (WHERE injected) AS injected,
        count(*) FILTER (WHERE NOT failed AND samples_failed > 0) AS partial{rule_sums} FROM t""",
        params,
    )
    page = store.query(
        f"{cte} SELECT * FROM t ORDER BY (failed OR unjudged OR flagged) DESC, position "
        + ("LIMIT ?" if limit is not None else ""),
        [*params, limit] if limit is not None else params,
    )
    values = _final_values(store, run_id, [r["item_id"] for r in page])
    rows = []
    for r in page:
        mine = values.get(r["item_id"], {})
        rows.append(
            {
                "item_id": r["item_id"],
                "vendor": r["vendor"],
                "section": r["section"],
                "excerpt": r["excerpt"],
                "text_chars": r["text_chars"],
                "status": "not judged" if r["unjudged"] else "failed" if r["failed"] else "ok",
                "values": mine,
                "reason": failure_reason(r),
                "flags": _flag_texts(r, rules, mine),
            }
        )
    return {
        "total": int(counts["total"]),
        "failed": int(counts["failed"]),
        "unjudged": int(counts["unjudged"]),
        "flagged": int(counts["flagged"]),
        "injected": int(counts["injected"]),
        "partial": int(counts["partial"]),
        "rule_counts": {rule.text: int(counts[f"rule_{i}"]) for i, rule in enumerate(rules)},
        "rows": rows,
        "limit": limit,
    }


def _final_values(
    store: RunStore, run_id: str, item_ids: list[str]
) -> dict[str, dict[str, float | None]]:
    if not item_ids:
        return {}
    rows = store.query(
        f"SELECT item_id, attribute, value FROM judgments WHERE {_FINAL_WHERE} "
        "AND item_id IN (SELECT unnest(?::VARCHAR[]))",
        [run_id, FINAL_SAMPLE, FINAL_AGENT, item_ids],
    )
    out: dict[str, dict[str, float | None]] = {}
    for r in rows:
        out.setdefault(r["item_id"], {})[r["attribute"]] = r["value"]
    return out


def failures_by_reason(store: RunStore, run_id: str, examples: int = 5) -> list[dict[str, Any]]:
    """Failed samples grouped by error: samples, items and the first few item ids.

    Args:
        store: The run store.
        run_id: Full run id.
        examples: How many item ids to list per reason.
    """
    rows = store.query(
        """
        SELECT coalesce(error, 'unknown error') AS reason, count(*) AS samples,
               count(DISTINCT item_id) AS items, list(DISTINCT item_id ORDER BY item_id) AS ids
        FROM samples WHERE run_id = ? AND status = 'failed'
        GROUP BY reason ORDER BY samples DESC, reason
        """,
        [run_id],
    )
    for r in rows:
        r["example_items"] = r.pop("ids")[:examples]
    return rows


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
    rows = store.query(
        """
        WITH replies AS (
            SELECT m.item_id, m.sample,
                   string_agg(m.content, chr(31) ORDER BY m.agent, m.seq) AS reply
            FROM messages m
            JOIN samples s USING (run_id, item_id, sample)
            WHERE m.run_id = ? AND m.role = 'assistant' AND s.sample > 0 AND s.status = 'ok'
              AND s."""
        + DECIDING_AGENT_SQL
        + """
            GROUP BY m.item_id, m.sample
        ), per_item AS (
            SELECT item_id, count(*) AS n, count(DISTINCT reply) AS different
            FROM replies GROUP BY item_id HAVING count(*) >= 2
        )
        SELECT count(*) AS items, count(*) FILTER (WHERE different = 1) AS copies,
               min(n) AS fewest
        FROM per_item
        """,
        [run_id],
    )
    row = rows[0] if rows else {}
    items = int(row.get("items") or 0)
    if not items or row.get("copies") != items:
        return None
    return (
        f"every item's samples are identical replies ({items} item(s) with {row['fewest']} or "
        "more valid samples): the endpoint decodes greedily or ignores the temperature, so "
        "repeated samples add cost but no information; raise --temperature if the server "
        "honours it, or use --samples 1 (docs/models.md, 'Local and CPU endpoints')"
    )
