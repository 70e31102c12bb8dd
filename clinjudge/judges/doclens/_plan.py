"""One DocLens sample as a plan: the claims and statements to judge, their verdicts, the
per-instance metrics and the ``claims`` rows."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any

from clinjudge.judges.doclens._citations import (
    NumberedSource,
    Statement,
    official_counted,
    output_statements,
    remove_citations,
    source_units,
)
from clinjudge.judges.doclens._context import DocLensContext
from clinjudge.judges.doclens._judges import (
    CITATION,
    DEFAULT_SECTION,
    EXTRACTION,
    OUTPUT_LABEL,
    PRECISION,
    RECALL,
    REFERENCE_LABEL,
    Judge,
    LLMJudge,
    Plan,
    Transcript,
    Unit,
    UnitVerdict,
    Verdicts,
)
from clinjudge.judges.doclens._metrics import (
    FAILED,
    NOT_ENTAILED,
    Tally,
    citation_tallies,
    claim_tally,
)
from clinjudge.judges.workflows import SampleVerdict


def statement_unit(
    position: int, statement: Statement, source: NumberedSource, max_citations: int
) -> Unit:
    note = "citations borrowed from the next cited sentence" if statement.borrowed else None
    unit = Unit(CITATION, position, statement.text, statement.citations, note=note)
    counted, official_unknown = official_counted(statement.official, source.units, max_citations)
    unit.official, unit.official_unknown = tuple(counted), official_unknown
    if not statement.citations:
        unit.fixed = UnitVerdict(NOT_ENTAILED, "the sentence cites no source unit", 0.0)
        return unit
    unknown = [c for c in statement.citations if c not in source.units]
    if unknown:
        unit.fixed = UnitVerdict(
            NOT_ENTAILED, f"cites unknown source unit(s) {unknown}; counted as unsupported", 0.0
        )
        return unit
    unit.cited = {c: source.units[c] for c in statement.citations}
    return unit


async def plan_sample(ctx: DocLensContext, extractor: LLMJudge) -> Plan:
    """Extract claims and split statements for one sample.

    Args:
        ctx: The sample's context.
        extractor: Who extracts the claims.
    """
    item, settings = ctx.item, ctx.config.doclens
    output = remove_citations(item.summary)
    reference = remove_citations(item.reference or "")
    tasks: dict[str, Awaitable[tuple[list[str] | None, str | None]]] = {
        "output": extractor.extract(output)
    }
    if reference.strip():
        tasks["reference"] = extractor.extract(reference)
    results = dict(zip(tasks, await asyncio.gather(*tasks.values()), strict=True))
    reference_claims, reference_error = results.get("reference", ([], None))
    output_claims, output_error = results["output"]
    units = [Unit(RECALL, i, c) for i, c in enumerate(reference_claims or [])]
    units += [Unit(PRECISION, i, c) for i, c in enumerate(output_claims or [])]
    if settings.citations:
        source = source_units(item.notes, settings)
        statements = output_statements(item.summary, settings)
        units += [
            statement_unit(i, s, source, settings.max_citations) for i, s in enumerate(statements)
        ]
    extraction = {
        "reference": (None if reference_claims is None else len(reference_claims), reference_error),
        "output": (None if output_claims is None else len(output_claims), output_error),
    }
    section = str(item.meta.get("section") or DEFAULT_SECTION)
    return Plan(section, output, reference, units, extraction, settings.citations)


async def judge_plan(judge: Judge, plan: Plan) -> Verdicts:
    """Every unit of a plan judged by one judge."""
    recall, precision = plan.of(RECALL), plan.of(PRECISION)
    statements = plan.of(CITATION)
    # One gather of three: every call of the plan runs concurrently, and each part keeps its type.
    of_output, of_reference, of_statements = await asyncio.gather(
        judge.claims(recall, plan.output, OUTPUT_LABEL),
        judge.claims(precision, plan.reference, REFERENCE_LABEL),
        asyncio.gather(*(judge.statement(u) for u in statements)),
    )
    verdicts: Verdicts = {}
    for unit, verdict in zip(recall + precision, [*of_output, *of_reference], strict=True):
        verdicts[unit.key] = verdict
    for unit, verdict in zip(statements, of_statements, strict=True):
        verdicts[unit.key] = verdict
    return verdicts


def _claim_note(tally: Tally, what: str) -> str:
    note = f"{tally.hits}/{tally.total} {what}"
    if tally.failed:
        note += f"; {tally.failed} judgment(s) failed (counted as not entailed)"
    return note


def tallies(plan: Plan, verdicts: Verdicts) -> dict[str, Tally | None]:
    """Per-instance tallies of the four metrics (None where extraction failed)."""
    result: dict[str, Tally | None] = {}
    for kind, source, key in (
        (RECALL, "reference", "claim_recall"),
        (PRECISION, "output", "claim_precision"),
    ):
        if plan.extraction[source][1] is not None:
            result[key] = None
        else:
            result[key] = claim_tally([verdicts[u.key].verdict for u in plan.of(kind)])
    if not plan.citations:
        result["citation_recall"] = result["citation_precision"] = None
        return result
    statements = plan.of(CITATION)
    recall, precision = citation_tallies(
        [verdicts[u.key].verdict for u in statements],
        [len(u.citations) for u in statements],
        [len(verdicts[u.key].supporting) for u in statements],
    )
    result["citation_recall"], result["citation_precision"] = recall, precision
    return result


def sample_verdict(plan: Plan, verdicts: Verdicts, transcript: Transcript) -> SampleVerdict:
    """The sample's four proportions, with counts in the rationales and failures in the error."""
    counts = tallies(plan, verdicts)
    what = {
        "claim_recall": "reference claims entailed by the output",
        "claim_precision": "output claims entailed by the reference",
        "citation_recall": "output statements entailed by their citations",
        "citation_precision": "citations needed",
    }
    values: dict[str, float | None] = {}
    rationales: dict[str, str] = {}
    for key, description in what.items():
        tally = counts.get(key)
        values[key] = tally.value if tally is not None else None
        if tally is None and key.startswith("citation"):
            rationales[key] = "citations not evaluated (doclens.citations is off)"
        elif tally is None:
            source = "reference" if key == "claim_recall" else "output"
            rationales[key] = f"{source} claims could not be extracted"
        else:
            rationales[key] = _claim_note(tally, description)
    problems = [
        f"{source} extraction failed: {error}"
        for source, (_, error) in plan.extraction.items()
        if error is not None
    ]
    failed = sum(1 for v in verdicts.values() if v.verdict == FAILED)
    if failed:
        problems.append(f"{failed} entailment judgment(s) failed")
    status = "ok"
    if all(v is None for v in values.values()) and problems:
        status = "failed"
    return SampleVerdict(
        status,
        values=values,  # type: ignore[arg-type]  # proportions, not integer scores
        rationales=rationales,
        rationale=f"DocLens, section {plan.section}: {len(verdicts)} judgments",
        error="; ".join(problems) or None,
        transcript=[turn for _, turn in transcript],
    )


def claim_rows(
    ctx: DocLensContext, agent: str, plan: Plan, verdicts: Verdicts, *, extraction: bool = True
) -> list[dict[str, Any]]:
    """``claims`` rows of one agent: every unit with its verdict, plus the extraction rows."""
    base = {"run_id": ctx.run_id, "item_id": ctx.item.id, "sample": ctx.sample, "agent": agent}
    rows: list[dict[str, Any]] = []
    if extraction:
        for idx, (source, (count, error)) in enumerate(sorted(plan.extraction.items())):
            rows.append(
                {
                    **base,
                    "kind": EXTRACTION,
                    "idx": idx,
                    "section": plan.section,
                    "text": source,
                    "score": count,
                    "status": "failed" if error else "ok",
                    "error": error,
                }
            )
    for unit in plan.units:
        verdict = verdicts[unit.key]
        explanation = verdict.explanation
        if unit.note:
            explanation = f"{explanation} ({unit.note})" if explanation else unit.note
        row = {
            **base,
            "kind": unit.kind,
            "idx": unit.idx,
            "section": plan.section,
            "text": unit.text,
            "verdict": verdict.verdict,
            "score": verdict.score,
            "explanation": explanation,
            "status": "failed" if verdict.verdict == FAILED else "ok",
            "error": verdict.error,
        }
        if unit.kind == CITATION:
            row["citations"] = json.dumps(list(unit.citations))
            row["supporting"] = json.dumps(verdict.supporting)
            named = verdict.supporting if verdict.named is None else verdict.named
            row["official"] = json.dumps(
                {
                    "citations": list(unit.official),
                    "named": named,
                    "unknown": unit.official_unknown,
                }
            )
        rows.append(row)
    return rows
