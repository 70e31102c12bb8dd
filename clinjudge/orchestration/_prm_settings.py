"""The settings of a PRM run and what it tells its caller (notices, a stopped Ray pass)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from clinjudge.errors import ClinJudgeError

PRM_API_KEY_ENV = "CLINJUDGE_PRM_API_KEY"
"""Bearer token sent to a ``prm_url`` server, when set and no key is given."""

PRMCommand = Literal["score", "best-of-n", "eval"]
"""What a PRM run does with the scores; kept in its config as ``command``."""


@dataclass(frozen=True)
class PRMNotice:
    """One line for the person running a PRM pass.

    Args:
        text: The line, plain text.
        level: ``info`` (progress, where the run went), ``warning`` or ``error`` (a
            candidate that could not be scored).
    """

    text: str
    level: Literal["info", "warning", "error"] = "info"


Notify = Callable[[PRMNotice], None]
"""Receives the notices of a PRM pass."""


@dataclass(frozen=True)
class PRMSettings:
    """Everything a PRM run reads, checked by the caller (the API or the CLI).

    Args:
        model: PRM checkpoint directory or hub id (with ``prm_url``: its tokenizer).
        input: JSONL/CSV/Parquet file of candidates.
        preset: Format preset (``medprm``, ``prm-clinic``, ``math-shepherd``, ``custom``).
        format_fields: Format fields over the preset's: a mapping, or ``KEY=VALUE`` strings
            (JSON values) as `--set` takes them.
        format_file: YAML/JSON file of format fields (read before ``format_fields``).
        segment: How ``text`` is split (default: the format's).
        threshold: Steps scoring below it are flagged.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``auto`` or a torch dtype name.
        attn: ``auto``, ``sdpa``, ``flash_attention_2`` or ``eager``.
        batch_tokens: Padded tokens per forward pass.
        max_length: Token limit (default: the format's, else the model's).
        prm_url: vLLM pooling server instead of loading the model here.
        served_model: Model name on the ``prm_url`` server.
        api_key: Bearer token for ``prm_url`` (default ``$CLINJUDGE_PRM_API_KEY``).
        db: The run store.
        store: Record the run in ``db``.
        name: Label for the stored run.
        ray: Score on Ray: ``local``, ``auto`` or the head's ``HOST:PORT``.
        ray_replicas: Ray model replicas (default: one per GPU, else one).
        ray_batch: Candidates a Ray replica takes at a time (stored per batch).
        ray_connect_timeout: Seconds to wait for the Ray cluster to answer.
        resume: With ``ray``: finish this stored run, scoring only what it lacks.
    """

    model: str
    input: Path
    preset: str = "medprm"
    format_fields: Mapping[str, Any] | Sequence[str] = ()
    format_file: Path | None = None
    segment: str | None = None
    threshold: float = 0.5
    device: str = "auto"
    dtype: str = "auto"
    attn: str = "auto"
    batch_tokens: int = 16384
    max_length: int | None = None
    prm_url: str | None = None
    served_model: str | None = None
    api_key: str | None = None
    db: str = ""
    store: bool = True
    name: str | None = None
    ray: str | None = None
    ray_replicas: int | None = None
    ray_batch: int = 64
    ray_connect_timeout: float | None = None
    resume: str | None = None

    @property
    def stored_model(self) -> str:
        """The model named in the store: the served name, else the checkpoint."""
        return self.served_model or self.model


@dataclass
class RayRun:
    """What the Ray driver leaves for :func:`store_prm_run` to close the run with.

    Args:
        run_id: The stored run (None when nothing is stored).
        config: The run's config so far (the command adds its own fields).
        summary: Throughput of this pass (chains, tokens, per replica).
        scored: Candidates scored in this pass.
        reused: Candidates taken from the store (``resume``).
    """

    run_id: str | None
    config: dict[str, Any]
    summary: dict[str, Any] = field(default_factory=dict)
    scored: int = 0
    reused: int = 0


class PRMRunStopped(ClinJudgeError):
    """A Ray pass stopped before its end; the batches stored so far stay (``resume``).

    Args:
        reason: Why it stopped, as kept in ``runs.status_reason``.
        run_id: The stored run (None when nothing was stored).
        interrupted: Stopped by Ctrl-C or SIGTERM rather than by a failure.
    """

    def __init__(self, reason: str, *, run_id: str | None, interrupted: bool) -> None:
        tail = f"; the batches stored so far stay: resume={run_id!r}" if run_id else ""
        super().__init__(f"{reason}{tail}")
        self.reason = reason
        self.run_id = run_id
        self.interrupted = interrupted
