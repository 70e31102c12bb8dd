"""Run configuration: everything a run needs, from flags or a YAML file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from clinjudge.errors import UserError, validation_problems
from clinjudge.judges import DocLensSettings, ModelSettings, draw_shots, registered_modes
from clinjudge.judges.clients import provider_for
from clinjudge.prm_bridge import PRMRunSettings
from clinjudge.rubrics import DEFAULT_REDUCER, Shot, get_reducer
from clinjudge.runs import default_db

Mode = str
"""A judge mode: any mode a workflow is registered for (``register_workflow``)."""


class ConfigError(UserError):
    """A configuration file or flag combination is invalid."""


class RetryPolicy(BaseModel):
    """How model calls are retried on transient faults (429, 5xx, timeouts, resets).

    A call that timed out is retried at most ``timeout_retries`` times: unlike a 429 it says the
    endpoint is slower than the timeout, so each retry usually waits out the whole timeout again
    while the server keeps working on the abandoned request.

    Args:
        max_attempts: Attempts per call, the first included.
        timeout_retries: Retries of a call after it timed out (within ``max_attempts``).
        initial_wait: First backoff in seconds (doubles each time, with jitter).
        max_wait: Longest single wait, also the cap on a provider's Retry-After.
        jitter: Maximum random seconds added to each wait.
    """

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(default=6, ge=1, le=50)
    timeout_retries: int = Field(default=1, ge=0, le=49)
    initial_wait: float = Field(default=1.0, ge=0)
    max_wait: float = Field(default=60.0, ge=0)
    jitter: float = Field(default=1.0, ge=0)


EXPECTED_REPLY_TOKENS = 400
"""Reply tokens a call is priced at, before any reply, when the model sets no ``max_tokens``
(dry-run estimates, the ``max_cost`` check before the first sample, a batch's budget)."""


class RunConfig(BaseModel):
    """A judge run.

    Args:
        rubric: Built-in rubric name or path to a rubric file.
        mode: Judge mode: a mode with a registered workflow (``single``, ``panel`` and
            ``magentic`` are built in).
        data: Input file (JSONL, CSV or Parquet).
        name: Optional label for the run.
        samples: Independent samples per item; the final score is their median (``reduce``).
        shots: Few-shot examples per prompt.
        shot_pool: File of examples with human scores.
        seed: Seed for drawing examples.
        concurrency: Model calls in flight at once.
        max_repairs: Corrective re-asks after an invalid reply.
        explanations: Ask for an explanation with every score.
        personas: Persona set name, persona file, or comma list of persona names (panel and
            magentic modes).
        panel_aggregate: How a panel combines its members' scores: a registered reducer
            (``rubrics.reducer_names()``: median, mean, trimmed_mean, majority...).
        rounds: Discussion rounds in magentic mode.
        max_turns: Cap on agent turns in magentic mode (default: from rounds and personas).
        max_stalls: MagenticOne's stall limit before it replans.
        blind_first_round: Personas grade independently before the discussion starts.
        planning: Run MagenticOne's fact-gathering and planning calls (``--no-planning`` skips
            them: a fixed grading task needs no plan).
        max_cost: Dollar budget: no new work starts once the spend would exceed it.
        max_consecutive_failures: Stop the run (``interrupted``, resumable) after this many
            samples in a row failed by model calls failing the same way (connection refused,
            timeouts, HTML instead of JSON...), or when every item of a run with fewer items
            (two or more) failed that way before any sample succeeded; 0 never stops.
        cache: Reuse replies stored in the database's response cache for identical requests
            (same model, settings, messages and sample); hits cost nothing.
        reduce: How an item's valid samples become its final score: a registered reducer
            (``rubrics.reducer_names()``); None is the median, and ``median`` is kept as None
            so that the stored config (and a sharded run's id) reads as before the setting.
        drop_suspect: Leave samples carrying a suspect-judgment flag (docs/trust.md) out of
            the final scores; by default flags are evidence only.
        shard: ``i/n``: judge only the items whose stable id hash falls in shard i of n.
        judge: Model settings of the single judge.
        roles: Model settings per role, for modes with several roles.
        retry: Retry policy for model calls.
        doclens: DocLens settings (claims, citations, NLI model); used by claim rubrics.
        prm: A process reward model whose step scores the judges see (``--prm MODEL``).
        db: DuckDB file.
    """

    model_config = ConfigDict(extra="forbid")

    rubric: str = "pdsqi9"
    mode: Mode = "single"
    data: str | None = None
    name: str | None = None
    samples: int = Field(default=1, ge=1, le=100)
    shots: int = Field(default=0, ge=0, le=50)
    shot_pool: str | None = None
    seed: int = 0
    concurrency: int = Field(default=8, ge=1, le=1024)
    max_repairs: int = Field(default=1, ge=0, le=5)
    explanations: bool = False
    personas: str = "scoring"
    panel_aggregate: str = DEFAULT_REDUCER
    rounds: int = Field(default=1, ge=1, le=10)
    max_turns: int | None = Field(default=None, ge=1, le=200)
    max_stalls: int = Field(default=3, ge=1, le=20)
    blind_first_round: bool = False
    planning: bool = True
    max_cost: float | None = Field(default=None, gt=0)
    max_consecutive_failures: int = Field(default=10, ge=0)
    cache: bool = False
    reduce: str | None = None
    drop_suspect: bool = False
    shard: str | None = Field(default=None, pattern=r"^\d+/\d+$")
    judge: ModelSettings | None = None
    roles: dict[str, ModelSettings] = Field(default_factory=dict)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    doclens: DocLensSettings = DocLensSettings()
    prm: PRMRunSettings | None = None
    db: str = Field(default_factory=default_db)

    @field_validator("mode")
    @classmethod
    def _registered_mode(cls, mode: str) -> str:
        modes = registered_modes()
        if mode not in modes:
            raise ValueError(f"unknown mode {mode!r}; registered modes: {', '.join(modes)}")
        return mode

    @field_validator("panel_aggregate")
    @classmethod
    def _registered_aggregate(cls, name: str) -> str:
        get_reducer(name)  # the error lists the registered reducers
        return name

    @field_validator("reduce")
    @classmethod
    def _registered_reducer(cls, name: str | None) -> str | None:
        if name is None or name == DEFAULT_REDUCER:
            return None
        get_reducer(name)
        return name

    @property
    def reducer(self) -> str:
        """The name of the reducer of the final scores (``reduce``, else the median)."""
        return self.reduce or DEFAULT_REDUCER

    @model_validator(mode="after")
    def _shots_need_pool(self) -> RunConfig:
        if self.shots and not self.shot_pool:
            raise ValueError("shots > 0 needs a shot_pool file")
        return self

    @model_validator(mode="after")
    def _ray_runs_hf_models(self) -> RunConfig:
        named = [("judge", self.judge), *((f"roles.{k}", v) for k, v in self.roles.items())]
        for where, settings in named:
            if settings is None:
                continue
            if settings.ray is not None and not provider_for(settings).in_process:
                raise ValueError(
                    f"{where}.ray: only hf/ models run on Ray, not {settings.model} (an API "
                    "judge scales with --shard)"
                )
            if settings.ray_replicas is not None and settings.ray is None:
                raise ValueError(f"{where}.ray_replicas needs {where}.ray (--ray)")
            if settings.engine is not None and not provider_for(settings).in_process:
                raise ValueError(
                    f"{where}.engine: only hf/ models have a decoding engine, not {settings.model}"
                )
        return self

    @property
    def simulated(self) -> bool:
        """True when any configured model (the judge's or a role's) is the simulated ``mock/``
        provider: the one definition the store's ``runs.simulated``, the CLI's notice and the
        API's results use."""
        configured = [self.judge, *self.roles.values()]
        return any(s is not None and provider_for(s).simulated for s in configured)

    def shots_for(self, pool: Sequence[Shot], item_id: str, sample: int) -> list[Shot]:
        """The examples one sample of an item is shown: ``shots`` of them, drawn with ``seed``.

        Args:
            pool: The run's shot pool.
            item_id: The item.
            sample: The sample number (1-based).
        """
        return draw_shots(pool, self.shots, seed=self.seed, item_id=item_id, sample=sample)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a dict (validated later, after flags are merged).

    Args:
        path: The YAML file.
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must hold a mapping")
    return data


def build_config(source: str, data: dict[str, Any]) -> RunConfig:
    """Validate merged settings into a RunConfig, naming the offending field on error.

    Args:
        source: What the settings came from, for messages.
        data: Merged settings.
    """
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: invalid configuration"]
        lines += [f"  {line}" for line in validation_problems(exc)]
        raise ConfigError("\n".join(lines)) from exc
