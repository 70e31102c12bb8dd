"""PRM scoring across GPUs and nodes on Ray (``--ray``): a Ray Dataset through an actor pool.

Each replica is a Ray actor holding one loaded model (one GPU each when the cluster has GPUs,
else CPU slots). The chains travel as JSON rows; a replica scores the rows of one Ray batch with
:meth:`PRMScorer.score`, so the token-budget batching (:func:`token_batches`) runs on the worker
exactly as in one process. Results stream back to the driver batch by batch, and the driver is
the only one that writes them (see ``judge prm score --ray``). Ray Data restarts an actor that
dies and runs its batch again; a result therefore arrives at least once, and the driver keeps
the first (the store's keys make a repeated write a no-op as well).

Ray is imported only when ``--ray`` is given (``pip install 'clinjudge[ray]'``); starting or
joining it, sizing the replicas and the tests' fault injection are shared with the ``hf/`` judge
on Ray (:mod:`clinjudge._util.ray_cluster`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

# Ray's start and join, replica sizing and fault injection are shared with the hf/ judge on
# Ray; the package re-exports the error and require_ray from here.
from clinjudge._util.ray_cluster import RayDependencyError as RayDependencyError
from clinjudge._util.ray_cluster import (
    duration,
    inject_faults,
    ray_init,
    refuse_ray_client,
    replica_resources,
)
from clinjudge._util.ray_cluster import require_ray as require_ray
from clinjudge.prm_bridge._aggregate import DEFAULT_THRESHOLD, all_aggregates
from clinjudge.prm_bridge._backend import (
    DEFAULT_BATCH_TOKENS,
    ChainScore,
    PRMModelError,
    PRMScorer,
    StepScore,
    token_batches,
)
from clinjudge.prm_bridge._presets import PRMFormat
from clinjudge.prm_bridge._segment import Chain

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScorerSpec:
    """How each replica loads its scorer (sent to the workers, so plain values only).

    Args:
        model: Checkpoint directory or hub id; it must be readable on every worker.
        fmt: The PRM format.
        device: ``auto`` (the replica's GPU when it has one), ``cpu`` or ``cuda``.
        dtype: ``auto``, ``bfloat16``, ``float16`` or ``float32``.
        attn: ``auto``, ``sdpa``, ``flash_attention_2`` or ``eager``.
        batch_tokens: Padded tokens per forward pass.
        max_length: Token limit; default the format's, else the model's.
    """

    model: str
    fmt: PRMFormat
    device: str = "auto"
    dtype: str = "auto"
    attn: str = "auto"
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    max_length: int | None = None

    def build(self) -> PRMScorer:
        """Load the scorer (on a worker)."""
        from clinjudge.prm_bridge._scorer import TransformersPRM

        return TransformersPRM(
            self.model,
            self.fmt,
            device=self.device,
            dtype=self.dtype,
            attn=self.attn,
            batch_tokens=self.batch_tokens,
            max_length=self.max_length,
        )


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide to run.

    Args:
        address: None starts a local Ray (or uses the one this process already joined);
            ``auto`` joins the cluster of this machine; ``HOST:PORT`` joins that one (not
            ``ray://``: Ray Data needs the driver on a node of the cluster).
        replicas: Model replicas; default one per GPU of the cluster, else one.
        batch_size: Chains a replica takes at a time (each Ray batch is then cut into forward
            passes by the token budget); also how often results reach the store.
        max_retries: Restarts of a dead replica, and retries of its batch.
        connect_timeout_s: Seconds to wait for the cluster at ``address`` to answer; default
            ``$CLINJUDGE_RAY_CONNECT_TIMEOUT``, else 30.
    """

    address: str | None = None
    replicas: int | None = None
    batch_size: int = 64
    max_retries: int = 3
    connect_timeout_s: float | None = None


@dataclass
class ReplicaStats:
    """What one replica did: chains, tokens, and its forward time (seconds)."""

    chains: int = 0
    tokens: int = 0
    busy_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.busy_s if self.busy_s > 0 else 0.0


@dataclass
class RayProgress:
    """Progress of a Ray scoring pass, as the driver sees it.

    Args:
        total: Chains sent to the replicas.
        done: Chains whose results came back.
        tokens: Their model-input tokens.
        started: ``time.monotonic()`` at the start.
        replicas: Per replica (``host:pid device``), what it did.
    """

    total: int
    done: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    replicas: dict[str, ReplicaStats] = field(default_factory=dict)

    @property
    def elapsed(self) -> float:
        return max(time.monotonic() - self.started, 1e-9)

    @property
    def eta_s(self) -> float | None:
        if not self.done:
            return None
        return (self.total - self.done) * self.elapsed / self.done

    def line(self) -> str:
        """``done/total chains, items/s, tokens/s, ETA``."""
        eta = self.eta_s
        return (
            f"{self.done}/{self.total} chains, {self.done / self.elapsed:.1f} items/s, "
            f"{self.tokens / self.elapsed:,.0f} tokens/s, "
            f"ETA {'-' if eta is None else duration(eta)}"
        )

    def replica_lines(self) -> list[str]:
        """One line per replica: chains, tokens and tokens per second of forward time."""
        return [
            f"replica {name}: {s.chains} chains, {s.tokens:,} tokens, "
            f"{s.tokens_per_s:,.0f} tokens/s"
            for name, s in sorted(self.replicas.items())
        ]

    def summary(self) -> dict[str, Any]:
        """Figures to keep with the run."""
        return {
            "chains": self.done,
            "tokens": self.tokens,
            "seconds": round(self.elapsed, 3),
            "items_per_s": round(self.done / self.elapsed, 3),
            "tokens_per_s": round(self.tokens / self.elapsed, 1),
            "replicas": {
                name: {
                    "chains": s.chains,
                    "tokens": s.tokens,
                    "tokens_per_s": round(s.tokens_per_s, 1),
                }
                for name, s in sorted(self.replicas.items())
            },  # fmt: skip
        }


class _Replica:
    """A Ray Data actor: one loaded model, scoring Ray batches of JSON chains."""

    def __init__(self, spec: ScorerSpec, threshold: float):
        self.scorer = spec.build()
        device = getattr(self.scorer, "device", "?")
        self.name = f"{socket.gethostname()}:{os.getpid()} {device}"
        self.threshold = threshold

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        inject_faults()
        indices: list[int] = []
        chains: list[Chain] = []
        for packed_indices, packed_chains in zip(batch["indices"], batch["chains"], strict=True):
            indices.extend(json.loads(packed_indices))
            chains.extend(Chain.model_validate(c) for c in json.loads(packed_chains))
        # One call: the scorer batches these chains by the token budget, as in one process.
        results = self.scorer.score(chains, self.threshold)
        return {
            "index": indices,
            "result": [r.model_dump_json() for r in results],
            "replica": [self.name] * len(results),
        }


def plan_batches(chains: Sequence[Chain], spec: ScorerSpec, batch_size: int) -> list[list[int]]:
    """Cut the chains into Ray batches made of whole forward passes of the one-process path.

    The chains are encoded here (tokenizer only) and grouped with :func:`token_batches` over all
    of them, as one process would; a Ray batch then takes consecutive groups, longest first,
    until it holds ``batch_size`` chains. A replica that batches its Ray batch again by the
    token budget finds the same groups, so every chain meets the same neighbours in its forward
    pass as in one process, and its scores are equal to the last bit (float sums depend on the
    batch's shape). Chains that cannot be encoded (they get an error, never a forward pass)
    ride with the last Ray batch.

    Args:
        chains: The candidates.
        spec: The model (its tokenizer and context length are read here).
        batch_size: Chains per Ray batch (at least; whole forward passes are never split).
    """
    from transformers import AutoConfig

    from clinjudge.prm_bridge._render import PRMInputError
    from clinjudge.prm_bridge._scorer import load_tokenizer

    limit = spec.max_length
    if limit is None:
        try:
            config = AutoConfig.from_pretrained(spec.model)
        except (OSError, ValueError) as exc:
            raise PRMModelError(f"{spec.model}: cannot load the model config: {exc}") from exc
        limit = getattr(config, "max_position_embeddings", None)
    tokenizer = load_tokenizer(spec.model)
    encoder = PRMScorer(
        spec.fmt, tokenizer, spec.model, max_length=limit, batch_tokens=spec.batch_tokens
    )
    kept: list[int] = []
    lengths: list[int] = []
    failed: list[int] = []
    for index, chain in enumerate(chains):
        try:
            lengths.append(len(encoder.encode(chain).input_ids))
            kept.append(index)
        except PRMInputError:
            failed.append(index)
    batches: list[list[int]] = []
    current: list[int] = []
    for group in token_batches(lengths, spec.batch_tokens):
        current.extend(kept[g] for g in group)
        if len(current) >= batch_size:
            batches.append(current)
            current = []
    current.extend(failed)
    if current:
        batches.append(current)
    return batches


def score_on_ray(
    chains: Sequence[Chain],
    spec: ScorerSpec,
    options: RayOptions,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    batches: Sequence[Sequence[int]] | None = None,
    on_progress: Callable[[RayProgress], None] | None = None,
    progress_every_s: float = 10.0,
) -> Iterator[list[tuple[int, ChainScore]]]:
    """Score chains on Ray; yield the results of each Ray batch as they arrive.

    Every index of ``batches`` is yielded exactly once, in no particular order, and a Ray
    batch's results arrive together (in one list), so a driver that stores every list in one
    transaction stores whole Ray batches.

    Args:
        chains: The candidates.
        spec: How each replica loads the model.
        options: Cluster address, replicas, Ray batch size, retries.
        threshold: Steps scoring below it are flagged.
        batches: Indices into ``chains`` per Ray batch; default :func:`plan_batches` (pass
            part of its plan to score only what is missing).
        on_progress: Called with the progress after a batch arrives, at most every
            ``progress_every_s`` seconds, and once at the end.
        progress_every_s: Seconds between progress calls.

    Raises:
        RayConnectError: The cluster at ``options.address`` did not answer in time.
        UserError: ``options.address`` is a Ray Client (``ray://``) one.
    """
    ray = require_ray()
    refuse_ray_client(options.address)
    if batches is None:
        batches = plan_batches(chains, spec, options.batch_size)
    if not any(batches):  # all stored already (a resume): no need to start Ray
        if on_progress:
            on_progress(RayProgress(total=0))
        return
    started_here = ray_init(ray, options.address, timeout_s=options.connect_timeout_s)
    try:
        yield from _stream(
            ray, chains, batches, spec, options, threshold, on_progress, progress_every_s
        )
    finally:
        if started_here:
            ray.shutdown()


def _stream(
    ray: Any,
    chains: Sequence[Chain],
    batches: Sequence[Sequence[int]],
    spec: ScorerSpec,
    options: RayOptions,
    threshold: float,
    on_progress: Callable[[RayProgress], None] | None,
    every: float,
) -> Iterator[list[tuple[int, ChainScore]]]:
    batches = [b for b in batches if b]
    wanted = {i for b in batches for i in b}
    progress = RayProgress(total=len(wanted))
    if not batches:
        if on_progress:
            on_progress(progress)
        return
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # no progress-bar notices
    with warnings.catch_warnings():  # its deprecated settings warn when the context is built
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    replicas, remote = replica_resources(ray, options.replicas, cpu_only=spec.device == "cpu")
    # One dataset row per Ray batch: its indices and chains as JSON, in the planned order.
    rows = [
        {
            "indices": json.dumps(list(b)),
            "chains": json.dumps([chains[i].model_dump(mode="json") for i in b]),
        }
        for b in batches
    ]
    with warnings.catch_warnings():
        # Ray >= 2.51 wants the retry settings as named arguments that older Ray lacks.
        warnings.simplefilter("ignore", DeprecationWarning)
        dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            _Replica,
            fn_constructor_kwargs={"spec": spec, "threshold": threshold},
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(replicas, len(rows))),
            max_restarts=options.max_retries,
            max_task_retries=options.max_retries,
            **remote,
        )
    seen: set[int] = set()
    last = time.monotonic()
    for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
        fresh: list[tuple[int, ChainScore]] = []
        for index, text, replica in zip(
            batch["index"], batch["result"], batch["replica"], strict=True
        ):
            index = int(index)
            if index in seen or index not in wanted:  # a retried batch that came back twice
                continue
            seen.add(index)
            result = ChainScore.model_validate_json(text)
            fresh.append((index, result))
            stats = progress.replicas.setdefault(str(replica), ReplicaStats())
            stats.chains += 1
            stats.tokens += result.n_tokens
            stats.busy_s += result.latency_s
            progress.tokens += result.n_tokens
        progress.done += len(fresh)
        if fresh:
            yield fresh
        if on_progress and time.monotonic() - last >= every:
            last = time.monotonic()
            on_progress(progress)
    if on_progress:
        on_progress(progress)
    missing = len(wanted) - len(seen)
    if missing:  # Ray Data raises when a batch fails for good; this guards the contract
        raise PRMModelError(f"Ray returned no result for {missing} of {len(wanted)} chains")


def stored_result(
    chain: Chain,
    scores: Sequence[float | None],
    threshold: float,
    *,
    n_tokens: int = 0,
    truncated: bool = False,
    error: str | None = None,
    latency_s: float = 0.0,
) -> ChainScore:
    """A candidate's result rebuilt from its stored step scores (a resumed run's earlier part).

    Args:
        chain: The candidate, as read from the input.
        scores: Its stored step scores, in step order (one per step).
        threshold: Steps scoring below it are flagged.
        n_tokens: Tokens of its model input (the call's prompt tokens).
        truncated: Whether its input was cut to fit.
        error: Why it could not be scored.
        latency_s: Its share of its batch's forward time.
    """
    values = list(scores) if len(scores) == len(chain.steps) else [None] * len(chain.steps)
    steps = [
        StepScore(
            index=n,
            kind=step.kind,
            text=step.text,
            score=score,
            flagged=None if score is None else score < threshold,
            label=step.label,
            error_type=step.error_type,
        )
        for n, (step, score) in enumerate(zip(chain.steps, values, strict=True), start=1)
    ]
    return ChainScore(
        id=chain.id,
        candidate=chain.candidate,
        steps=steps,
        aggregates={} if error else all_aggregates(values, threshold),
        n_tokens=n_tokens,
        truncated=truncated,
        error=error,
        latency_s=latency_s,
    )
