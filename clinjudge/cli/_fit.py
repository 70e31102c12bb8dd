"""Wide tables on narrow terminals: split the columns over several tables that each fit, the
first column (the row's key, e.g. the run id) repeated in each, instead of letting rich cut
every cell to "…".

Numbers (right-aligned columns) keep their whole width; text columns (names, models) may wrap
down to ``TEXT_MIN`` characters; headers wrap at their spaces.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.table import Column, Table
from rich.text import Text

TEXT_MIN = 16
"""The narrowest a text column gets before it moves to the next table (its words wrap)."""


def _plain(cell: RenderableType) -> str:
    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(cell).plain if isinstance(cell, str) else str(cell)


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


def _widths(column: Column, key: bool) -> tuple[int, int]:
    """The narrowest ``column`` may be (every number whole, text wrapped at ``TEXT_MIN``) and
    its natural width (no line wrapped)."""
    header = _plain(column.header)
    lines = [line for cell in column.cells for line in _plain(cell).splitlines()]
    widest = max((cell_len(line) for line in lines), default=0)
    natural = max(cell_len(header), widest)
    if key or column.justify == "right" or column.no_wrap:
        return max(_longest_word(header), widest), natural
    return max(_longest_word(header), min(widest, TEXT_MIN)), natural


def _part(table: Table, columns: list[Column], widths: list[int], title: str | None) -> Table:
    """A table of some of ``table``'s columns (all its rows), at the given widths."""
    part = Table(title=title, box=table.box, show_header=table.show_header)
    for column, width in zip(columns, widths, strict=True):
        part.add_column(
            column.header,
            justify=column.justify,
            no_wrap=column.no_wrap,
            overflow="fold",  # a word longer than the column folds; nothing is cut
            width=width,
        )
    cells = [list(column.cells) for column in columns]
    for index in range(table.row_count):
        part.add_row(*(column_cells[index] for column_cells in cells))
    return part


def _total(needs: list[int]) -> int:
    # Each cell has one space of padding either side, and a border line before each column
    # and after the last.
    return sum(needs) + 3 * len(needs) + 1


def fitted_tables(console: Console, table: Table) -> list[Table]:
    """``table`` whole when it fits the console's width unwrapped, else split by columns into
    tables that fit with numbers whole and text wrapped, each led by the first column.

    Args:
        console: Where the tables go (its width counts).
        table: The table, rows added.
    """
    width = console.size.width
    measured = [_widths(column, index == 0) for index, column in enumerate(table.columns)]
    needs = [need for need, _ in measured]
    if _total([natural for _, natural in measured]) <= width or len(table.columns) <= 2:
        return [table]
    key, *rest = table.columns
    groups: list[list[int]] = [[]]
    for index in range(1, len(table.columns)):
        trial = [needs[0], *(needs[i] for i in groups[-1]), needs[index]]
        if groups[-1] and _total(trial) > width:
            groups.append([])
        groups[-1].append(index)
    # One group too: rich would shrink every column alike (numbers and headers folded
    # mid-word), so the widths are set here, numbers whole and the rest to the text.
    title = str(table.title) if table.title is not None else None
    parts = []
    for number, group in enumerate(groups, start=1):
        part_title = title
        if title and len(groups) > 1:
            part_title = f"{title} ({number} of {len(groups)})"
        indices = [0, *group]
        widths = [needs[i] for i in indices]
        spare = width - _total(widths)
        for position, i in enumerate(indices):  # room left goes to wrapped text, left first
            extra = max(0, min(measured[i][1] - widths[position], spare))
            widths[position] += extra
            spare -= extra
        columns = [table.columns[i] for i in indices]
        parts.append(_part(table, columns, widths, part_title))
    return parts


def print_fitted(console: Console, table: Table) -> None:
    """Print ``table`` whole when it fits the console, else in column groups that do.

    Args:
        console: Where to print.
        table: The table, rows added.
    """
    for part in fitted_tables(console, table):
        console.print(part)


def short_model(model: str) -> str:
    """A model name short enough for a table cell: an in-process ``hf/`` model by its file or
    folder name (``hf//home/me/models/SmolLM2-135M`` is ``hf/SmolLM2-135M``); any other name
    as it is. The full path stays in ``runs show --json`` and the store.

    Args:
        model: The model as stored.
    """
    if model.startswith("hf/"):
        name = model[3:].rstrip("/").rsplit("/", 1)[-1]
        return f"hf/{name}" if name else model
    return model
