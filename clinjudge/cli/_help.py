"""Help layout shared by every command: panels, defaults, no ``<bool>`` labels (kept light:
the root `judge --help` imports it)."""

from __future__ import annotations

from typing import Any

import typer


class PANELS:
    """Help panels of `judge run` and `judge audit`, in the order they are shown."""

    data = "Data"
    model = "Model"
    sampling = "Sampling"
    panel = "Panel / magentic"
    doclens = "DocLens"
    prm = "PRM"
    limits = "Budget and limits"
    output = "Output"


PANEL_ORDER = (
    PANELS.data,
    PANELS.model,
    PANELS.sampling,
    PANELS.panel,
    PANELS.doclens,
    PANELS.prm,
    PANELS.limits,
    PANELS.output,
)


def tidy_help(command: Any) -> None:
    """No ``<bool>`` label next to flags (``--help`` included) and described defaults without
    parentheses, in this command and below it."""
    ctx = typer.Context(command)
    for param in [*command.params, command.get_help_option(ctx)]:
        if getattr(param, "is_flag", False):
            param.metavar = ""
        described = getattr(param, "show_default", None)
        if isinstance(described, str):
            # Typer wraps a described default in parentheses: "[default: (pdsqi9)]".
            param.help = f"{param.help or ''} \\[default: {described}]".strip()
            param.show_default = False
    # Panels in PANEL_ORDER whatever the order of the function's parameters.
    rank = {name: n for n, name in enumerate(PANEL_ORDER)}

    def place(param: Any) -> int:
        panel = getattr(param, "rich_help_panel", None)
        return -1 if panel is None else rank.get(panel, len(PANEL_ORDER))

    command.params.sort(key=place)
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub)
