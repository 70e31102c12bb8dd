"""Table cells of the registered agreement statistics (``analysis.register_statistic``).

The terminal tables of ``judge agree`` and the agreement table of ``report.html``/``report.md``
lay out the registry's columns of their table in its order and read each cell from the long
rows of the block (``AttributeAgreement.statistic_rows``), so a registered statistic shows in
every table it names without an edit here. Kept apart from the report writer so that
``judge agree`` loads only the number formats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clinjudge.analysis import block_rows, column_row
from clinjudge.reports._document import fmt_ci, fmt_num, fmt_p

if TYPE_CHECKING:
    from clinjudge.analysis import (
        AgreementAnalysis,
        AttributeAgreement,
        Column,
        ComparisonRow,
        StatisticRow,
    )


def column_headers(columns: list[Column]) -> list[str]:
    """The headers of these columns (a ``95% CI`` after each column with an interval)."""
    headers: list[str] = []
    for column in columns:
        headers += [column.label, "95% CI"] if column.ci else [column.label]
    return headers


def column_cells(column: Column, row: StatisticRow | None) -> list[str]:
    """A column's cell, and its interval's cell where it has one, for one row."""
    if row is None:
        return value_cells(column, None, None)
    return value_cells(column, row["value"], [row["ci_low"], row["ci_high"]])


def value_cells(
    column: Column, value: float | None, interval: list[float | None] | None
) -> list[str]:
    """A column's cell of ``value``, and of ``interval`` where the column has one."""
    text = fmt_p(value) if column.p_value else fmt_num(value, column.digits)
    return [text, fmt_ci(interval)] if column.ci else [text]


def compare_cells(row: ComparisonRow, columns: list[Column]) -> list[str]:
    """One run's cells of the compare columns (``analysis.table_columns("compare")``), read
    from its ``judge compare --json`` values."""
    cells: list[str] = []
    for column in columns:
        key = column.compare_key  # a field, or a registered statistic's extra key
        cells += value_cells(column, getattr(row, key, None), getattr(row, f"{key}_ci95", None))
    return cells


def viewer_compare_cells(
    row: ComparisonRow, columns: list[Column], fmt: Callable[[Any, int], str]
) -> list[str]:
    """One run's cells on the viewer's compare page: ``value [low, high]`` where the column has
    an interval (the value alone when the run has none).

    Args:
        row: The run's compare row.
        columns: The columns (``analysis.table_columns("viewer_compare")``).
        fmt: The number format, ``fmt(value, digits)``.
    """
    cells = []
    for column in columns:
        key = column.compare_key
        text = fmt(getattr(row, key, None), column.digits)
        interval = getattr(row, f"{key}_ci95", None) if column.ci else None
        if interval:
            text += f" [{fmt(interval[0], column.digits)}, {fmt(interval[1], column.digits)}]"
        cells.append(text)
    return cells


def statistic_cells(block: AttributeAgreement, name: str, columns: list[Column]) -> list[str]:
    """One block's cells of these columns, in order.

    Args:
        block: The analysis block.
        name: Its name (the attribute, or ``pooled``).
        columns: The columns (``analysis.table_columns(TABLE)``).
    """
    rows = block_rows(block, name)
    return [cell for column in columns for cell in column_cells(column, column_row(column, rows))]


def agreement_cells(
    agreement: AgreementAnalysis,
    name: str,
    columns: list[Column],
    fmt: Callable[[Any, int], str],
) -> list[str]:
    """A block's cells on a viewer page: each number by ``fmt`` (the pages' ``num``) at the
    column's digits, an interval as ``low – high`` (blank without the statistic).

    Args:
        agreement: The run's analysis.
        name: The attribute, or ``pooled`` (an attribute without a block gets blank cells).
        columns: The columns (``analysis.table_columns("viewer")``).
        fmt: The number format, ``fmt(value, digits)``.
    """
    block = agreement.pooled if name == "pooled" else agreement.per_attribute.get(name)
    rows = block_rows(block, name) if block is not None else {}
    cells: list[str] = []
    for column in columns:
        row = column_row(column, rows)
        cells.append(fmt(row["value"] if row else None, column.digits))
        if column.ci:
            bounds = (fmt(row[k], column.digits) for k in ("ci_low", "ci_high")) if row else ()
            cells.append(" – ".join(bounds))
    return cells
