"""The ``hf/`` judge with its model replicas on Ray (``judge run --model hf/... --ray``).

A judge run is interactive: a panel's chair, a magentic discussion or a DocLens stage writes its
next prompt from the replies so far, so the prompts cannot be listed up front as a Ray Dataset
(the PRM path's design). Instead the run loop stays on the driver, unchanged, and only the
``generate`` calls move: the driver gathers the requests in flight into batches with the same
:class:`MicroBatcher` as one process (same window, same size, same grouping by sampling), and
sends each batch to an idle replica (the one that has served fewest requests), an actor holding
one loaded model (one GPU each on a GPU cluster, a share of the CPUs otherwise). While every
replica is busy, new requests keep gathering on the driver into the next batch. The driver
awaits each batch's ``ObjectRef`` in its event loop and hands every request its reply; it alone
writes the store.

Replicas are created with ``max_restarts`` and ``max_task_retries``: a replica that dies (OOM, a
lost node) is restarted by Ray, its model loaded again, and its batch run again. The driver gets
each batch's replies once, so every judgment is stored once. A replica that is gone for good
(retries spent) fails its batch with a retryable fault (the run's retry policy sends the calls
again) and is replaced.

Ray is imported only when a batch is first sent (``pip install 'clinjudge[ray]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from clinjudge._util.ray_cluster import (
    error_line,
    inject_faults,
    ray_address,
    ray_init,
    replica_resources,
    require_ray,
)
from clinjudge.judges.clients._faults import ProviderFault
from clinjudge.judges.clients._hf_batcher import MicroBatcher, Pending
from clinjudge.judges.clients._hf_client import (
    DEFAULT_WINDOW_MS,
    MAX_BATCH_ENV,
    WINDOW_ENV,
    HFClient,
    ModelSource,
    _env_int,
)

if TYPE_CHECKING:
    from clinjudge.judges.clients._hf_engine import GenerationRequest, GenerationResult

log = logging.getLogger(__name__)

MAX_RETRIES = 3
"""Restarts of a dead replica, and retries of the batch it was running."""
PROGRESS_SECONDS_ENV = "CLINJUDGE_PROGRESS_SECONDS"
"""Seconds between progress lines in the log (default 30), as the run's own progress."""


class _JudgeReplica:
    """A Ray actor: one loaded ``hf/`` model decoding the batches it is sent."""

    def __init__(self, source: ModelSource, device: str, dtype: str, engine: str = "padded"):
        from clinjudge.judges.clients._hf_engine import LocalModel

        self.engine = LocalModel(source, device=device, dtype=dtype, engine=engine)
        self.engine.start_loading().result()
        self.name = f"{socket.gethostname()}:{os.getpid()} {self.engine.device}"

    def describe(self) -> str:
        """``host:pid device`` (answers once the model is loaded)."""
        return self.name

    def run(
        self, requests: list[GenerationRequest]
    ) -> tuple[str, list[GenerationResult | BaseException]]:
        """Decode one batch, as one process does (:meth:`LocalModel.run_batch`)."""
        inject_faults()
        return self.name, self.engine.run_batch(requests)


@dataclass
class ReplicaStats:
    """What one replica did, as the driver saw it."""

    requests: int = 0
    batches: int = 0
    tokens: int = 0
    busy_s: float = 0.0

    def line(self, name: str) -> str:
        rate = self.tokens / self.busy_s if self.busy_s > 0 else 0.0
        return (
            f"replica {name}: {self.requests} replies in {self.batches} batches, "
            f"{self.tokens:,} tokens, {rate:,.0f} tokens/s"
        )


@dataclass
class _Replica:
    """The driver's handle on one actor."""

    handle: Any
    busy: bool = False
    served: int = 0


@dataclass
class _Progress:
    replies: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    last_line: float = field(default_factory=time.monotonic)
    replicas: dict[str, ReplicaStats] = field(default_factory=dict)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return (
            f"{self.replies} replies, {self.replies / elapsed:.2f} replies/s, "
            f"{self.tokens / elapsed:,.0f} tokens/s"
        )


class _WithoutSigtermNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def _init(ray: Any, address: str | None) -> bool:
    """:func:`ray_init` off the main thread. On the main thread Ray would replace the run's
    SIGTERM handling (a clean, resumable stop) with its own exit; off it, Ray leaves it alone
    and says so, which is not news here."""
    worker_log = logging.getLogger("ray._private.worker")
    quiet = _WithoutSigtermNotice()
    worker_log.addFilter(quiet)
    try:
        return ray_init(ray, address)
    finally:
        worker_log.removeFilter(quiet)


def _progress_every() -> float:
    try:
        return max(float(os.environ.get(PROGRESS_SECONDS_ENV) or 30), 0.0)
    except ValueError:
        return 30.0


def _unused(batch: list[GenerationRequest]) -> list[GenerationResult | BaseException]:
    raise AssertionError("batches on Ray are sent by _PoolBatcher._drain")  # pragma: no cover


def _cancel(request: GenerationRequest) -> None:
    request.cancelled = True  # the driver's copy: a batch already sent runs to its end


@dataclass(frozen=True)
class PoolKey:
    """What makes two clients share replicas: the model and where it runs (not sampling)."""

    source: ModelSource
    device: str
    dtype: str
    address: str | None
    replicas: int | None
    engine: str = "padded"


class ReplicaPool:
    """The replicas of one ``hf/`` model on Ray, and the driver's batcher in front of them.

    Args:
        key: The model, device, dtype, cluster address, number of replicas and engine.
    """

    def __init__(self, key: PoolKey):
        self.key = key
        self.users = 0
        self.replicas: list[_Replica] = []
        self.progress = _Progress()
        self._ray: Any = None
        self._started_ray = False
        self._remote: Any = None
        self._start: asyncio.Task[None] | None = None
        self._ready = False
        self._free: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        configured = _env_int(MAX_BATCH_ENV)
        self._max_batch = configured
        window_ms = float(os.environ.get(WINDOW_ENV) or DEFAULT_WINDOW_MS)
        self.batcher = _PoolBatcher(self, max_batch=configured or 8, window_s=window_ms / 1000)

    @property
    def name(self) -> str:
        return f"hf/{self.key.source} on ray"

    async def started(self) -> None:
        """Join or start Ray and create the replicas (once); returns when their models have
        loaded. Requests that arrive meanwhile gather into the first batches."""
        if self._ready:
            return
        loop = asyncio.get_running_loop()
        start = self._start
        if start is None or start.get_loop() is not loop or (start.done() and start.exception()):
            start = self._start = loop.create_task(self._create())
        await asyncio.shield(start)

    async def _create(self) -> None:
        ray = require_ray()
        self._ray = ray
        # ray.init blocks for seconds: not in the event loop, which serves the run meanwhile.
        self._started_ray = await asyncio.to_thread(_init, ray, ray_address(self.key.address))
        count, resources = replica_resources(
            ray, self.key.replicas, cpu_only=self.key.device == "cpu"
        )
        if self._max_batch is None:
            self.batcher.max_batch = 32 if "num_gpus" in resources else 8
        self._remote = ray.remote(
            max_restarts=MAX_RETRIES, max_task_retries=MAX_RETRIES, **resources
        )(_JudgeReplica)
        self.replicas = [_Replica(self._new_actor()) for _ in range(count)]
        try:
            names = await asyncio.gather(*(r.handle.describe.remote() for r in self.replicas))
        except Exception as exc:  # noqa: BLE001 - a model that cannot load on the workers
            self._kill()
            raise ProviderFault(
                f"{self.name}: the replicas cannot load the model: {error_line(exc)}"[:500],
                retryable=False,
            ) from exc
        log.info("%s: %d replicas ready: %s", self.name, count, ", ".join(sorted(names)))
        self._ready = True

    def _freed(self) -> asyncio.Event:
        """Set when a replica finishes a batch (one event per event loop)."""
        loop = asyncio.get_running_loop()
        if self._free is None or self._free[0] is not loop:
            self._free = (loop, asyncio.Event())
        return self._free[1]

    def _new_actor(self) -> Any:
        # Ray gives each replica its own GPU, which it sees as cuda:0.
        device = "cuda" if self.key.device.startswith("cuda") else self.key.device
        return self._remote.remote(self.key.source, device, self.key.dtype, self.key.engine)

    async def idle(self) -> _Replica:
        """Wait for a replica with no batch; of the idle ones, the one that served fewest."""
        while True:
            idle = [r for r in self.replicas if not r.busy]
            if idle:
                return min(idle, key=lambda r: r.served)
            freed = self._freed()
            freed.clear()
            await freed.wait()

    async def send(self, replica: _Replica, batch: list[Pending[Any, Any]]) -> None:
        """Run a batch on a replica (marked busy by the caller, before this task starts) and
        hand every request its result."""
        try:
            name, results = await replica.handle.run.remote([e.request for e in batch])
        except Exception as exc:  # noqa: BLE001 - the replica is gone for good
            log.warning("%s: a replica failed: %s; replacing it", self.name, error_line(exc))
            self._replace(replica)
            fault = ProviderFault(
                f"{self.name}: replica failed: {error_line(exc)}"[:500], retryable=True
            )
            MicroBatcher._fail(batch, fault)
        else:
            self._record(str(name), results)
            MicroBatcher._settle(batch, results)
        finally:
            replica.busy = False
            self._freed().set()
            # Whatever went wrong above, no caller is left waiting (answered ones are kept).
            MicroBatcher._fail(batch, ProviderFault(f"{self.name}: no reply", retryable=False))

    def _replace(self, replica: _Replica) -> None:
        with contextlib.suppress(Exception):  # already dead
            self._ray.kill(replica.handle, no_restart=True)
        replica.handle = self._new_actor()

    def _record(self, name: str, results: Sequence[GenerationResult | BaseException]) -> None:
        stats = self.progress.replicas.setdefault(name, ReplicaStats())
        stats.batches += 1
        done = [r for r in results if not isinstance(r, BaseException)]
        tokens = sum(r.prompt_tokens + r.completion_tokens for r in done)
        stats.requests += len(done)
        stats.tokens += tokens
        stats.busy_s += max((r.generate_s for r in done), default=0.0)
        self.progress.replies += len(done)
        self.progress.tokens += tokens
        every = _progress_every()
        if time.monotonic() - self.progress.last_line >= every:
            self.progress.last_line = time.monotonic()
            log.info("%s: %s", self.name, self.progress.line())

    def attach(self) -> None:
        self.users += 1

    def detach(self) -> None:
        """One client fewer; the last one stops the replicas (and the Ray this pool started)."""
        self.users -= 1
        if self.users > 0:
            return
        with _POOLS_LOCK:
            if _POOLS.get(self.key) is self:
                del _POOLS[self.key]
        if self.progress.replicas:
            log.info("%s: %s", self.name, self.progress.line())
            for name, stats in sorted(self.progress.replicas.items()):
                log.info("%s: %s", self.name, stats.line(name))
        self._kill()
        if self._started_ray and self._ray is not None:
            self._ray.shutdown()

    def summary(self) -> dict[str, Any]:
        """Replies, tokens and per-replica figures so far."""
        return {
            "replies": self.progress.replies,
            "tokens": self.progress.tokens,
            "replicas": {
                name: {"replies": s.requests, "batches": s.batches, "tokens": s.tokens}
                for name, s in sorted(self.progress.replicas.items())
            },
        }

    def _kill(self) -> None:
        for replica in self.replicas:
            with contextlib.suppress(Exception):  # already gone
                self._ray.kill(replica.handle, no_restart=True)
        self.replicas = []


class _PoolBatcher(MicroBatcher["GenerationRequest", "GenerationResult"]):
    """The in-process batcher's gathering and grouping, with each batch sent to a replica:
    several batches run at once, one per idle replica."""

    def __init__(self, pool: ReplicaPool, *, max_batch: int, window_s: float):
        super().__init__(
            _unused,
            _NO_EXECUTOR,
            max_batch=max_batch,
            window_s=window_s,
            group=lambda request: request.sampling,
            before_batch=pool.started,
            on_cancel=_cancel,
        )
        self._pool = pool
        self._sending: set[asyncio.Task[None]] = set()

    async def _slot(self) -> object:
        # Gather only once a replica is free: while all are busy the next batch grows.
        return await self._pool.idle()

    async def _dispatch(
        self, batch: list[Pending[GenerationRequest, GenerationResult]], slot: object
    ) -> None:
        replica = cast(_Replica, slot)
        replica.busy = True
        replica.served += len(batch)
        task = asyncio.get_running_loop().create_task(self._pool.send(replica, batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)


# Batches on Ray never run in a local thread; the batcher's executor is never used.
_NO_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clinjudge-hf-ray-unused")
_POOLS: dict[PoolKey, ReplicaPool] = {}
_POOLS_LOCK = threading.Lock()


def replica_pool(key: PoolKey) -> ReplicaPool:
    """The process-wide pool for a model on Ray: clients of the same model share its replicas
    and its batches (a panel's members, the chair)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ReplicaPool(key)
        return pool


class HFRayClient(HFClient):
    """:class:`HFClient` whose batches run on Ray actors (``--ray``).

    Prompts, schemas and sampling are built as in one process; only where a batch is decoded
    differs. The token counts recorded are the replicas' tokenizer's.

    Args:
        model: What follows ``hf/``; it must be readable on every Ray worker.
        ray: ``local`` (start a Ray here, or use the one this process joined), ``auto`` (this
            machine's cluster), ``HOST:PORT`` or ``ray://HOST:PORT``.
        replicas: Model replicas; default one per GPU of the cluster, else one.
        **options: The in-process client's other arguments (sampling, device, dtype, rubric,
            hub).
    """

    def __init__(self, model: str, *, ray: str, replicas: int | None = None, **options: Any):
        super().__init__(model, **options)
        self.ray = ray
        self.replicas = replicas
        self._attached: ReplicaPool | None = None

    @property
    def pool(self) -> ReplicaPool:
        """The replicas this client sends its batches to."""
        key = PoolKey(self.source, self.device, self.dtype, self.ray, self.replicas, self.hf_engine)
        return replica_pool(key)

    def progress_age(self) -> float | None:
        """None: the replicas' progress is not seen here, so each call's own deadline holds."""
        return None

    async def _generate(self, request: GenerationRequest) -> GenerationResult:
        pool = self.pool
        if self._attached is not pool:
            if self._attached is not None:
                self._attached.detach()
            pool.attach()
            self._attached = pool
        return await pool.batcher.submit(request)

    async def close(self) -> None:
        """Let go of the replicas; the last client of a model stops them."""
        if self._attached is not None:
            self._attached.detach()
            self._attached = None
