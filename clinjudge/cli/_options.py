"""Command-line options shared by `judge run` and `judge audit`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clinjudge.orchestration import Mode

RubricOption = Annotated[str | None, typer.Option(help="Built-in rubric name or rubric file.")]
ModeOption = Annotated[Mode | None, typer.Option(help="Judge mode.")]
ModelOption = Annotated[
    str | None,
    typer.Option(
        help="provider/model, e.g. openai/gpt-4o-mini, azure/DEPLOYMENT, anthropic/..., "
        "mock/judge. Default: $CLINJUDGE_MODEL, else the simulated mock/judge."
    ),
]
BaseUrlOption = Annotated[
    str | None,
    typer.Option(help="OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp) or Azure endpoint."),
]
ConfigOption = Annotated[Path | None, typer.Option(help="YAML file with any `judge run` settings.")]
SamplesOption = Annotated[int | None, typer.Option(help="Samples per item (median is final).")]
ConcurrencyOption = Annotated[int | None, typer.Option(help="Model calls in flight.")]
PersonasOption = Annotated[
    str | None,
    typer.Option(help="panel/magentic: persona set, persona file or comma list of names."),
]
MaxCostOption = Annotated[
    float | None, typer.Option(help="Dollar budget; no new work starts beyond it.")
]
NameOption = Annotated[str | None, typer.Option(help="Label for the run.")]
DbOption = Annotated[
    str | None,
    typer.Option(
        help="DuckDB file (the config file's db, else $CLINJUDGE_DB, else runs/clinjudge.duckdb).",
        show_default=False,
    ),
]
ProgressOption = Annotated[bool, typer.Option(help="Show a progress bar.")]

ShardOption = Annotated[
    str | None,
    typer.Option(
        help="i/n: judge only shard i of n (stable hash of the item id; audits hash the "
        "encounter id so vendors stay paired). Merge shards with `judge db merge`."
    ),
]
PRMOption = Annotated[
    str | None,
    typer.Option(
        help="Process reward model (checkpoint path or hub id) whose step scores the judges see: "
        "in the prompt (single, panel) or as a verifier agent (magentic); steps are stored in "
        "prm_steps. Needs the prm extra; more settings under `prm:` in the config file."
    ),
]
