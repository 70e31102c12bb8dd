"""Agreement statistics, each defined once and registered by name.

A :class:`Statistic` says what an agreement statistic is called, which comparison it belongs to
(the judge against the physicians' median, or the physicians among themselves), how its long
rows (:class:`~clinjudge.analysis.AgreementAnalysis.to_arrow`) are read from an analysis block,
how its table cells are labelled and rounded, which direction is better and its help line.
``judge agree`` (terminal and ``--json``), ``judge compare``, ``report.html``/``report.md``,
the pages of ``judge view`` and the long table all render what the registry holds, in its
order, so a new statistic is one :func:`register_statistic` call (in a module of its own or a
plugin) and nothing else::

    register_statistic(
        Statistic(
            name="mean_difference",
            label="mean diff",
            help="Mean of judge minus physicians' median.",
            compute=lambda s: float((s.judge_paired - s.reference_paired).mean()),
            digits=2,
        )
    )

A statistic with ``compute`` is computed by :func:`clinjudge.analysis.analyse_ratings` from the
block's :class:`PairedScores` and kept in the block's ``statistics`` (``--json``). The built-in
statistics are computed together by ``analyse_ratings`` (they share one bootstrap pass), so
their definitions below only read their typed fields.

This module imports nothing heavy: a ``compute`` loads what it needs when it runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from clinjudge.analysis._columns import SORT_COLUMNS

if TYPE_CHECKING:
    import numpy as np

    from clinjudge.analysis._agreement_result import AttributeAgreement, StatisticRow

JUDGE = "judge_vs_physicians"
RATERS = "physicians_among_themselves"
COMPARISONS = (RATERS, JUDGE)
"""The two comparisons, in the order of the long rows."""

Table = Literal["agree", "raters", "report", "viewer", "compare", "viewer_compare"]
"""Where a column shows: ``agree`` (the judge's terminal table of ``judge agree``), ``raters``
(``judge agree --ratings FILE`` without ``--judge``), ``report`` (the per-attribute agreement
table of ``report.html`` and ``report.md``), ``viewer`` (the agreement table of a run's page
in ``judge view``, which rounds with ``digits`` and shows p values as numbers too), and the
pooled block's value per run in ``judge compare`` and the report's configuration table
(``compare``) and on the viewer's compare page (``viewer_compare``, an interval in the value's
cell)."""

DEFAULT_TABLES: frozenset[str] = frozenset(
    {"agree", "report", "viewer", "compare", "viewer_compare"}
)
LAST = 1000
"""The default column position: after the built-in columns."""

RowMaker = Callable[..., "StatisticRow"]
"""``row(statistic, value, ci95, n_units, *, rater=None)``: one long row of a block."""


@dataclasses.dataclass(frozen=True)
class PairedScores:
    """What a registered ``compute`` sees of one block (an attribute, or pooled).

    Args:
        humans: Units x physicians, NaN where a physician did not score a unit.
        reference: The physicians' median per unit (NaN where no physician scored it).
        judge: The judge's value per unit (its samples reduced; NaN where none), or None when
            no judge was named.
        binary: Whether the scale is binary.
        categories: The scale points.
    """

    humans: np.ndarray
    reference: np.ndarray
    judge: np.ndarray | None
    binary: bool
    categories: list[float]

    @property
    def paired(self) -> np.ndarray:
        """Mask of the units with both a judge value and a physicians' median."""
        import numpy as np

        if self.judge is None:
            return np.zeros(self.reference.shape, dtype=bool)
        return ~np.isnan(self.reference) & ~np.isnan(self.judge)

    @property
    def judge_paired(self) -> np.ndarray:
        """The judge's values of the paired units."""
        assert self.judge is not None, "no judge in this analysis"
        return self.judge[self.paired]

    @property
    def reference_paired(self) -> np.ndarray:
        """The physicians' medians of the paired units."""
        return self.reference[self.paired]


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A computed statistic: its value, optional 95% CI and the units it used."""

    value: float | None
    ci95: tuple[float | None, float | None] | None = None
    n_units: int | None = None


Compute = Callable[[PairedScores], "Estimate | float | None"]
Rows = Callable[["AttributeAgreement", RowMaker], Iterable["StatisticRow"]]


@dataclasses.dataclass(frozen=True)
class Column:
    """One table column that shows a statistic's value.

    Args:
        label: The column header.
        statistic: The long rows' ``statistic`` names it reads (the first one present).
        comparison: The comparison whose rows it reads.
        tables: The tables it shows in (see :data:`Table`).
        position: Its place among the columns (lower first; ties keep registration order).
        digits: Decimals shown.
        p_value: Shown as a p value (``<0.001``).
        ci: Followed by a ``95% CI`` column.
        required: Scales where a missing value reads ``undefined`` in ``judge agree``'s table,
            with a note giving the reason.
        word: How that note names it (default: ``label``).
        key: Compare tables: the key of the pooled value in ``judge compare --json`` rows
            (default: the first of ``statistic``; ``KEY_ci95`` holds the interval).
    """

    label: str
    statistic: tuple[str, ...]
    comparison: str = JUDGE
    tables: frozenset[str] = DEFAULT_TABLES
    position: int = LAST
    digits: int = 3
    p_value: bool = False
    ci: bool = False
    required: frozenset[str] = frozenset()
    word: str | None = None
    key: str | None = None

    @property
    def compare_key(self) -> str:
        """The key of its pooled value in ``judge compare --json`` rows."""
        return self.key or self.statistic[0]


@dataclasses.dataclass(frozen=True)
class Statistic:
    """One agreement statistic.

    Args:
        name: Its name: the long rows' ``statistic`` and the key of ``statistics`` in
            ``--json`` (statistics with ``compute``).
        help: One line saying what it is.
        label: The header of its column (None: no column, or the ``columns`` given).
        comparison: ``judge_vs_physicians`` or ``physicians_among_themselves``.
        compute: How it is computed from a block's :class:`PairedScores` (None for the
            built-in statistics, computed by ``analyse_ratings``).
        rows: How its long rows are read from a block (default: the computed value).
        digits: Decimals shown in its column.
        p_value: Shown as a p value.
        higher_is_better: True when larger is better, False when smaller is, None when neither
            (a difference, a p value).
        tables: The tables its column shows in.
        position: Its column's place (see :class:`Column`).
        scales: The scales it is computed on (``ordinal``, ``binary``).
        columns: Its columns, where ``label`` is not enough (several, or other rows').
    """

    name: str
    help: str
    label: str | None = None
    comparison: str = JUDGE
    compute: Compute | None = None
    rows: Rows | None = None
    digits: int = 3
    p_value: bool = False
    higher_is_better: bool | None = None
    tables: frozenset[str] = DEFAULT_TABLES
    position: int = LAST
    scales: frozenset[str] = frozenset({"ordinal", "binary"})
    columns: tuple[Column, ...] = ()

    def table_columns(self) -> tuple[Column, ...]:
        """Its columns: ``columns``, or one from ``label``."""
        if self.columns or self.label is None:
            return self.columns
        column = Column(
            self.label,
            (self.name,),
            comparison=self.comparison,
            tables=self.tables,
            position=self.position,
            digits=self.digits,
            p_value=self.p_value,
        )
        return (column,)

    def block_rows(self, block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
        """Its long rows of one block."""
        if self.rows is not None:
            yield from self.rows(block, row)
            return
        computed = (block.statistics or {}).get(self.name)
        if computed is not None:
            yield row(self.name, computed.value, computed.ci95, computed.n_units)


_STATISTICS: dict[str, Statistic] = {}


def register_statistic(statistic: Statistic) -> None:
    """Add a statistic to the registry (replacing one of the same name, in its place).

    Args:
        statistic: The statistic.
    """
    if statistic.comparison not in COMPARISONS:
        raise ValueError(f"comparison must be one of {', '.join(COMPARISONS)}")
    _STATISTICS[statistic.name] = statistic


def unregister_statistic(name: str) -> None:
    """Remove a registered statistic (a plugin's, a test's).

    Args:
        name: Its name.
    """
    _STATISTICS.pop(name, None)


def statistic_names() -> list[str]:
    """Names of the registered statistics, in registration order."""
    return list(_STATISTICS)


def get_statistic(name: str) -> Statistic:
    """The registered statistic of this name.

    Args:
        name: Its name.

    Raises:
        ValueError: No statistic of that name (the message lists the registered ones).
    """
    try:
        return _STATISTICS[name]
    except KeyError:
        known = ", ".join(_STATISTICS)
        raise ValueError(f"unknown statistic {name!r}; registered statistics: {known}") from None


def statistics_of(comparison: str) -> list[Statistic]:
    """The registered statistics of one comparison, in registration order."""
    return [s for s in _STATISTICS.values() if s.comparison == comparison]


def computed_statistics() -> list[Statistic]:
    """The registered statistics that ``analyse_ratings`` computes through ``compute``."""
    return [s for s in _STATISTICS.values() if s.compute is not None]


def table_columns(table: str) -> list[Column]:
    """The columns of one table (see :data:`Table`), in position order."""
    columns = [c for s in _STATISTICS.values() for c in s.table_columns() if table in c.tables]
    return sorted(columns, key=lambda c: c.position)  # stable: ties keep registration order


Lookup = dict[tuple[str, str], "StatisticRow"]
"""A block's long rows by (comparison, statistic)."""


def block_rows(block: AttributeAgreement, name: str) -> Lookup:
    """A block's long rows by (comparison, statistic): what table cells read.

    Args:
        block: The analysis block (an attribute, or pooled).
        name: Its name in the rows (the attribute, or ``pooled``).
    """
    return {(r["comparison"], r["statistic"]): r for r in block.statistic_rows(name)}


def column_row(column: Column, rows: Lookup) -> StatisticRow | None:
    """The row a column shows (the first of its statistics present), or None."""
    for statistic in column.statistic:
        row = rows.get((column.comparison, statistic))
        if row is not None:
            return row
    return None


def compare_values(block: AttributeAgreement | None) -> dict[str, Any]:
    """The pooled values of the compare tables' columns (``judge compare --json`` keys): each
    column's value, and its ``KEY_ci95`` where it has an interval (None without a block)."""
    rows = block_rows(block, "pooled") if block is not None else {}
    out: dict[str, Any] = {}
    for table in ("compare", "viewer_compare"):
        for column in table_columns(table):
            row = column_row(column, rows)
            out[column.compare_key] = row["value"] if row else None
            if column.ci:
                out[f"{column.compare_key}_ci95"] = [row["ci_low"], row["ci_high"]] if row else None
    return out


def sort_columns() -> dict[str, bool]:
    """What ``judge compare --sort`` takes: the fixed columns (``SORT_COLUMNS``), then each
    registered compare column whose statistic has a better direction (True: larger first)."""
    out = dict(SORT_COLUMNS)
    for statistic in _STATISTICS.values():
        if statistic.higher_is_better is None:
            continue
        for column in statistic.table_columns():
            if "compare" in column.tables:
                out.setdefault(column.compare_key, statistic.higher_is_better)
    return out


def as_estimate(result: Estimate | float | None) -> Estimate:
    """A ``compute`` result as an :class:`Estimate` (a bare number is its value)."""
    if isinstance(result, Estimate):
        return result
    return Estimate(None if result is None else float(result))


# -- the built-in statistics ---------------------------------------------------------------------
# Their rows come in this order (physicians' first, then the judge's): the long table's order.


def _raters_icc(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    phys = block.physicians_among_themselves
    for form, stat in (phys.icc_forms or {}).items():
        yield row(form, stat.value, stat.ci95, phys.n_units_complete)


def _raters_alpha(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    phys = block.physicians_among_themselves
    for level, stat in (phys.krippendorff_alpha or {}).items():
        yield row(f"krippendorff_alpha_{level}", stat.value, stat.ci95, phys.n_units)


def _raters_ac2(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    phys = block.physicians_among_themselves
    for weights, ac2 in (phys.gwet_ac2 or {}).items():
        yield row(f"gwet_ac2_{weights}", ac2.value, ac2.ci95, phys.n_units)


def _raters_percent(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    phys = block.physicians_among_themselves
    if phys.percent_agreement is not None or block.binary:
        yield row("percent_agreement", phys.percent_agreement, None, phys.n_units)


def _raters_kappa(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    phys = block.physicians_among_themselves
    if phys.kappa is not None:
        yield row(f"{phys.kappa.method or 'none'}_kappa", phys.kappa.value, None, phys.n_units)


def _judge_icc(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    judge = block.judge_vs_physicians
    icc = judge.icc if judge else None
    if judge is not None and icc is not None:
        yield row(judge.primary.form or "ICC3k", icc.value, icc.ci95, judge.n_units)


def _judge_alpha(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    judge = block.judge_vs_physicians
    if judge is not None:
        for level, stat in judge.krippendorff_alpha.items():
            yield row(f"krippendorff_alpha_{level}", stat.value, stat.ci95, judge.n_units)


def _judge_ac2(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    judge = block.judge_vs_physicians
    if judge is not None:
        for weights, ac2 in judge.gwet_ac2.items():
            yield row(f"gwet_ac2_{weights}", ac2.value, ac2.ci95, judge.n_units)


def _judge_percent(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    judge = block.judge_vs_physicians
    if judge is not None and block.binary:
        yield row("percent_agreement", judge.percent_agreement, None, judge.n_units)


def _judge_kappa(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    judge = block.judge_vs_physicians
    if judge is not None and block.binary:
        kappa = judge.kappa
        yield row("cohen_kappa", kappa.value if kappa else None, None, judge.n_units)


def _judge_field(field: str) -> Rows:
    """Rows of a plain number field of the judge's part (``median_difference``, ``iqr``)."""

    def rows(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
        judge = block.judge_vs_physicians
        if judge is not None:
            yield row(field, getattr(judge, field), None, judge.n_units)

    return rows


def _judge_test(field: str) -> Rows:
    """Rows of a Wilcoxon test's p (``wilcoxon``, ``wilcoxon_pratt``)."""

    def rows(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
        judge = block.judge_vs_physicians
        test = getattr(judge, field) if judge else None
        if test is not None:
            yield row(f"{field}_p", test.p, None, test.n_pairs)

    return rows


def _substitution(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    judge = block.judge_vs_physicians
    if judge is None:
        return
    for change in judge.substitution:
        yield row(
            "substitution_delta",
            change.delta_icc,
            change.ci95,
            judge.n_units_bootstrap,
            rater=change.rater,
        )


def _added_rater(block: AttributeAgreement, row: RowMaker) -> Iterator[StatisticRow]:
    judge = block.judge_vs_physicians
    if judge is not None and judge.added_rater is not None:
        added = judge.added_rater
        yield row("added_rater_delta", added.delta_icc, added.ci95, judge.n_units_bootstrap)


_ORDINAL = frozenset({"ordinal"})
_BINARY = frozenset({"binary"})
_REPORT = frozenset({"report"})
_RATERS_TABLE = frozenset({"raters"})
_ALL_TABLES = frozenset({"agree", "report"})
_VIEWER = frozenset({"viewer"})
_COMPARE = frozenset({"compare"})
_VIEWER_COMPARE = frozenset({"viewer_compare"})


def _builtins() -> Sequence[Statistic]:
    return (
        Statistic(
            "raters_icc",
            "Shrout & Fleiss ICC forms (ICC1 ... ICC3k) of the physicians, on units every "
            "physician scored, with F-distribution 95% CIs.",
            comparison=RATERS,
            rows=_raters_icc,
            higher_is_better=True,
            columns=(
                Column("ICC(3,k)", ("ICC3k",), RATERS, _RATERS_TABLE, 10, ci=True),
                Column("raters' ICC(3,k)", ("ICC3k",), RATERS, _REPORT, 90),
            ),
        ),
        Statistic(
            "raters_krippendorff_alpha",
            "Krippendorff's alpha per level of measurement, bootstrap 95% CI.",
            comparison=RATERS,
            rows=_raters_alpha,
            higher_is_better=True,
            columns=(
                Column("alpha ord.", ("krippendorff_alpha_ordinal",), RATERS, _RATERS_TABLE, 20),
            ),
        ),
        Statistic(
            "raters_gwet_ac2",
            "Gwet's AC2 per weighting, variance-based 95% CI.",
            comparison=RATERS,
            rows=_raters_ac2,
            higher_is_better=True,
            columns=(Column("AC2 ord.", ("gwet_ac2_ordinal",), RATERS, _RATERS_TABLE, 30),),
        ),
        Statistic(
            "raters_percent_agreement",
            "Share of units the physicians agree on (binary scales).",
            comparison=RATERS,
            rows=_raters_percent,
            higher_is_better=True,
            columns=(Column("% agree", ("percent_agreement",), RATERS, _RATERS_TABLE, 70),),
        ),
        Statistic(
            "raters_kappa",
            "Cohen's kappa (two physicians) or Fleiss' kappa (more), binary scales.",
            comparison=RATERS,
            rows=_raters_kappa,
            higher_is_better=True,
            columns=(
                Column(
                    "kappa",
                    ("cohen_kappa", "fleiss_kappa", "none_kappa"),
                    RATERS,
                    _RATERS_TABLE,
                    80,
                ),
            ),
        ),
        Statistic(
            "icc3k",
            "ICC(3,k) of the judge against the physicians' median, F-distribution 95% CI.",
            rows=_judge_icc,
            higher_is_better=True,
            columns=(
                Column(
                    "ICC(3,k)",
                    ("ICC3k",),
                    tables=_ALL_TABLES,
                    position=10,
                    ci=True,
                    required=_ORDINAL,
                ),
                Column("ICC(3,k)", ("ICC3k",), tables=_VIEWER, position=10, ci=True),
                Column("ICC(3,k)", ("ICC3k",), tables=_COMPARE, position=10, ci=True, key="icc3k"),
                Column(
                    "ICC(3,k) [95% CI]",
                    ("ICC3k",),
                    tables=_VIEWER_COMPARE,
                    position=10,
                    ci=True,
                    key="icc3k",
                ),
            ),
        ),
        Statistic(
            "krippendorff_alpha",
            "Krippendorff's alpha of the judge and the physicians' median, bootstrap 95% CI.",
            rows=_judge_alpha,
            higher_is_better=True,
            columns=(
                Column(
                    "alpha ord.",
                    ("krippendorff_alpha_ordinal",),
                    tables=_ALL_TABLES,
                    position=20,
                    required=_ORDINAL,
                    word="alpha",
                ),
                Column("α ordinal", ("krippendorff_alpha_ordinal",), tables=_VIEWER, position=20),
                Column(
                    "alpha ord.",
                    ("krippendorff_alpha_ordinal",),
                    tables=_COMPARE,
                    position=20,
                    key="alpha_ordinal",
                ),
                Column(
                    "α ordinal",
                    ("krippendorff_alpha_ordinal",),
                    tables=_VIEWER_COMPARE,
                    position=20,
                    key="alpha_ordinal",
                ),
            ),
        ),
        Statistic(
            "gwet_ac2",
            "Gwet's AC2 of the judge and the physicians' median.",
            rows=_judge_ac2,
            higher_is_better=True,
            columns=(
                Column(
                    "AC2 ord.",
                    ("gwet_ac2_ordinal",),
                    tables=_ALL_TABLES,
                    position=30,
                    required=_ORDINAL,
                    word="AC2",
                ),
                Column("AC2 ordinal", ("gwet_ac2_ordinal",), tables=_VIEWER, position=30),
                Column(
                    "AC2 ord.",
                    ("gwet_ac2_ordinal",),
                    tables=_COMPARE,
                    position=30,
                    key="ac2_ordinal",
                ),
                Column(
                    "AC2 ordinal",
                    ("gwet_ac2_ordinal",),
                    tables=_VIEWER_COMPARE,
                    position=30,
                    key="ac2_ordinal",
                ),
            ),
        ),
        Statistic(
            "percent_agreement",
            "Share of units where the judge and the physicians' median agree (binary).",
            rows=_judge_percent,
            higher_is_better=True,
            columns=(
                Column(
                    "% agree",
                    ("percent_agreement",),
                    tables=_ALL_TABLES,
                    position=70,
                    required=_BINARY,
                ),
                Column("% agreement", ("percent_agreement",), tables=_VIEWER, position=70),
            ),
        ),
        Statistic(
            "cohen_kappa",
            "Cohen's kappa of the judge and the physicians' median (binary).",
            rows=_judge_kappa,
            higher_is_better=True,
            columns=(
                Column(
                    "kappa", ("cohen_kappa",), tables=_ALL_TABLES, position=80, required=_BINARY
                ),
                Column("κ", ("cohen_kappa",), tables=_VIEWER, position=80),
            ),
        ),
        Statistic(
            "median_difference",
            "Median of judge minus the physicians' median.",
            label="median diff",
            rows=_judge_field("median_difference"),
            digits=2,
            tables=frozenset({"agree", "report", "viewer"}),
            position=40,
        ),
        Statistic(
            "iqr",
            "Interquartile range of judge minus the physicians' median.",
            label="IQR",
            rows=_judge_field("iqr"),
            digits=2,
            tables=_REPORT,
            position=50,
        ),
        Statistic(
            "wilcoxon_p",
            "Wilcoxon signed-rank p of judge minus the physicians' median (zero differences "
            "dropped).",
            rows=_judge_test("wilcoxon"),
            columns=(
                Column(
                    "Wilcoxon p", ("wilcoxon_p",), tables=_ALL_TABLES, position=60, p_value=True
                ),
                Column("Wilcoxon p", ("wilcoxon_p",), tables=_VIEWER, position=60, digits=4),
            ),
        ),
        Statistic(
            "wilcoxon_pratt_p",
            "Wilcoxon signed-rank p with Pratt's handling of zero differences (sensitivity).",
            rows=_judge_test("wilcoxon_pratt"),
        ),
        Statistic(
            "substitution_delta",
            "Change in the physicians' ICC(3,k) when the judge replaces each physician "
            "(bootstrap 95% CI).",
            rows=_substitution,
            higher_is_better=True,
        ),
        Statistic(
            "added_rater_delta",
            "Change in the physicians' ICC(3,k) when the judge joins as one more rater.",
            rows=_added_rater,
            higher_is_better=True,
        ),
    )


for _statistic in _builtins():
    register_statistic(_statistic)
