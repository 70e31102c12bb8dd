"""DocLens scores of a run, pooled (micro) per section and overall, from the ``claims`` table.

This is what DocLens reports: per section, entailed claims over all claims of all items (and
the same for statements and citations), plus the ``total`` row over every section. Sections
come from each item's ``meta.section`` (``all`` when absent). Samples of the same item are
pooled too. Failed judgments stay in every denominator (as not entailed) and are counted in the
``*_failed`` columns; items whose claims could not be extracted have no claims to count and are
reported in ``extraction_failed``. The mean of the per-instance scores (``macro``, as ALCE
averages) is given for comparison; it is not what DocLens reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clinjudge._util.modes import deciding_agent as mode_deciding_agent
from clinjudge.analysis._doclens_official import COMPATS, official_pooled, run_compat
from clinjudge.analysis._doclens_result import DocLensMetrics, DocLensReport, DocLensSection
from clinjudge.runs import RunStore, StoreError, is_claims_run, write_rows
from clinjudge.runs.analysis_reads import (
    claim_extraction_agents,
    final_means,
    item_claim_counts,
    pooled_claim_counts,
)

METRICS = ("claim_recall", "claim_precision", "citation_recall", "citation_precision")
TOTAL = "total"


def deciding_agent(store: RunStore, run_id: str) -> str | None:
    """The agent whose claims rows hold a run's decisions: its mode's deciding agent (the one
    table, ``_util/modes.py``) when that agent wrote claim extraction rows, else None; for a
    mode this process does not know, the one agent with extraction rows.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    agents = claim_extraction_agents(store, run_id)
    agent = mode_deciding_agent(store.get_run(run_id)["mode"])
    if agent is None:
        return agents[0] if len(agents) == 1 else None
    return agent if agent in agents else None


def _metrics(row: dict[str, Any]) -> dict[str, float | None]:
    # On use: judges.doclens loads the workflows and model clients (_doclens_official).
    from clinjudge.judges.doclens import Tally

    tallies = {
        "claim_recall": Tally(
            row["reference_entailed"], row["reference_claims"], row["reference_failed"]
        ),
        "claim_precision": Tally(
            row["output_entailed"], row["output_claims"], row["output_failed"]
        ),
        "citation_recall": Tally(
            row["statements_entailed"], row["statements"], row["statements_failed"]
        ),
        "citation_precision": Tally(int(row["citations_counted"]), int(row["citations"])),
    }
    return {key: tally.value for key, tally in tallies.items()}


def pooled_scores(store: RunStore, run_id: str, agent: str | None = None) -> list[dict[str, Any]]:
    """Pooled (micro) DocLens scores per section, then the ``total`` row.

    Args:
        store: The run store.
        run_id: Run id or any unique part of it.
        agent: Whose verdicts (default: the run's deciding agent; a panel member's name gives
            that member's own scores).
    """
    rid = store.get_run(run_id)["run_id"]
    agent = agent or deciding_agent(store, rid)
    if agent is None:
        return []
    rows = pooled_claim_counts(store, rid, agent, TOTAL)
    result = []
    for row in rows:
        row.pop("is_total")
        row["citations"] = int(row["citations"])
        row["citations_counted"] = int(row["citations_counted"])
        result.append({"section": row.pop("section"), **_metrics(row), **row})
    return result


def instance_tallies(
    store: RunStore, run_id: str, item_ids: list[str], agent: str | None = None
) -> dict[str, dict[str, Any]]:
    """Claim, statement and citation counts of each listed item (pooled over its samples).

    Args:
        store: The run store.
        run_id: Full run id.
        item_ids: The items.
        agent: Whose verdicts (default: the run's deciding agent).
    """
    agent = agent or deciding_agent(store, run_id)
    if agent is None or not item_ids:
        return {}
    rows = item_claim_counts(store, run_id, agent, item_ids)
    out = {}
    for row in rows:
        row["citations"] = int(row["citations"])
        row["citations_counted"] = int(row["citations_counted"])
        out[row.pop("item_id")] = {**_metrics(row), **row}
    return out


def macro_scores(store: RunStore, run_id: str) -> dict[str, float | None]:
    """Mean over items of the final per-instance scores (not what DocLens reports)."""
    means = final_means(store, store.get_run(run_id)["run_id"])
    return {key: means.get(key) for key in METRICS}


def doclens_report(store: RunStore, run_id: str, compat: str | None = None) -> DocLensReport | None:
    """Pooled and macro DocLens scores of a run, or None when its rubric is not a claim rubric.

    The :class:`DocLensReport` holds the ``agent`` whose verdicts count, the ``compat``
    arithmetic, ``pooled`` (a :class:`DocLensSection` per section, then ``total``) and
    ``macro`` (the mean of the per-instance scores).

    Args:
        store: The run store.
        run_id: Run id or any unique part of it.
        compat: ``clinjudge`` or ``official`` (the official evaluator's arithmetic, see
            :mod:`clinjudge.analysis._doclens_official`); default: the run's own setting.
    """
    if compat is not None and compat not in COMPATS:
        raise StoreError(f"unknown DocLens compat {compat!r}; choose {' or '.join(COMPATS)}")
    run = store.get_run(run_id)
    if not is_claims_run(run):
        return None
    if not store.has_table("claims"):
        raise StoreError(f"{store.path}: no claims table; the database predates DocLens")
    rid = run["run_id"]
    compat = compat or run_compat(run)
    agent = deciding_agent(store, rid)
    if compat == "official":
        pooled = official_pooled(store, rid, agent, TOTAL) if agent else []
    else:
        pooled = pooled_scores(store, rid)
    return DocLensReport(
        agent=agent,
        compat=compat,
        pooled=[DocLensSection.model_validate(row) for row in pooled],
        macro=DocLensMetrics.model_validate(macro_scores(store, rid)),
    )


def export_doclens_scores(
    store: RunStore, run_id: str, out: str | Path, fmt: str, compat: str | None = None
) -> int:
    """Write a DocLens run's pooled scores (one row per section, then the total) to a file.

    Args:
        store: The run store.
        run_id: Run id or any unique part of it.
        out: Output path (appears only once complete).
        fmt: ``jsonl``, ``csv`` or ``parquet``.
        compat: Arithmetic of the scores: ``clinjudge`` or ``official`` (default: the run's own).

    Returns:
        Number of rows written.
    """
    report = doclens_report(store, run_id, compat)
    if report is None:
        raise StoreError(f"run {run_id!r} does not use a claim rubric (DocLens); nothing to export")
    head = {"agent": report.agent, "compat": report.compat}
    rows = [{**head, **row.to_dict()} for row in report.pooled] or [{**head, "section": TOTAL}]
    return write_rows(store, rows, Path(out), fmt)
