"""Named reads of stored runs for the statistics (``analysis``): run lists, item and call
counts, cost and latency, final scores, item pages, vendor audits and PRM steps.

``runs`` owns the schema, so it owns every query of it; ``analysis`` calls these functions and
computes. Small results come back as rows typed by ``TypedDict`` (plain dicts, so they pass into
JSON output unchanged).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

from clinjudge.inputs import PRM_ATTRIBUTE, FlagRule
from clinjudge.runs._aggregate import FINAL_AGENT
from clinjudge.runs._manage import DECIDING_AGENT_SQL
from clinjudge.runs._reads import _FINAL_WHERE, count_query
from clinjudge.runs._store import FINAL_SAMPLE, RunStore

# ---------------------------------------------------------------------------------------------
# Runs and items


class RunListRow(TypedDict):
    """One run of :func:`list_runs`."""

    run_id: str
    name: str | None
    created_at: Any
    status: str
    mode: str
    rubric: str | None
    n_items: int | None
    n_samples: int | None
    simulated: bool | None
    model: str | None


def list_runs(store: RunStore) -> list[RunListRow]:
    """Every run, newest first, with its item count and model.

    Args:
        store: The run store.
    """
    rows = store.query(
        """
        SELECT run_id, name, created_at, status, mode, rubric, n_items, n_samples, simulated,
               json_extract_string(models, '$.judge') AS model
        FROM runs ORDER BY created_at DESC
        """
    )
    return cast(list[RunListRow], rows)


def run_item_count(store: RunStore, run_id: str) -> int:
    """How many items a run holds.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    return count_query(store, "SELECT count(*) AS n FROM items WHERE run_id = ?", [run_id])


class FlaggedItem(TypedDict):
    """An item whose text addresses the judge, with the flags found (``items.flags``)."""

    item_id: str
    flags: list[dict[str, Any]]


def flagged_items(store: RunStore, run_id: str) -> list[FlaggedItem]:
    """Items whose text addresses the judge, with the flags found (``items.flags``), in order.

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


# ---------------------------------------------------------------------------------------------
# Samples and calls: counts, cost and latency


class FinalItemCounts(TypedDict):
    """Items whose final judgment is valid (``items_ok``) or failed (``items_failed``)."""

    items_ok: int
    items_failed: int


def final_item_counts(store: RunStore, run_id: str) -> FinalItemCounts:
    """Items with a valid and with a failed final judgment.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        """
        SELECT count(DISTINCT item_id) FILTER (WHERE status = 'ok') AS items_ok,
               count(DISTINCT item_id) FILTER (WHERE status = 'failed') AS items_failed
        FROM judgments WHERE run_id = ? AND final""",
        [run_id],
    )
    return cast(FinalItemCounts, rows[0])


class CallTotals(TypedDict):
    """Every call of a run: counts, tokens, cost and latency percentiles."""

    calls: int
    calls_failed: int
    tokens_in: int
    tokens_out: int
    tokens_estimated: bool | None
    cost_usd: float | None
    calls_unpriced: int
    call_latency_p50_s: float | None
    call_latency_p95_s: float | None


def call_totals(store: RunStore, run_id: str) -> CallTotals:
    """Calls, failed calls, tokens, cost (None when no call is priced) and latency percentiles.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
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
        [run_id],
    )
    return cast(CallTotals, rows[0])


class ItemCallQuantiles(TypedDict):
    """Percentiles over items of the summed latency and cost of each item's calls."""

    item_latency_p50_s: float | None
    item_latency_p95_s: float | None
    item_cost_p50_usd: float | None


def item_call_quantiles(store: RunStore, run_id: str) -> ItemCallQuantiles:
    """Median and 95th percentile of the latency per item, median of the cost per item.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        """
        SELECT quantile_cont(t, 0.5) AS item_latency_p50_s,
               quantile_cont(t, 0.95) AS item_latency_p95_s,
               quantile_cont(c, 0.5) AS item_cost_p50_usd
        FROM (SELECT item_id, sum(latency_s) AS t, sum(cost_usd) AS c
              FROM calls WHERE run_id = ? GROUP BY item_id)""",
        [run_id],
    )
    return cast(ItemCallQuantiles, rows[0])


class ItemCallMeans(TypedDict):
    """Means over items of each item's summed latency and cost (unpriced calls as 0)."""

    latency_per_item_s: float | None
    cost_per_item_usd: float | None
    calls_unpriced: int | None
    calls: int | None


def item_call_means(store: RunStore, run_id: str) -> ItemCallMeans:
    """Mean latency and cost per item, successful calls without a price, and all calls.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        """
        SELECT avg(t) AS latency_per_item_s, avg(c) AS cost_per_item_usd,
               sum(unpriced) AS calls_unpriced, sum(n) AS calls
        FROM (SELECT item_id, sum(latency_s) AS t, coalesce(sum(cost_usd), 0) AS c,
                     count(*) FILTER (WHERE status = 'ok' AND cost_usd IS NULL) AS unpriced,
                     count(*) AS n
              FROM calls WHERE run_id = ? GROUP BY item_id)
        """,
        [run_id],
    )
    return cast(ItemCallMeans, rows[0])


class ErrorCount(TypedDict):
    """Failed samples with one error text."""

    error: str | None
    n: int


def top_sample_errors(store: RunStore, run_id: str, limit: int = 10) -> list[ErrorCount]:
    """The most frequent errors of the run's failed samples (every agent), most frequent first.

    Args:
        store: The run store.
        run_id: Full run id.
        limit: Most errors to return.
    """
    rows = store.query(
        """
        SELECT error, count(*) AS n FROM samples WHERE run_id = ? AND status = 'failed'
        GROUP BY error ORDER BY n DESC LIMIT ?""",
        [run_id, limit],
    )
    return cast(list[ErrorCount], rows)


class FailureReason(TypedDict):
    """Failed samples sharing one error, with the items they belong to."""

    reason: str
    samples: int
    items: int
    ids: list[str]


def failed_samples_by_reason(store: RunStore, run_id: str) -> list[FailureReason]:
    """Failed samples grouped by error (``unknown error`` when none was kept), most first:
    how many samples and items, and every item id in order.

    Args:
        store: The run store.
        run_id: Full run id.
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
    return cast(list[FailureReason], rows)


class ReplyCopies(TypedDict):
    """Items with two or more valid samples, those whose samples all replied the same, and the
    fewest valid samples of such an item."""

    items: int
    copies: int
    fewest: int | None


def reply_copies(store: RunStore, run_id: str) -> ReplyCopies:
    """Whether repeated samples are copies: per item with two or more valid samples of the
    deciding agent, whether every sample's assistant replies (all agents, in order) are equal.

    Args:
        store: The run store.
        run_id: Full run id.
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
    return cast(ReplyCopies, rows[0])


# ---------------------------------------------------------------------------------------------
# Final scores

_SQL_OPS = {"<=": "<=", ">=": ">=", "==": "=", "<": "<", ">": ">"}


def final_values(
    store: RunStore, run_id: str, item_ids: Sequence[str]
) -> dict[str, dict[str, float | None]]:
    """Final value of every attribute of the listed items (item -> attribute -> value).

    Args:
        store: The run store.
        run_id: Full run id.
        item_ids: The items.
    """
    if not item_ids:
        return {}
    rows = store.query(
        f"SELECT item_id, attribute, value FROM judgments WHERE {_FINAL_WHERE} "
        "AND item_id IN (SELECT unnest(?::VARCHAR[]))",
        [run_id, FINAL_SAMPLE, FINAL_AGENT, list(item_ids)],
    )
    out: dict[str, dict[str, float | None]] = {}
    for r in rows:
        out.setdefault(r["item_id"], {})[r["attribute"]] = r["value"]
    return out


def final_means(store: RunStore, run_id: str) -> dict[str, float | None]:
    """Mean over items of each attribute's final values (nulls left out).

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        "SELECT attribute, avg(value) AS mean FROM judgments "
        "WHERE run_id = ? AND final AND value IS NOT NULL GROUP BY attribute",
        [run_id],
    )
    return {r["attribute"]: r["mean"] for r in rows}


@dataclass
class ItemPage:
    """Items of a run with failure and flag columns, those needing attention first.

    Args:
        counts: ``total``, ``failed``, ``unjudged``, ``flagged``, ``injected``, ``partial`` and
            ``rule_<i>`` (items each rule fires on) over every item.
        rows: At most ``limit`` items: ``item_id``, ``position``, ``vendor``, ``section``,
            ``flags``, ``excerpt``, ``text_chars``, ``final_error``, ``failed``, ``unjudged``,
            ``samples``, ``samples_failed``, ``errors``, ``prm_low``, ``rule_<i>``,
            ``injected``, ``flagged``.
    """

    counts: dict[str, Any]
    rows: list[dict[str, Any]]


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


def item_page(
    store: RunStore, run_id: str, rules: Sequence[FlagRule] = (), limit: int | None = 200
) -> ItemPage:
    """Items with failure and flag columns: failed, unjudged or flagged items first (text
    addressing the judge in ``items.flags``, or a flag rule such as ``accurate<=2`` or
    ``prm<0.5`` on the final scores), then the rest, each group in input order.

    Args:
        store: The run store.
        run_id: Full run id.
        rules: Flag rules (``clinjudge.inputs.parse_flag_rule``).
        limit: Most rows to return (None: all); the counts cover every item.
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
    return ItemPage(counts, page)


# ---------------------------------------------------------------------------------------------
# Vendor audits and PRM steps


class AuditScoreRow(TypedDict):
    """One item of an audit run with one of its final values (attribute None: no final yet)."""

    item_id: str
    vendor: str | None
    encounter: str | None
    attribute: str | None
    value: float | None
    status: str | None


def audit_score_rows(store: RunStore, run_id: str) -> list[AuditScoreRow]:
    """Every item of a run (vendor and ``meta.encounter_id``) joined with its final values,
    in input order then attribute; an item without a final judgment has one row of nulls.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        """
        SELECT i.item_id, i.vendor, json_extract_string(i.meta, '$.encounter_id') AS encounter,
               j.attribute, j.value, j.status
        FROM items i LEFT JOIN judgments j
          ON j.run_id = i.run_id AND j.item_id = i.item_id AND j.final
             AND j.sample = ? AND j.agent = ?
        WHERE i.run_id = ? ORDER BY i.position, j.attribute
        """,
        [FINAL_SAMPLE, FINAL_AGENT, run_id],
    )
    return cast(list[AuditScoreRow], rows)


class VendorCallTotals(TypedDict):
    """Items and calls of one vendor of an audit run."""

    vendor: str | None
    items: int
    calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float | None
    calls_unpriced: int
    latency_s: float


def vendor_call_totals(store: RunStore, run_id: str) -> list[VendorCallTotals]:
    """Per vendor of an audit run: items, calls, tokens, cost, unpriced calls, summed latency.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        """
        SELECT i.vendor, count(DISTINCT i.item_id) AS items, count(c.call_id) AS calls,
               coalesce(sum(c.prompt_tokens), 0) AS tokens_in,
               coalesce(sum(c.completion_tokens), 0) AS tokens_out,
               sum(c.cost_usd) AS cost_usd,
               count(c.call_id) FILTER (WHERE c.status = 'ok' AND c.cost_usd IS NULL)
                   AS calls_unpriced,
               coalesce(sum(c.latency_s), 0) AS latency_s
        FROM items i LEFT JOIN calls c ON c.run_id = i.run_id AND c.item_id = i.item_id
        WHERE i.run_id = ? GROUP BY i.vendor
        """,
        [run_id],
    )
    return cast(list[VendorCallTotals], rows)


def has_prm_steps(store: RunStore, run_id: str) -> bool:
    """Whether a run stored PRM step scores (then ``prm<...`` flag rules apply).

    Args:
        store: The run store.
        run_id: The run.
    """
    if not store.has_table("prm_steps"):
        return False
    return bool(store.query("SELECT 1 FROM prm_steps WHERE run_id = ? LIMIT 1", [run_id]))


def lowest_prm_scores(store: RunStore, run_id: str) -> dict[str, float]:
    """Item id -> the lowest PRM step score of that item, where any step was scored.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    if not store.has_table("prm_steps"):
        return {}
    rows = store.query(
        "SELECT item_id, min(score) AS low FROM prm_steps WHERE run_id = ? AND score IS NOT NULL "
        "GROUP BY item_id",
        [run_id],
    )
    return {r["item_id"]: r["low"] for r in rows}
