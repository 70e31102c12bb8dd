"""How a judge run consults the PRM (``judge run --prm MODEL``), as run configuration."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from clinjudge.prm_bridge._aggregate import DEFAULT_THRESHOLD
from clinjudge.prm_bridge._backend import DEFAULT_BATCH_TOKENS


class PRMRunSettings(BaseModel):
    """The process reward model judges consult during a run.

    Args:
        model: Checkpoint directory or hub id (with ``url``: the tokenizer to use).
        preset: Format preset (``medprm``, ``prm-clinic``, ``math-shepherd``, ``custom``).
        overrides: Format fields replacing the preset's.
        segmenter: How the summary is cut into steps; default: the preset's.
        section: Which part of the summary is scored (``all``, ``assessment_plan`` or a heading
            name); default: the preset's (``assessment_plan`` for ``prm-clinic``).
        threshold: Steps scoring below it are flagged.
        device: ``auto``, ``cpu`` or ``cuda[:N]``.
        dtype: ``auto``, ``bfloat16``, ``float16`` or ``float32``.
        batch_tokens: Padded tokens per forward pass (items of concurrent samples share them).
        url: A vLLM pooling server to ask instead of loading the model in this process.
        served_model: The model's name on that server.
        verifier: In ``magentic``, seat a PRM verifier agent that reports first.
        ray: Score every item's summary on Ray before judging starts (``--ray``): ``local``
            starts a Ray here (or uses the one this process joined), ``auto`` joins this
            machine's cluster, ``HOST:PORT`` that one. Needs the ``ray`` extra.
        ray_replicas: Model replicas on Ray; default one per GPU of the cluster, else one.
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    preset: str = "medprm"
    overrides: dict[str, Any] = Field(default_factory=dict)
    segmenter: Literal["medprm", "chain", "note", "lines"] | None = None
    section: str | None = Field(default=None, min_length=1)
    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)
    device: str = "auto"
    dtype: str = "auto"
    batch_tokens: int = Field(default=DEFAULT_BATCH_TOKENS, ge=256)
    url: str | None = None
    served_model: str | None = None
    verifier: bool = True
    ray: str | None = Field(default=None, min_length=1)
    ray_replicas: int | None = Field(default=None, ge=1)
