"""Command-line options shared by `judge run` and `judge audit`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clinjudge.cli._help import PANELS
from clinjudge.orchestration import Mode, RunConfig

_DEFAULT = {k: str(f.default) for k, f in RunConfig.model_fields.items()}

RubricOption = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=PANELS.data,
        show_default=_DEFAULT["rubric"],
        help="Built-in rubric name or rubric file.",
    ),
]
ModeOption = Annotated[
    Mode | None,
    typer.Option(
        rich_help_panel=PANELS.panel,
        show_default=_DEFAULT["mode"],
        help="Judge mode: single, panel, magentic, or a mode a plugin registered.",
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=PANELS.model,
        show_default="$CLINJUDGE_MODEL, else mock/judge",
        help="provider/model, e.g. openai/gpt-4o-mini, azure/DEPLOYMENT, anthropic/..., "
        "mock/judge (simulated).",
    ),
]
BaseUrlOption = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=PANELS.model,
        show_default="the provider's",
        help="OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp) or Azure endpoint.",
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        rich_help_panel=PANELS.data,
        show_default="none",
        help="YAML file with any `judge run` settings.",
    ),
]
SamplesOption = Annotated[
    int | None,
    typer.Option(
        rich_help_panel=PANELS.sampling,
        show_default=_DEFAULT["samples"],
        help="Samples per item (median is final).",
    ),
]
ConcurrencyOption = Annotated[
    int | None,
    typer.Option(
        rich_help_panel=PANELS.limits,
        show_default=_DEFAULT["concurrency"],
        help="Model calls in flight.",
    ),
]
PersonasOption = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=PANELS.panel,
        show_default=_DEFAULT["personas"],
        help="panel/magentic: persona set, persona file or comma list of names.",
    ),
]
MaxCostOption = Annotated[
    float | None,
    typer.Option(
        rich_help_panel=PANELS.limits,
        show_default="no budget",
        help="Dollar budget; no new work starts beyond it.",
    ),
]
NameOption = Annotated[
    str | None, typer.Option(rich_help_panel=PANELS.output, help="Label for the run.")
]
DbOption = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=PANELS.output,
        help="DuckDB file.",
        show_default="the config file's db, else $CLINJUDGE_DB, else runs/clinjudge.duckdb",
    ),
]
ProgressOption = Annotated[
    bool, typer.Option(rich_help_panel=PANELS.output, help="Show a progress bar.")
]

ShardOption = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=PANELS.limits,
        show_default="all items",
        help="i/n: judge only shard i of n (stable hash of the item id; audits hash the "
        "encounter id so vendors stay paired). Merge shards with `judge db merge`.",
    ),
]
PRMOption = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=PANELS.prm,
        show_default="none",
        help="Process reward model (checkpoint path or hub id) whose step scores the judges see: "
        "in the prompt (single, panel) or as a verifier agent (magentic); steps are stored in "
        "prm_steps. Needs the prm extra; more settings under `prm:` in the config file.",
    ),
]
