"""Typed agreement results: each attribute's (and the pooled block's) judge-vs-physicians and
physicians-among-themselves statistics under their own names, so the two cannot be mixed up.

``to_dict()`` gives the flat layout that ``judge agree --json`` has always printed (and the
store's agreement cache keeps): one object per attribute holding both parts side by side.
The long rows (``to_arrow()``) are each registered statistic's (:mod:`._statistics`), in the
registry's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypedDict

from pydantic import Field

from clinjudge.analysis._result_base import Result, arrow_table, to_pandas
from clinjudge.analysis._statistics import COMPARISONS, JUDGE, statistics_of
from clinjudge.rubrics import DEFAULT_REDUCER

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

PRIMARY_FORM = "ICC3k"


class Interval(Result):
    """A statistic with its 95% confidence interval (``None`` where undefined)."""

    value: float | None = None
    ci95: list[float | None] | None = None


class AC2(Result):
    """Gwet's AC2 with its standard error and 95% CI (fields in the order of ``--json``)."""

    value: float | None = None
    se: float | None = None
    ci95: list[float | None] | None = None


class Kappa(Result):
    """Cohen's (two raters) or Fleiss' (more) kappa."""

    method: str | None = None
    value: float | None = None


class Wilcoxon(Result):
    """Wilcoxon signed-rank test of judge minus the physicians' median."""

    statistic: float | None = None
    p: float | None = None
    zero_method: str | None = None
    method: str | None = None
    n_pairs: int = 0
    n_zero_differences: int = 0


class RaterChange(Result):
    """Change in the physicians' ICC (or Fleiss' kappa) when the judge replaces ``rater``
    (``rater`` None: when the judge joins as one more rater), with a bootstrap CI and p."""

    rater: str | None = None
    icc_base: float | None = None
    icc_with_judge: float | None = None
    delta_icc: float | None = None
    ci95: list[float | None] | None = None
    p: float | None = None


class JudgeInfo(Result):
    """The judge as a rater: its id, units scored and samples per unit (min, max)."""

    rater: str
    n_units: int = 0
    samples_per_unit: list[int] | None = None


class Primary(Result):
    """The judge's median against the physicians' median, unit by unit."""

    form: str | None = None
    n_units: int = 0
    value: float | None = None
    ci95: list[float | None] | None = None
    krippendorff_alpha: dict[str, Interval] | None = None
    gwet_ac2: dict[str, AC2] | None = None
    percent_agreement: float | None = None
    kappa: Kappa | None = None


class PhysiciansAgreement(Result):
    """The physicians among themselves (no judge): ICC forms on units every physician scored,
    Krippendorff's alpha and Gwet's AC2 on all ratings; binary scales get percent agreement
    and kappa instead of ICC and AC2."""

    raters: list[str] = []
    n_units: int = 0
    n_ratings: int = 0
    n_units_complete: int = 0
    percent_agreement: float | None = None
    kappa: Kappa | None = None
    icc_forms: dict[str, Interval] | None = Field(default=None, alias="icc")
    krippendorff_alpha: dict[str, Interval] | None = None
    gwet_ac2: dict[str, AC2] | None = None

    @property
    def icc(self) -> Interval | None:
        """The physicians' ICC(3,k) among themselves (``icc_forms`` has all six forms)."""
        return (self.icc_forms or {}).get(PRIMARY_FORM)


class JudgeVsPhysicians(Result):
    """The judge (median of its samples) against the physicians' median."""

    judge: JudgeInfo | None = None
    primary: Primary
    wilcoxon: Wilcoxon | None = None
    wilcoxon_pratt: Wilcoxon | None = None
    median_difference: float | None = None
    iqr: float | None = None
    quartiles: list[float | None] | None = None
    differences: dict[str, int] = {}
    substitution_statistic: str | None = None
    n_units_bootstrap: int = 0
    substitution: list[RaterChange] = []
    added_rater: RaterChange | None = None

    @property
    def icc(self) -> Interval | None:
        """ICC(3,k) of the judge's median against the physicians' median (None for binary
        attributes, which have ``kappa`` and ``percent_agreement``)."""
        if self.primary.form is None:
            return None
        return Interval(value=self.primary.value, ci95=self.primary.ci95)

    @property
    def n_units(self) -> int:
        """Units with both a judge score and a physician's score."""
        return self.primary.n_units

    @property
    def krippendorff_alpha(self) -> dict[str, Interval]:
        """Alpha of the (physicians' median, judge) pair per level of measurement."""
        return self.primary.krippendorff_alpha or {}

    @property
    def gwet_ac2(self) -> dict[str, AC2]:
        """AC2 of the (physicians' median, judge) pair per weighting."""
        return self.primary.gwet_ac2 or {}

    @property
    def percent_agreement(self) -> float | None:
        """Binary attributes: share of units where judge and physicians' median agree."""
        return self.primary.percent_agreement

    @property
    def kappa(self) -> Kappa | None:
        """Binary attributes: Cohen's kappa of judge and physicians' median."""
        return self.primary.kappa


_JUDGE_KEYS = tuple(f.alias or name for name, f in JudgeVsPhysicians.model_fields.items())
_PHYSICIAN_KEYS = tuple(f.alias or name for name, f in PhysiciansAgreement.model_fields.items())


class ComputedStatistic(Result):
    """A registered statistic's value in one block (``statistics`` of ``--json``)."""

    value: float | None = None
    ci95: list[float | None] | None = None
    n_units: int | None = None


class AttributeAgreement(Result):
    """One attribute's agreement (or the pooled block's).

    Args:
        scale: ``ordinal`` or ``binary``.
        categories: The scale points used for AC2 and alpha.
        physicians_among_themselves: The physicians' agreement with each other.
        judge_vs_physicians: The judge against the physicians' median (None without a judge).
        attributes: Pooled block only: the attributes pooled.
        statistics: Name to value of each registered statistic with a ``compute`` (none
            are built in: the key is absent unless one is registered).
    """

    scale: str
    categories: list[float] = []
    physicians_among_themselves: PhysiciansAgreement
    judge_vs_physicians: JudgeVsPhysicians | None = None
    attributes: list[str] | None = None
    statistics: dict[str, ComputedStatistic] | None = None

    @property
    def binary(self) -> bool:
        """Whether the scale is binary (percent agreement and kappa, no ICC)."""
        return self.scale == "binary"

    @classmethod
    def from_dict(cls, flat: dict[str, Any]) -> AttributeAgreement:
        """Read the flat layout of ``--json`` (both parts' keys in one object)."""
        physicians = {k: v for k, v in flat.items() if k in _PHYSICIAN_KEYS}
        judged = {k: v for k, v in flat.items() if k in _JUDGE_KEYS}
        data: dict[str, Any] = {
            k: v
            for k, v in flat.items()
            if k not in _PHYSICIAN_KEYS and k not in _JUDGE_KEYS  # scale, categories, ...
        }
        data["physicians_among_themselves"] = PhysiciansAgreement.model_validate(physicians)
        if judged:
            data["judge_vs_physicians"] = JudgeVsPhysicians.model_validate(judged)
        return cls.model_validate(data)

    def to_dict(self) -> dict[str, Any]:
        """The flat layout of ``--json``: the physicians' keys, then the judge's."""
        out: dict[str, Any] = {"scale": self.scale, "categories": list(self.categories)}
        out.update(self.physicians_among_themselves.to_dict())
        if self.judge_vs_physicians is not None:
            out.update(self.judge_vs_physicians.to_dict())
        for key, value in (self.model_extra or {}).items():
            out[key] = value
        if self.statistics is not None:
            out["statistics"] = {k: v.to_dict() for k, v in self.statistics.items()}
        if "attributes" in self.model_fields_set:
            out["attributes"] = self.attributes
        return out

    def statistic_rows(self, attribute: str) -> Iterator[StatisticRow]:
        """Tidy rows (see :meth:`AgreementAnalysis.to_arrow`) of this block: each registered
        statistic's (``analysis.register_statistic``), the physicians' first."""
        for comparison in COMPARISONS:
            if comparison == JUDGE and self.judge_vs_physicians is None:
                return
            row = _row_maker(attribute, comparison)
            for statistic in statistics_of(comparison):
                yield from statistic.block_rows(self, row)


class StatisticRow(TypedDict):
    """One row of :meth:`AgreementAnalysis.to_arrow`."""

    attribute: str
    comparison: str
    statistic: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n_units: int | None
    rater: str | None


def _row_maker(attribute: str, comparison: str) -> Callable[..., StatisticRow]:
    def row(
        statistic: str,
        value: float | None,
        ci95: list[float | None] | None,
        n_units: int | None,
        *,
        rater: str | None = None,
    ) -> StatisticRow:
        lo, hi = (list(ci95) + [None, None])[:2] if ci95 else (None, None)
        return StatisticRow(
            attribute=attribute,
            comparison=comparison,
            statistic=statistic,
            value=value,
            ci_low=lo,
            ci_high=hi,
            n_units=n_units,
            rater=rater,
        )

    return row


def _schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("attribute", pa.string()),
            ("comparison", pa.string()),
            ("statistic", pa.string()),
            ("value", pa.float64()),
            ("ci_low", pa.float64()),
            ("ci_high", pa.float64()),
            ("n_units", pa.int64()),
            ("rater", pa.string()),
        ]
    )


class AgreementAnalysis(Result):
    """Agreement per attribute and pooled (what :func:`analyse_ratings` returns).

    Args:
        per_attribute: Attribute name to its agreement, in rubric (or first-seen) order.
        pooled: The pooled block over (unit, attribute) pairs (Likert attributes only when
            there are any).
        notes: Methods and caveats, in words.
    """

    per_attribute: dict[str, AttributeAgreement] = {}
    pooled: AttributeAgreement
    notes: list[str] = []

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgreementAnalysis:
        """Read the layout of ``--json`` (and of the store's agreement cache)."""
        return cls.model_validate(_typed_blocks(data))

    def to_dict(self) -> dict[str, Any]:
        """The layout of ``judge agree --json``."""
        out = super().to_dict()
        out["per_attribute"] = {k: b.to_dict() for k, b in self.per_attribute.items()}
        out["pooled"] = self.pooled.to_dict()
        return out

    def blocks(self) -> list[tuple[str, AttributeAgreement]]:
        """Each attribute's block, then ``("pooled", pooled)``."""
        return [*self.per_attribute.items(), ("pooled", self.pooled)]

    def to_arrow(self) -> pa.Table:
        """A tidy table: one row per block (attribute or ``pooled``), comparison and statistic.

        Columns: ``attribute``; ``comparison`` (``judge_vs_physicians`` or
        ``physicians_among_themselves``); ``statistic`` (``ICC1`` ... ``ICC3k``,
        ``krippendorff_alpha_<level>``, ``gwet_ac2_<weights>``, ``percent_agreement``,
        ``cohen_kappa``/``fleiss_kappa``, and for the judge ``median_difference``, ``iqr``,
        ``wilcoxon_p``, ``wilcoxon_pratt_p``, ``substitution_delta`` (one row per replaced
        ``rater``) and ``added_rater_delta``, then each statistic registered with
        ``analysis.register_statistic``); ``value``; ``ci_low`` and ``ci_high`` (95%, null where
        the statistic has none); ``n_units``; ``rater`` (substitution rows only).
        """
        rows = [r for name, block in self.blocks() for r in block.statistic_rows(name)]
        return arrow_table(rows, _schema())

    def to_pandas(self) -> pd.DataFrame:
        """:meth:`to_arrow` as a pandas DataFrame (needs pandas)."""
        return to_pandas(self.to_arrow())


def _typed_blocks(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data)
    out["per_attribute"] = {
        k: AttributeAgreement.from_dict(v) for k, v in (data.get("per_attribute") or {}).items()
    }
    out["pooled"] = AttributeAgreement.from_dict(data["pooled"])
    return out


class MeanAbsDifference(Result):
    """Mean |judge - physicians' median| per attribute, and pooled over Likert attributes."""

    per_attribute: dict[str, float | None] = {}
    pooled: float | None = None


class AgreementResult(AgreementAnalysis):
    """A run's agreement with the physicians' ratings in its store (``judge agree RUN``).

    Read ``per_attribute[name].judge_vs_physicians.icc`` for the judge's ICC(3,k) against the
    physicians' median and ``per_attribute[name].physicians_among_themselves.icc`` for the
    physicians' ICC(3,k) among themselves; ``pooled`` has the same two parts.
    """

    run_id: str
    name: str | None = None
    rubric: str | None = None
    mode: str | None = None
    model: str | None = None
    simulated: bool = False
    judge_rater: str | None = None
    judge_value: str | None = None
    reducer: str = DEFAULT_REDUCER
    """How the judge's samples became its final scores (set only when not the median)."""
    raters: list[str] = []
    n_items_run: int = 0
    n_items_rated: int = 0
    n_human_ratings: int = 0
    n_judge_units: int = 0
    attributes: list[str] = []
    binary_attributes: list[str] = []
    n_boot: int = 0
    seed: int = 0
    cached: bool = False
    mean_abs_difference: MeanAbsDifference | None = None
    samples_warning: str | None = None
    suspect_warning: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgreementResult:
        """Read the layout of ``judge agree RUN --json``."""
        return cls.model_validate(_typed_blocks(data))

    def to_dict(self) -> dict[str, Any]:
        """The layout of ``judge agree RUN --json`` (run fields, then the analysis)."""
        out = super().to_dict()
        first = [k for k in out if k not in ("per_attribute", "pooled", "notes")]
        tail = ("mean_abs_difference", "samples_warning", "suspect_warning")
        order = [k for k in first if k not in tail] + ["per_attribute", "pooled", "notes"]
        return {k: out[k] for k in [*order, *[k for k in tail if k in out]] if k in out}
