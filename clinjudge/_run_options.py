"""The settings ``evaluate``, ``estimate``, ``audit`` and ``probe`` take by name, declared once
for readers and type checkers (``**options: Unpack[RunOptions]``).

The checks stay where they were: ``orchestration.run_config_from`` validates every value at run
time and names the setting in its ``UserError``, so a caller without a type checker gets the
same messages. A value of None means "not given" (the config file's, else the default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict, cast

__all__ = ["ProbeOptions", "RunOptions", "without_perturber"]


class RunOptions(TypedDict, total=False):
    """`judge run`'s settings by name (`judge run --help` and docs/api.md describe them).

    Args:
        config: A YAML file of settings, read first; the other options override it.
        rubric: A built-in rubric's name or a rubric YAML file.
        mode: ``single``, ``panel``, ``magentic`` or ``doclens``.
        model: The judge model (``openai/gpt-4o-mini``, ``hf/...``, ``mock/judge``).
        role_model: ``ROLE=MODEL`` for a role of a panel or MagenticOne team.
        judge: The judge model's settings as a mapping (``{"model": ..., "temperature": 0}``).
        roles: Each role's model settings as a mapping.
        samples: Samples per item (reduced to the final score with ``reduce``).
        reduce: How samples become the final score (``median``, ``mean``...).
        panel: Panel settings nested (``{"aggregate": "mean"}``); flat: ``panel_aggregate``.
        magentic: MagenticOne settings nested (``{"rounds": 2}``); flat: ``rounds`` and the
            rest.
        doclens: DocLens metrics to compute.
        nli: The NLI model of DocLens.
        prm: A process reward model whose step scores the judge sees.
        retry: Retry settings nested (``{"timeout_retries": 2}``); flat: ``timeout_retries``.
        price: Dollars per token of the judge model, when its provider's are unknown.
        engine: ``hf/`` models: how batches are decoded (``padded`` or ``paged``).
        max_connections: The judge model's calls in flight at once to its endpoint (with
            ``concurrency`` the lower bound holds).
        db: The run store (default ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb).
    """

    # The run
    config: str | Path | None
    rubric: str | None
    mode: str | None
    name: str | None
    db: str | Path | None
    samples: int | None
    reduce: str | None
    shots: int | None
    shot_pool: str | Path | None
    seed: int | None
    concurrency: int | None
    max_repairs: int | None
    explanations: bool | None
    personas: str | None
    max_cost: float | None
    max_consecutive_failures: int | None
    cache: bool | None
    drop_suspect: bool | None
    shard: str | None
    # Panel and MagenticOne
    panel: Mapping[str, Any] | None
    panel_aggregate: str | None
    magentic: Mapping[str, Any] | None
    rounds: int | None
    max_turns: int | None
    max_stalls: int | None
    blind_first_round: bool | None
    planning: bool | None
    # The judge model and the other roles' models
    judge: Mapping[str, Any] | None
    roles: Mapping[str, Mapping[str, Any]] | None
    role_model: Sequence[str] | None
    model: str | None
    base_url: str | None
    api_key_env: str | None
    api_version: str | None
    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None
    timeout: float | None
    max_reply_bytes: int | None
    json_mode: bool | None
    structured_output: Literal["auto", "json_schema", "json_object", "off"] | None
    client: Literal["auto", "autogen", "direct"] | None
    rpm: int | None
    tpm: int | None
    max_connections: int | None
    price: Mapping[str, Any] | None
    price_as: str | None
    ray: str | None
    ray_replicas: int | None
    engine: Literal["padded", "paged"] | None
    # Retries
    retry: Mapping[str, Any] | None
    timeout_retries: int | None
    # DocLens and process reward models
    doclens: Sequence[str] | None
    nli: str | None
    prm: str | None
    prm_preset: str | None
    prm_url: str | None
    prm_device: str | None
    prm_section: str | None


class ProbeOptions(RunOptions, total=False):
    """``probe``'s settings: `judge run`'s, and the model that rewrites the variants.

    Args:
        perturber: A model that rewrites each probe variant, keeping its edit
            (docs/trust.md).
    """

    perturber: str | None


def without_perturber(options: ProbeOptions) -> RunOptions:
    """The run settings of a probe's options (``perturber`` is no run setting)."""
    return cast(RunOptions, {k: v for k, v in options.items() if k != "perturber"})
