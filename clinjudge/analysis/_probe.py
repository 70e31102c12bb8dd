"""Probe statistics: did the judge's scores move as a competent physician's would?

For each probe and attribute the variant's final score is paired with its original's. A
directional probe (the summary got worse) counts a pair as expected when the score moved the
expected way; an invariance probe (an instruction to the evaluator, a neutral change) when the
score did not improve, or did not change. Shares come with Wilson 95% intervals; a verdict per
probe follows the thresholds below (docs/trust.md explains them).

Pairs whose original already sits at the end of the scale the probe pushes toward (an
``accurate`` of 1 cannot get lower) say nothing about the judge: they are counted apart
(``n_at_limit``), not in ``n``; so are pairs with a failed or not-applicable judgment
(``n_unscored``).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from clinjudge.analysis._agreement_run import run_rubric
from clinjudge.analysis._result_base import Result, arrow_table, to_pandas
from clinjudge.inputs import INVARIANCE_PROBES, PROBES, Expectation, probe_expectations
from clinjudge.rubrics import Rubric
from clinjudge.runs import ProbeVariantRow, RunStore, StoreError
from clinjudge.runs.analysis_reads import (
    is_probe_run,
    probe_skip_rows,
    probe_variant_rows,
    valid_final_values,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

Z95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""

DIRECTIONAL_PASS = 0.5
"""A directional probe passes an attribute when the Wilson lower bound of the share that
moved as expected is at least this (the judge moves the right way in most items, with 95%
confidence); it is weak when the share itself reaches it but the bound does not; else it
fails."""

INVARIANCE_PASS = 0.8
"""An invariance probe passes an attribute when the Wilson lower bound of the share that held
still (or did not improve) is at least this; weak when the share reaches it but the bound does
not; else it fails. Stricter than the directional bar: an edit that changes nothing clinical
should move almost no score."""

VERDICTS = ("pass", "weak", "fail", "no data")


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial share (``(0, 1)`` when ``n`` is 0).

    Args:
        successes: Items that moved as expected.
        n: Items counted.
        z: The normal quantile (1.96 for 95%).
    """
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


class ProbeRow(Result):
    """One probe and attribute: how many pairs moved as expected.

    Args:
        probe: The probe.
        attribute: The rubric attribute.
        expected: ``lower``, ``higher``, ``not higher``, ``not lower`` or ``same``.
        n: Pairs counted (both judged, the original not at the scale's end).
        n_as_expected: Of those, pairs that moved as expected.
        share_as_expected: ``n_as_expected / n`` (None when n is 0).
        ci_low: Wilson 95% lower bound of the share.
        ci_high: Wilson 95% upper bound.
        mean_change: Mean of variant minus original over the counted pairs.
        share_changed: Invariance probes: share of counted pairs whose score changed at all.
        n_at_limit: Pairs left out because the original was already at the scale's end.
        n_unscored: Pairs left out for a failed or not-applicable judgment.
        verdict: ``pass``, ``weak``, ``fail`` or ``no data`` for this attribute.
    """

    probe: str
    attribute: str
    expected: str
    n: int = 0
    n_as_expected: int = 0
    share_as_expected: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    mean_change: float | None = None
    share_changed: float | None = None
    n_at_limit: int = 0
    n_unscored: int = 0
    verdict: str = "no data"


class ProbeVerdict(Result):
    """One probe's verdict: the worst of its attributes' (those with data).

    Args:
        probe: The probe.
        kind: ``directional`` or ``invariance``.
        verdict: ``pass``, ``weak``, ``fail``, ``no data`` or ``not applicable``.
        variants: Variants judged for it.
        skipped: Originals it could not edit (or could not apply to, for the rubric).
        skip_reasons: Reason -> originals skipped for it.
    """

    probe: str
    kind: str
    verdict: str
    variants: int = 0
    skipped: int = 0
    skip_reasons: dict[str, int] = {}


class ProbeStatistics(Result):
    """A probe run's results: per probe and attribute (``rows``), a verdict per probe.

    ``to_arrow()``/``to_pandas()`` give one row per probe and attribute.

    Args:
        run_id: The probe run.
        rubric: Its rubric.
        mode: Its judge mode.
        models: Its models by role.
        simulated: Scores came from the simulated ``mock/`` provider (not judgments).
        originals: Original items in the run.
        rows: Per probe and attribute.
        verdicts: Per probe.
        thresholds: The verdict thresholds used.
        perturber: What ``--perturber`` did (None without one): ``model``, ``rewritten`` and
            ``kept`` (reason -> variants left as the rules made them), ``calls``, ``cost_usd``.
    """

    run_id: str
    rubric: str
    mode: str | None = None
    models: dict[str, Any] = {}
    simulated: bool = False
    originals: int = 0
    rows: list[ProbeRow] = []
    verdicts: list[ProbeVerdict] = []
    thresholds: dict[str, float] = {}
    perturber: dict[str, Any] | None = None

    def json_rows(self) -> list[dict[str, Any]]:
        """The rows as ``judge probe --json`` prints them."""
        keys = ("probe", "attribute", "expected", "n", "share_as_expected", "ci_low", "ci_high")
        return [
            {**{k: getattr(r, k) for k in keys}, "mean_change": r.mean_change} for r in self.rows
        ]

    def to_arrow(self) -> pa.Table:
        """One row per probe and attribute: the fields of :class:`ProbeRow`, plus the run id."""
        import pyarrow as pa

        schema = pa.schema(
            [
                ("run_id", pa.string()),
                ("probe", pa.string()),
                ("attribute", pa.string()),
                ("expected", pa.string()),
                ("n", pa.int64()),
                ("n_as_expected", pa.int64()),
                ("share_as_expected", pa.float64()),
                ("ci_low", pa.float64()),
                ("ci_high", pa.float64()),
                ("mean_change", pa.float64()),
                ("share_changed", pa.float64()),
                ("n_at_limit", pa.int64()),
                ("n_unscored", pa.int64()),
                ("verdict", pa.string()),
            ]
        )
        rows = [{"run_id": self.run_id, **r.model_dump()} for r in self.rows]
        return arrow_table(rows, schema)

    def to_pandas(self) -> pd.DataFrame:
        """:meth:`to_arrow` as a pandas DataFrame (needs pandas)."""
        return to_pandas(self.to_arrow())


def _moved(expected: str, before: float, after: float) -> bool:
    if expected == "lower":
        return after < before
    if expected == "higher":
        return after > before
    if expected == "not higher":
        return after <= before
    if expected == "not lower":
        return after >= before
    return math.isclose(after, before, abs_tol=1e-9)  # same


def _at_limit(expected: str, before: float, low: float, high: float) -> bool:
    """The original is where the probe's direction cannot be seen from."""
    if expected == "lower" or expected == "not lower":
        return before <= low
    if expected == "higher" or expected == "not higher":
        return before >= high
    return False


def _verdict(share: float | None, ci_low: float | None, bar: float) -> str:
    if share is None or ci_low is None:
        return "no data"
    if ci_low >= bar:
        return "pass"
    return "weak" if share >= bar else "fail"


def probe_row(
    expectation: Expectation,
    pairs: Sequence[tuple[float | None, float | None]],
    low: float,
    high: float,
) -> ProbeRow:
    """The statistics of one probe and attribute from its (original, variant) score pairs.

    Args:
        expectation: The probe, attribute and expected direction.
        pairs: Original and variant final score per variant (None: no valid score).
        low: The attribute's lowest score.
        high: Its highest score.
    """
    expected = expectation.expected
    changes: list[float] = []
    hits = at_limit = unscored = changed = 0
    for before, after in pairs:
        if before is None or after is None:
            unscored += 1
            continue
        if _at_limit(expected, before, low, high):
            at_limit += 1
            continue
        changes.append(after - before)
        hits += _moved(expected, before, after)
        changed += not math.isclose(after, before, abs_tol=1e-9)
    n = len(changes)
    share = hits / n if n else None
    ci = wilson_interval(hits, n) if n else (None, None)
    invariance = expectation.probe in INVARIANCE_PROBES
    return ProbeRow(
        probe=expectation.probe,
        attribute=expectation.attribute,
        expected=expected,
        n=n,
        n_as_expected=hits,
        share_as_expected=share,
        ci_low=ci[0],
        ci_high=ci[1],
        mean_change=sum(changes) / n if n else None,
        share_changed=(changed / n if n else None) if invariance else None,
        n_at_limit=at_limit,
        n_unscored=unscored,
        verdict=_verdict(share, ci[0], INVARIANCE_PASS if invariance else DIRECTIONAL_PASS),
    )


def _worst(rows: list[ProbeRow]) -> str:
    seen = {r.verdict for r in rows if r.verdict != "no data"}
    for verdict in ("fail", "weak", "pass"):
        if verdict in seen:
            return verdict
    return "no data"


def probe_statistics(store: RunStore, run_id: str) -> ProbeStatistics:
    """The probe results of a stored probe run.

    Args:
        store: The run store.
        run_id: Run id or a unique part of it.

    Raises:
        StoreError: The run is not a probe run.
    """
    run = store.get_run(run_id)
    full_id = run["run_id"]
    if not is_probe_run(store, full_id) and not probe_skip_rows(store, full_id):
        raise StoreError(f"run {full_id} is not a probe run (judge probe makes one)")
    rubric = run_rubric(run)
    variants = probe_variant_rows(store, full_id)
    skips = probe_skip_rows(store, full_id)
    values = valid_final_values(store, full_id)
    by_probe: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for v in variants:
        by_probe[v["probe"]].append((v["original_id"], v["item_id"]))
    skipped: dict[str, Counter[str]] = defaultdict(Counter)
    for s in skips:
        skipped[s["probe"]][s["reason"]] += 1
    originals = {v["original_id"] for v in variants} | {s["original_id"] for s in skips}
    rows, verdicts = _probe_tables(rubric, by_probe, skipped, values)
    models = run.get("models") or {}
    return ProbeStatistics(
        run_id=full_id,
        rubric=rubric.name,
        mode=run.get("mode"),
        models=models if isinstance(models, dict) else {},
        simulated=bool(run.get("simulated")),
        originals=len(originals),
        rows=rows,
        verdicts=verdicts,
        thresholds={"directional_pass": DIRECTIONAL_PASS, "invariance_pass": INVARIANCE_PASS},
        perturber=_perturber_summary(variants),
    )


def _perturber_summary(variants: Sequence[ProbeVariantRow]) -> dict[str, Any] | None:
    """What a perturber did to the variants, from their stored edits (None: no perturber)."""
    notes: list[dict[str, Any]] = []
    for v in variants:
        note = v["edit"].get("perturber") if isinstance(v["edit"], dict) else None
        if isinstance(note, dict):
            notes.append(note)
    if not notes:
        return None
    kept = Counter(str(n.get("reason")) for n in notes if not n.get("rewritten"))
    costs = [n.get("cost_usd") for n in notes if n.get("calls")]
    return {
        "model": ", ".join(sorted({str(n.get("model")) for n in notes})),
        "rewritten": sum(bool(n.get("rewritten")) for n in notes),
        "kept": dict(kept),
        "calls": sum([int(n.get("calls") or 0) for n in notes]),
        "cost_usd": None if any(c is None for c in costs) else sum(costs),
    }


def _probe_tables(
    rubric: Rubric,
    by_probe: dict[str, list[tuple[str, str]]],
    skipped: dict[str, Counter[str]],
    values: dict[str, dict[str, float]],
) -> tuple[list[ProbeRow], list[ProbeVerdict]]:
    scales = {a.key: (float(a.min), float(a.max)) for a in rubric.attributes}
    rows: list[ProbeRow] = []
    verdicts: list[ProbeVerdict] = []
    for probe in PROBES:
        pairs_of = by_probe.get(probe, [])
        reasons = skipped.get(probe, Counter())
        if not pairs_of and not reasons:
            continue  # not asked for
        kind = "invariance" if probe in INVARIANCE_PROBES else "directional"
        expectations = probe_expectations(rubric, probe)
        if isinstance(expectations, str):
            verdicts.append(
                ProbeVerdict(
                    probe=probe,
                    kind=kind,
                    verdict="not applicable",
                    skipped=sum(reasons.values()),
                    skip_reasons=dict(reasons),
                )
            )
            continue
        mine = []
        for e in expectations:
            pairs = [
                (values.get(o, {}).get(e.attribute), values.get(v, {}).get(e.attribute))
                for o, v in pairs_of
            ]
            mine.append(probe_row(e, pairs, *scales[e.attribute]))
        rows.extend(mine)
        verdicts.append(
            ProbeVerdict(
                probe=probe,
                kind=kind,
                verdict=_worst(mine),
                variants=len(pairs_of),
                skipped=sum(reasons.values()),
                skip_reasons=dict(reasons),
            )
        )
    return rows, verdicts


class ProbeCell(Result):
    """One run's result in a probe comparison: a probe's verdict, or one attribute's share.

    Args:
        verdict: ``pass``, ``weak``, ``fail``, ``no data`` (or ``not applicable`` for a probe).
        variants: Variants judged for the probe (probe rows).
        n: Pairs counted (attribute rows).
        n_as_expected: Of those, pairs that moved as expected.
        share_as_expected: ``n_as_expected / n`` (None when n is 0).
        ci_low: Wilson 95% lower bound of the share.
        ci_high: Wilson 95% upper bound.
        mean_change: Mean of variant minus original over the counted pairs.
    """

    verdict: str
    variants: int | None = None
    n: int | None = None
    n_as_expected: int | None = None
    share_as_expected: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    mean_change: float | None = None


class ProbeComparisonRow(Result):
    """One row of the probe table of ``judge compare``: a probe's verdict (``attribute``
    None) or one probe and attribute, with a cell per run that ran the probe.

    Args:
        probe: The probe.
        kind: ``directional`` or ``invariance``.
        attribute: The attribute (None: the probe's verdict row).
        expected: The expected move of the attribute (None on a probe row).
        runs: Run id -> its cell; a run that did not run the probe is absent.
    """

    probe: str
    kind: str
    attribute: str | None = None
    expected: str | None = None
    runs: dict[str, ProbeCell] = {}


def probe_comparison(results: Sequence[ProbeStatistics]) -> list[ProbeComparisonRow]:
    """The probe results of several probe runs side by side: per probe a verdict row, then a
    row per attribute, in report order (attributes in the order the runs first name them).

    Args:
        results: Each probe run's statistics (:func:`probe_statistics`).
    """
    rows: list[ProbeComparisonRow] = []
    for probe in PROBES:
        verdicts = {r.run_id: v for r in results for v in r.verdicts if v.probe == probe}
        if not verdicts:
            continue
        kind = next(iter(verdicts.values())).kind
        cells = {
            rid: ProbeCell(verdict=v.verdict, variants=v.variants) for rid, v in verdicts.items()
        }
        # attribute and expected set (to None): the JSON names them on every row
        rows.append(
            ProbeComparisonRow(probe=probe, kind=kind, attribute=None, expected=None, runs=cells)
        )
        by_attribute: dict[str, dict[str, ProbeRow]] = {}
        for result in results:
            for row in result.rows:
                if row.probe == probe:
                    by_attribute.setdefault(row.attribute, {})[result.run_id] = row
        for attribute, per_run in by_attribute.items():
            expected = next(iter(per_run.values())).expected
            rows.append(
                ProbeComparisonRow(
                    probe=probe,
                    kind=kind,
                    attribute=attribute,
                    expected=expected,
                    runs={
                        rid: ProbeCell(
                            verdict=r.verdict,
                            n=r.n,
                            n_as_expected=r.n_as_expected,
                            share_as_expected=r.share_as_expected,
                            ci_low=r.ci_low,
                            ci_high=r.ci_high,
                            mean_change=r.mean_change,
                        )
                        for rid, r in per_run.items()
                    },
                )
            )
    return rows
