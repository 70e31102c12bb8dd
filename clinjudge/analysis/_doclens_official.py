"""The official DocLens evaluator's arithmetic over a run's stored claims (``compat=official``).

The claims table keeps the raw verdicts, so either arithmetic can be applied to any run:

- an empty denominator gives 0 (ours: undefined);
- a statement counts the citations the official evaluator lists (its own, deduplicated and
  uncapped; or else the next cited statement's as written, repeats kept), and scores 0 without
  a judgment when any of them names an unknown unit;
- a citation counts when the statement is entailed and the judge named it as support, also when
  it is the statement's only citation (ours counts a single citation of an entailed statement);
- a failed judgment, which stops the official evaluator, counts as not entailed.

Runs stored before the ``official`` column existed fall back to the scoring citations and the
counted citations.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from clinjudge.runs import RunStore
from clinjudge.runs.analysis_reads import claim_rows

COMPATS = ("clinjudge", "official")


@dataclass
class _Counts:
    items: set[str] = field(default_factory=set)
    values: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, other: _Counts) -> None:
        self.items |= other.items
        for key, value in other.values.items():
            self.values[key] += value


def _json(value: Any, default: Any) -> Any:
    if value is None:
        return default
    return json.loads(value) if isinstance(value, str) else value


def official_statement(row: dict[str, Any]) -> tuple[bool, int, int]:
    """(entailed, citations, counted citations) of one statement, the official way.

    Args:
        row: A ``claims`` row of kind ``citation``.
    """
    stored = _json(row.get("official"), None)
    if stored is None:  # a run from before the column: our citations and counted ones
        stored = {
            "citations": _json(row.get("citations"), []),
            "named": _json(row.get("supporting"), []),
            "unknown": False,
        }
    from clinjudge.judges.doclens import ENTAILED  # see _count_row

    listed = [int(c) for c in stored.get("citations") or []]
    named = {int(c) for c in stored.get("named") or []}
    entailed = row["verdict"] == ENTAILED and not stored.get("unknown")
    counted = sum(c in named for c in listed) if entailed else 0
    return entailed, len(listed), counted


def _count_row(counts: _Counts, row: dict[str, Any]) -> None:
    # Imported on use: importing judges.doclens loads the judge workflows and model clients
    # (about 1 s), which `judge report` and `agree` of a run without DocLens must not pay (#39).
    from clinjudge.judges.doclens import ENTAILED, FAILED

    kind, verdict, values = row["kind"], row["verdict"], counts.values
    counts.items.add(row["item_id"])
    if kind == "extraction":
        values["extraction_failed"] += row["status"] == "failed"
        return
    prefix = {"recall": "reference", "precision": "output", "citation": "statements"}.get(kind)
    if prefix is None:
        return
    total = "statements" if kind == "citation" else f"{prefix}_claims"
    values[total] += 1
    values[f"{prefix}_failed"] += verdict == FAILED
    if kind != "citation":
        values[f"{prefix}_entailed"] += verdict == ENTAILED
        return
    entailed, listed, counted = official_statement(row)
    values["statements_entailed"] += entailed
    values["citations"] += listed
    values["citations_counted"] += counted


def _ratio(hits: int, total: int) -> float:
    return hits / total if total else 0.0


def _row(section: str, counts: _Counts) -> dict[str, Any]:
    v = counts.values
    keys = (
        "reference_claims", "reference_entailed", "reference_failed", "output_claims",
        "output_entailed", "output_failed", "statements", "statements_entailed",
        "statements_failed", "citations", "citations_counted", "extraction_failed",
    )  # fmt: skip
    return {
        "section": section,
        "claim_recall": _ratio(v["reference_entailed"], v["reference_claims"]),
        "claim_precision": _ratio(v["output_entailed"], v["output_claims"]),
        "citation_recall": _ratio(v["statements_entailed"], v["statements"]),
        "citation_precision": _ratio(v["citations_counted"], v["citations"]),
        "items": len(counts.items),
        **{key: int(v[key]) for key in keys},
    }


def official_pooled(store: RunStore, run_id: str, agent: str, total: str) -> list[dict[str, Any]]:
    """Pooled scores per section, then the ``total`` row, with the official arithmetic.

    Args:
        store: The run store.
        run_id: Full run id.
        agent: Whose verdicts.
        total: Name of the overall row.
    """
    rows = claim_rows(store, run_id, agent)
    by_section: dict[str, _Counts] = defaultdict(_Counts)
    for row in rows:
        _count_row(by_section[row["section"]], row)
    overall = _Counts()
    result = []
    for section in sorted(by_section):
        overall.add(by_section[section])
        result.append(_row(section, by_section[section]))
    return [*result, _row(total, overall)] if rows else []


def run_compat(run: dict[str, Any]) -> str:
    """The compat setting a run was judged with (``clinjudge`` when it names none)."""
    config = run.get("config")
    if isinstance(config, str):
        config = json.loads(config)
    doclens = (config or {}).get("doclens") or {}
    compat = doclens.get("compat") if isinstance(doclens, dict) else None
    return compat if compat in COMPATS else "clinjudge"
