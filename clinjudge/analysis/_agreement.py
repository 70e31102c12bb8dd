"""Agreement between human raters and an LLM judge, per attribute and pooled (SPEC section 9).

``analyse_ratings`` turns long-format ratings (one record per unit, rater and attribute) into a
JSON-ready report: the raters' ICCs (complete units only), Krippendorff's alpha and Gwet's AC2
(all ratings), kappas and percent agreement for binary attributes, and, when a judge is named,
the primary comparison of the judge's median score with the human median (ICC(3,k), Wilcoxon
signed-rank, median difference and IQR, difference counts) plus the judge-as-substitute and
judge-as-extra-rater bootstraps. The statistics live in :mod:`clinjudge.analysis._stats`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from clinjudge.analysis import _stats
from clinjudge.analysis._agreement_result import PRIMARY_FORM, AgreementAnalysis
from clinjudge.analysis._statistics import (
    JUDGE,
    RATERS,
    PairedScores,
    as_estimate,
    computed_statistics,
)
from clinjudge.errors import UserError
from clinjudge.inputs import HumanRating
from clinjudge.rubrics import DEFAULT_REDUCER, get_reducer

ALPHA_LEVELS = ("nominal", "ordinal", "interval")
AC2_WEIGHTS = ("ordinal", "quadratic")


class RatingRecord(BaseModel):
    """One score given by one rater (a human or one judge sample) to one unit.

    Several records with the same unit, rater and attribute are samples of that rater (a
    judge's N samples); their median is used.
    """

    unit_id: str
    rater_id: str
    score: float | None
    attribute: str | None = None


# ---------------------------------------------------------------------------------------------
# Helpers


def _clean(value: Any) -> Any:
    """JSON-ready copy: numpy scalars to Python, NaN and infinities to None."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_clean(v) for v in value.tolist()]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return number if math.isfinite(number) else None
    return value


def _number_key(value: float) -> str:
    """A stable text key for a score difference: ``-1``, ``0``, ``0.5``."""
    value = round(float(value), 9) + 0.0  # drops -0.0
    return str(int(value)) if value.is_integer() else repr(value)


def _ordered(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


class _Block:
    """The ratings of one analysis block: rows are units, columns human raters."""

    def __init__(
        self,
        units: list[str] | None,
        raters: list[str],
        humans: np.ndarray,
        judge: np.ndarray | None,
        judge_samples: np.ndarray | None,
    ):
        self.units = units
        self.raters = raters
        self.humans = humans  # (n, k) with NaN
        self.judge = judge  # (n,) with NaN, median of samples
        self.judge_samples = judge_samples  # (n,) sample counts


def _categories_for(
    declared: Sequence[float] | None, observed: np.ndarray, label: str, notes: list[str]
) -> list[float]:
    seen = [float(v) for v in np.unique(observed[~np.isnan(observed)])]
    if declared is None:
        return seen
    cats = sorted({float(c) for c in declared})
    extra = [v for v in seen if v not in cats]
    if extra:
        notes.append(
            f"{label}: values {extra} are outside the declared categories {cats}; "
            "they were added to the category set for Gwet's AC2"
        )
        cats = sorted({*cats, *extra})
    return cats


# ---------------------------------------------------------------------------------------------
# Statistics of one block


class _Boot:
    """Bootstrap jobs of one block, run together so that they share one pass over the
    resamples (every bootstrap of a block draws from the same seed)."""

    def __init__(self) -> None:
        self.jobs: list[_stats.BootstrapJob] = []
        self.sinks: list[Any] = []

    def add(self, job: _stats.BootstrapJob, sink: Any) -> None:
        self.jobs.append(job)
        self.sinks.append(sink)

    def run(self, n_boot: int, seed: int) -> None:
        for sink, result in zip(
            self.sinks, _stats.run_bootstrap(self.jobs, n_boot, seed), strict=True
        ):
            sink(result)


def _alpha_block(data: np.ndarray, levels: Sequence[str], boot: _Boot) -> dict:
    """Krippendorff's alpha of a ``units x raters`` array (transposed to raters x units); the
    bootstrap CIs are filled in when ``boot`` runs."""
    job = _stats.alpha_bootstrap_job(data.T, levels)
    out: dict[str, dict[str, Any]] = {
        level: {"value": _stats.krippendorff_alpha(data.T, level), "ci95": None} for level in levels
    }

    def sink(result: dict[str, np.ndarray]) -> None:
        for level in levels:
            out[level]["ci95"] = _stats.percentile_ci(result[level])

    boot.add(job, sink)
    return out


def _ac2_block(data: np.ndarray, cats: list[float]) -> dict:
    return {weights: _stats.gwet_ac2(data, cats, weights) for weights in AC2_WEIGHTS}


def _kappa_block(data: np.ndarray) -> dict[str, Any]:
    raters = int((~np.isnan(data)).any(axis=0).sum())
    if data.shape[1] == 2:
        return {"method": "cohen", "value": _stats.cohen_kappa(data[:, 0], data[:, 1])}
    if raters >= 2:
        return {"method": "fleiss", "value": _stats.fleiss_kappa(data)}
    return {"method": None, "value": float("nan")}


def _rater_stats(
    block: _Block,
    label: str,
    *,
    binary: bool,
    cats: list[float],
    boot: _Boot,
    notes: list[str],
) -> dict[str, Any]:
    h = block.humans
    rated = ~np.isnan(h)
    any_rating = rated.any(axis=1)
    complete = rated.all(axis=1)
    out: dict[str, Any] = {
        "scale": "binary" if binary else "ordinal",
        "categories": cats,
        "raters": block.raters,
        "n_units": int(any_rating.sum()),
        "n_ratings": int(rated.sum()),
        "n_units_complete": int(complete.sum()),
    }
    if complete.sum() < any_rating.sum() and not binary:
        notes.append(
            f"{label}: ICC on complete units only ({int(complete.sum())} of "
            f"{int(any_rating.sum())} units were scored by all {h.shape[1]} raters); "
            "alpha and AC2 use all ratings"
        )
    if binary:
        out["percent_agreement"] = _stats.percent_agreement(h)
        out["kappa"] = _kappa_block(h)
        out["krippendorff_alpha"] = _alpha_block(h, ("nominal",), boot)
        return out
    if h.shape[1] >= 2 and complete.sum() >= 2:
        out["icc"] = _stats.icc_forms(h[complete])
    else:
        out["icc"] = None
        notes.append(f"{label}: ICC needs 2 or more raters and complete units; not computed")
    out["krippendorff_alpha"] = _alpha_block(h, ALPHA_LEVELS, boot)
    out["gwet_ac2"] = _ac2_block(h, cats)
    return out


def _human_medians(h: np.ndarray) -> np.ndarray:
    """Each unit's median over the physicians who scored it (NaN where none did)."""
    with np.errstate(all="ignore"):
        counts = (~np.isnan(h)).sum(axis=1)
        human_median = np.full(h.shape[0], np.nan)
        has_human = counts > 0
        human_median[has_human] = _row_medians(h[has_human], counts[has_human])
    return human_median


def _computed_statistics(
    block: _Block, *, binary: bool, cats: list[float]
) -> dict[str, dict[str, Any]] | None:
    """The registered statistics with a ``compute`` (``register_statistic``) of one block;
    None when none applies (the block then has no ``statistics`` key)."""
    scale = "binary" if binary else "ordinal"
    chosen = [
        s
        for s in computed_statistics()
        if scale in s.scales and (s.comparison == RATERS or block.judge is not None)
    ]
    if not chosen:
        return None
    scores = PairedScores(block.humans, _human_medians(block.humans), block.judge, binary, cats)
    units = {
        RATERS: int((~np.isnan(block.humans)).any(axis=1).sum()),
        JUDGE: int(scores.paired.sum()),
    }
    out: dict[str, dict[str, Any]] = {}
    for statistic in chosen:
        estimate = as_estimate(statistic.compute(scores) if statistic.compute else None)
        out[statistic.name] = {
            "value": estimate.value,
            "ci95": list(estimate.ci95) if estimate.ci95 is not None else None,
            "n_units": units[statistic.comparison]
            if estimate.n_units is None
            else estimate.n_units,
        }
    return out


def _judge_stats(
    block: _Block,
    label: str,
    judge: str,
    *,
    binary: bool,
    cats: list[float],
    boot: _Boot,
    notes: list[str],
) -> dict[str, Any]:
    assert block.judge is not None and block.judge_samples is not None
    h, j = block.humans, block.judge
    human_median = _human_medians(h)
    paired = ~np.isnan(human_median) & ~np.isnan(j)
    samples = block.judge_samples[~np.isnan(j)]
    out: dict[str, Any] = {
        "judge": {
            "rater": judge,
            "n_units": int((~np.isnan(j)).sum()),
            "samples_per_unit": [int(samples.min()), int(samples.max())] if samples.size else None,
        },
    }
    x, y = j[paired], human_median[paired]
    pair = np.column_stack([y, x])  # columns: human median, judge median
    diff = x - y
    if binary:
        out["primary"] = {
            "n_units": int(paired.sum()),
            "percent_agreement": _stats.percent_agreement(pair) if paired.any() else None,
            "kappa": {"method": "cohen", "value": _stats.cohen_kappa(y, x)},
        }
    else:
        primary: dict[str, Any] = {"form": PRIMARY_FORM, "n_units": int(paired.sum())}
        if paired.sum() >= 2:
            primary.update(_stats.icc_forms(pair)[PRIMARY_FORM])
            pair_cats = _categories_for(cats, pair, f"{label} (human median vs judge)", notes)
            primary["krippendorff_alpha"] = _alpha_block(pair, ALPHA_LEVELS, boot)
            primary["gwet_ac2"] = _ac2_block(pair, pair_cats)
        else:
            primary.update(value=None, ci95=[None, None])
            notes.append(f"{label}: fewer than 2 units with both human and judge scores")
        out["primary"] = primary
    out["wilcoxon"] = _stats.wilcoxon_paired(x, y, zero_method="wilcox")
    out["wilcoxon_pratt"] = _stats.wilcoxon_paired(x, y, zero_method="pratt")
    if diff.size:
        q25, q50, q75 = np.percentile(diff, [25, 50, 75])
        out["median_difference"] = float(q50)
        out["iqr"] = float(q75 - q25)
        out["quartiles"] = [float(q25), float(q75)]
    else:
        out.update(median_difference=None, iqr=None, quartiles=[None, None])
    values, counts_ = np.unique(np.round(diff, 9), return_counts=True)
    out["differences"] = {_number_key(v): int(c) for v, c in zip(values, counts_, strict=True)}

    # The judge as a substitute for each human rater and as one more rater.
    complete = (~np.isnan(h)).all(axis=1) & ~np.isnan(j)
    form = "fleiss_kappa" if binary else PRIMARY_FORM
    out["substitution_statistic"] = form
    if h.shape[1] >= 2 and complete.sum() >= 2:
        out["n_units_bootstrap"] = int(complete.sum())
        out["substitution"] = []
        out["added_rater"] = None

        def sink(result: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
            out["substitution"], out["added_rater"] = result

        boot.add(
            _stats.judge_bootstrap_job(h[complete], j[complete], block.raters, form=form), sink
        )
    else:
        out["n_units_bootstrap"] = int(complete.sum())
        out["substitution"] = []
        out["added_rater"] = None
        notes.append(f"{label}: too few complete units or raters for the substitution bootstrap")
    return out


# ---------------------------------------------------------------------------------------------
# Entry point


def _first_seen(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of integer keys numbered in order of first appearance, and the keys in that order."""
    if keys.size == 0:
        return np.zeros(0, dtype=np.int64), keys
    uniques, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inverse.ravel()], uniques[order]


def _encode(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[Any]]:
    """Dictionary codes (first appearance order) and values of a text column; null is -1."""
    encoded = pc.dictionary_encode(column)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, encoded.dictionary.to_pylist()


def _median_grouped(values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The registry's median (``rubrics.get_reducer("median")``) of each sorted group."""
    grouped = get_reducer(DEFAULT_REDUCER).grouped
    assert grouped is not None  # the built-in median has its grouped form
    return np.asarray(grouped(values, starts, counts), dtype=float)


def _row_medians(h: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each row's median over its numbers (``counts`` of them, at least one; NaN elsewhere),
    as np.nanmedian gives it."""
    ordered = np.sort(h, axis=1)  # NaN sorts last: each row's numbers come first
    starts = np.arange(h.shape[0]) * h.shape[1]
    return _median_grouped(ordered.ravel(), starts, counts)


def _cell_medians(keys: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per distinct key: the key, the median of its scores and their count (as np.median)."""
    order = np.lexsort((scores, keys))
    keys, scores = keys[order], scores[order]
    cells, starts, counts = np.unique(keys, return_index=True, return_counts=True)
    return cells, _median_grouped(scores, starts, counts), counts


def ratings_table(records: Sequence[RatingRecord | HumanRating] | pa.Table) -> pa.Table:
    """Ratings as an Arrow table with ``unit_id``, ``rater_id``, ``attribute``, ``score``.

    Args:
        records: ``RatingRecord`` objects, ratings read from a file (``HumanRating``, whose
            ``item_id`` is the unit), or an Arrow table whose unit column is ``item_id`` (as in
            ratings files and the store) or ``unit_id``.
    """
    if isinstance(records, pa.Table):
        if "unit_id" not in records.column_names and "item_id" in records.column_names:
            # Files and the store name the unit item_id; a zero-copy rename.
            names = records.column_names
            records = records.rename_columns(["unit_id" if n == "item_id" else n for n in names])
        missing = {"unit_id", "rater_id", "score"} - set(records.column_names)
        if missing:
            raise UserError(f"ratings table lacks columns {sorted(missing)}")
        attribute = (
            records.column("attribute")
            if "attribute" in records.column_names
            else pa.nulls(records.num_rows, pa.string())
        )
        for name in ("unit_id", "rater_id"):
            if records.column(name).null_count:
                raise UserError(f"ratings table: column {name} has missing values")
        return pa.table(
            {
                "unit_id": records.column("unit_id").cast(pa.string()),
                "rater_id": records.column("rater_id").cast(pa.string()),
                "attribute": attribute.cast(pa.string()),
                "score": records.column("score").cast(pa.float64()),
            }
        )
    return pa.table(
        {
            "unit_id": pa.array(
                [r.item_id if isinstance(r, HumanRating) else r.unit_id for r in records],
                pa.string(),
            ),
            "rater_id": pa.array([r.rater_id for r in records], pa.string()),
            "attribute": pa.array([r.attribute for r in records], pa.string()),
            "score": pa.array([r.score for r in records], pa.float64()),
        }
    )


def _build_blocks(table: pa.Table, judge: str | None, notes: list[str]) -> dict[str | None, _Block]:
    """One block per attribute, in order of first appearance; units and raters likewise.

    A cell (unit, rater) with several scores gets their median; raters with no score in an
    attribute are left out of its block.
    """
    attr, attr_names = _encode(table.column("attribute"))
    unit, unit_names = _encode(table.column("unit_id"))
    rater, rater_names = _encode(table.column("rater_id"))
    score = table.column("score").to_numpy().astype(float)  # null -> NaN
    n_units, n_raters = max(len(unit_names), 1), max(len(rater_names), 1)
    judge_code = rater_names.index(judge) if judge in rater_names else -2
    is_judge = rater == judge_code
    scored = ~np.isnan(score)

    # Block rows: (attribute, unit) pairs in order of first appearance.
    attr1 = attr + 1  # null attribute -> 0
    row, row_keys = _first_seen(attr1 * n_units + unit)
    row_attr, row_unit = row_keys // n_units, row_keys % n_units
    # Block columns: (attribute, human rater) pairs in order of first appearance, kept when
    # the rater scored something in that attribute.
    human = ~is_judge
    col_all, col_keys = _first_seen(attr1[human] * n_raters + rater[human])
    has_score = np.bincount(col_all[scored[human]], minlength=col_keys.size) > 0
    col_keys = col_keys[has_score]
    col_attr, col_rater = col_keys // n_raters, col_keys % n_raters

    cell_keys, medians, counts = _cell_medians(
        row[human & scored] * n_raters + rater[human & scored], score[human & scored]
    )
    repeated = int((counts > 1).sum())
    if repeated:
        notes.append(
            f"{repeated} (unit, human rater) cells hold more than one score; their median is used"
        )
    cell_row, cell_rater = cell_keys // n_raters, cell_keys % n_raters
    judge_rows = judge_medians = judge_counts = None
    if judge is not None:
        judge_rows, judge_medians, judge_counts = _cell_medians(
            row[is_judge & scored], score[is_judge & scored]
        )

    blocks: dict[str | None, _Block] = {}
    for a1 in _first_seen(row_attr)[1]:
        rows = np.flatnonzero(row_attr == a1)  # global row numbers, in block order
        local = np.full(row_keys.size, -1)
        local[rows] = np.arange(rows.size)
        raters = col_rater[col_attr == a1]
        rater_col = np.full(n_raters, -1)
        rater_col[raters] = np.arange(raters.size)
        humans = np.full((rows.size, raters.size), np.nan)
        mine = row_attr[cell_row] == a1
        humans[local[cell_row[mine]], rater_col[cell_rater[mine]]] = medians[mine]
        judge_scores = judge_samples = None
        if judge is not None:
            assert judge_rows is not None and judge_medians is not None and judge_counts is not None
            judge_scores = np.full(rows.size, np.nan)
            judge_samples = np.zeros(rows.size, dtype=int)
            mine = row_attr[judge_rows] == a1
            judge_scores[local[judge_rows[mine]]] = judge_medians[mine]
            judge_samples[local[judge_rows[mine]]] = judge_counts[mine]
        attribute = None if a1 == 0 else str(attr_names[a1 - 1])
        blocks[attribute] = _Block(
            [str(unit_names[u]) for u in row_unit[rows]],
            [str(rater_names[r]) for r in raters],
            humans,
            judge_scores,
            judge_samples,
        )
    return blocks


def _pool(blocks: dict[str, _Block], judge: bool) -> _Block:
    raters = _ordered(r for b in blocks.values() for r in b.raters)
    rows: list[np.ndarray] = []
    judge_rows: list[np.ndarray] = []
    sample_rows: list[np.ndarray] = []
    for b in blocks.values():
        wide = np.full((b.humans.shape[0], len(raters)), np.nan)
        wide[:, [raters.index(rater) for rater in b.raters]] = b.humans
        rows.append(wide)
        if judge:
            assert b.judge is not None and b.judge_samples is not None
            judge_rows.append(b.judge)
            sample_rows.append(b.judge_samples)
    humans = np.vstack(rows) if rows else np.empty((0, len(raters)))
    return _Block(
        None,  # pooled units are (unit, attribute) pairs; nothing downstream names them
        raters,
        humans,
        np.concatenate(judge_rows) if judge else None,
        np.concatenate(sample_rows) if judge else None,
    )


def _analyse_block(
    block: _Block,
    label: str,
    *,
    judge: str | None,
    binary: bool,
    declared: Sequence[float] | None,
    n_boot: int,
    seed: int,
    notes: list[str],
) -> dict[str, Any]:
    cats = _categories_for(declared, block.humans, label, notes)
    boot = _Boot()
    out = _rater_stats(block, label, binary=binary, cats=cats, boot=boot, notes=notes)
    judged = None
    if judge is not None:
        judged = _judge_stats(block, label, judge, binary=binary, cats=cats, boot=boot, notes=notes)
    boot.run(n_boot, seed)  # fills the bootstrap results into out and judged
    result = {**out, **(judged or {})}
    computed = _computed_statistics(block, binary=binary, cats=cats)
    if computed is not None:
        result["statistics"] = computed
    return result


def analyse_ratings(
    records: Sequence[RatingRecord | HumanRating] | pa.Table,
    *,
    judge: str | None = None,
    categories: dict[str, list[float]] | None = None,
    binary_attributes: set[str] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> AgreementAnalysis:
    """Agreement statistics per attribute and pooled over (unit, attribute) pairs.

    Args:
        records: Long-format ratings: ``RatingRecord`` objects, ratings read by
            :func:`clinjudge.inputs.load_ratings`, or an Arrow table with columns ``item_id``
            (or ``unit_id``), ``rater_id``, ``score`` (null for missing) and optionally
            ``attribute`` (columnar input keeps memory low for large studies). Records without
            an attribute form one unnamed block (``per_attribute`` is then empty and only
            ``pooled`` is reported).
        judge: The judge's rater id. Its records for a unit (one per sample) are reduced to
            their median and compared with the median of the human raters.
        categories: Declared category set per attribute (for Gwet's AC2); default: the
            observed values.
        binary_attributes: Attributes on a 0/1 scale, reported with percent agreement and
            kappa instead of ICC and AC2, and left out of the pooled block.
        n_boot: Bootstrap resamples for alpha's CI and the substitution tests.
        seed: Seed for every bootstrap (results are deterministic given the seed).

    Returns:
        ``per_attribute`` (attribute: block), ``pooled`` and ``notes``, NaN read as None.
        Each block's ``physicians_among_themselves`` holds the raters' ICC forms (complete
        units only, ``n_units_complete``), ``krippendorff_alpha`` and ``gwet_ac2`` (all
        ratings); with a judge, ``judge_vs_physicians`` holds ``icc`` (ICC3k of human median
        vs judge median, with alpha and AC2 of the same pair in ``primary``), ``wilcoxon``
        (``wilcox`` zero method) and ``wilcoxon_pratt``, ``median_difference``, ``iqr``,
        ``quartiles``, ``differences`` (judge minus human median: count), ``substitution`` and
        ``added_rater``. ``to_dict()`` gives the flat JSON layout of ``judge agree --json``.
    """
    table = ratings_table(records)
    if table.num_rows == 0:
        raise UserError("no ratings to analyse")
    if n_boot < 1:
        raise UserError("n_boot must be at least 1")
    attributes = set(pc.unique(table.column("attribute")).to_pylist())
    if None in attributes and len(attributes) > 1:
        raise UserError("some ratings have an attribute and some do not")
    binary_attributes = set(binary_attributes or ())
    categories = dict(categories or {})
    unknown = (binary_attributes | set(categories)) - {a for a in attributes if a is not None}
    notes: list[str] = []
    if unknown:
        notes.append(f"attributes {sorted(unknown)} were declared but have no ratings")
    if judge is not None and not pc.any(pc.equal(table.column("rater_id"), judge)).as_py():
        raise UserError(f"judge {judge!r} has no ratings")

    blocks = _build_blocks(table, judge, notes)
    common: dict[str, Any] = {"judge": judge, "n_boot": n_boot, "seed": seed, "notes": notes}
    per_attribute: dict[str, Any] = {}
    if None not in blocks:
        named = {a: b for a, b in blocks.items() if a is not None}  # every block here
        for attribute, block in named.items():
            binary = attribute in binary_attributes
            declared = [0.0, 1.0] if binary else categories.get(attribute)
            per_attribute[attribute] = _analyse_block(
                block, attribute, binary=binary, declared=declared, **common
            )
        pooled_blocks = {a: b for a, b in named.items() if a not in binary_attributes}
        left_out = sorted(a for a in named if a in binary_attributes)
        if left_out and pooled_blocks:
            notes.append(f"pooled: binary attributes {left_out} are left out of the pooled block")
        declared_pool: list[float] | None = None
        if pooled_blocks and all(a in categories for a in pooled_blocks):
            declared_pool = sorted({float(c) for a in pooled_blocks for c in categories[a]})
        pooled_binary = False
        if not pooled_blocks:  # only binary attributes: pool them as binary
            pooled_blocks, pooled_binary, declared_pool = named, True, [0.0, 1.0]
        pooled = _analyse_block(
            _pool(pooled_blocks, judge is not None),
            "pooled",
            binary=pooled_binary,
            declared=declared_pool,
            **common,
        )
        pooled["attributes"] = list(pooled_blocks)
    else:
        pooled = _analyse_block(blocks[None], "pooled", binary=False, declared=None, **common)
        pooled["attributes"] = []
    notes.append(
        "ICC: Shrout & Fleiss forms with F-distribution 95% CIs on units scored by every rater; "
        "Krippendorff's alpha: 95% percentile bootstrap over units; Gwet's AC2: Gwet's "
        "variance-based 95% CI"
    )
    if judge is not None:
        notes.append(
            f"judge {judge!r}: its samples per unit are reduced to their median and compared "
            "with the median of the available human ratings; Wilcoxon signed-rank on judge "
            "minus human median with zero_method 'wilcox' (zero differences dropped, scipy's "
            "default) and 'pratt' as sensitivity; substitution and added-rater changes use "
            f"{n_boot} bootstrap resamples of the complete units, two-tailed p = twice the "
            "smaller tail share of resampled changes on either side of 0 (add-one corrected)"
        )
    return AgreementAnalysis.from_dict(
        _clean({"per_attribute": per_attribute, "pooled": pooled, "notes": notes})
    )
