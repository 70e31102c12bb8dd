"""The driver side of the ``hf/`` judge on Ray, without Ray: how batches reach the replicas.

The replicas here are stand-ins whose ``run.remote(batch)`` returns an awaitable the test
completes, as a Ray ``ObjectRef`` completes when the actor returns. The end-to-end run on a
real local Ray is in tests/prm_bridge/test_ray_hf_judge.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from clinjudge.judges.clients import ProviderFault
from clinjudge.judges.clients._hf_client import ModelSource
from clinjudge.judges.clients._hf_ray import PoolKey, ReplicaPool, _Replica


@dataclass
class _Request:
    text: str
    sampling: tuple[Any, ...] = (False, None, None, None)
    cancelled: bool = False


@dataclass
class _Result:
    text: str
    prompt_tokens: int = 10
    completion_tokens: int = 2
    generate_s: float = 0.5


class _Method:
    def __init__(self, actor: _Actor):
        self._actor = actor

    def remote(self, batch: list[_Request]) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._actor.sent.append(([r.text for r in batch], future))
        return future


class _Actor:
    def __init__(self, name: str):
        self.name = name
        self.sent: list[tuple[list[str], asyncio.Future[Any]]] = []
        self.run = _Method(self)

    def answer(self, n: int = 0) -> None:
        texts, future = self.sent[n]
        future.set_result((self.name, [_Result(t.upper()) for t in texts]))


class _Ray:
    def __init__(self) -> None:
        self.killed: list[Any] = []

    def kill(self, handle: Any, no_restart: bool = True) -> None:
        self.killed.append(handle)


def _pool(actors: list[_Actor], max_batch: int = 2) -> ReplicaPool:
    pool = ReplicaPool(PoolKey(ModelSource("/m"), "cpu", "auto", None, len(actors)))
    pool.replicas = [_Replica(actor) for actor in actors]
    pool._ready = True  # as after _create: the actors exist and their models loaded
    pool._ray = _Ray()
    pool.batcher.max_batch = max_batch
    pool.batcher.window_s = 0.01
    return pool


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)


def test_batches_run_on_every_idle_replica_at_once_and_the_rest_gather_meanwhile() -> None:
    a, b = _Actor("a"), _Actor("b")
    pool = _pool([a, b])

    async def scenario() -> list[str]:
        first = [asyncio.ensure_future(pool.batcher.submit(_Request(f"r{n}"))) for n in range(4)]
        await _settle()
        # Two batches of two, one per replica, both in flight before either answered.
        assert [texts for texts, _ in a.sent] == [["r0", "r1"]]
        assert [texts for texts, _ in b.sent] == [["r2", "r3"]]
        later = [asyncio.ensure_future(pool.batcher.submit(_Request(f"s{n}"))) for n in range(2)]
        await _settle()
        assert len(a.sent) == len(b.sent) == 1  # every replica busy: the next batch waits
        b.answer()
        await _settle()
        assert [texts for texts, _ in b.sent] == [["r2", "r3"], ["s0", "s1"]]  # the free one
        a.answer()
        b.answer(1)
        return [r.text for r in await asyncio.gather(*first, *later)]

    assert asyncio.run(scenario()) == ["R0", "R1", "R2", "R3", "S0", "S1"]
    stats = pool.progress.replicas
    assert (stats["a"].requests, stats["a"].batches) == (2, 1)
    assert (stats["b"].requests, stats["b"].batches, stats["b"].tokens) == (4, 2, 48)


def test_an_idle_replica_that_served_fewest_gets_the_next_batch() -> None:
    a, b = _Actor("a"), _Actor("b")
    pool = _pool([a, b], max_batch=4)
    pool.replicas[0].served = 5  # a has served more

    async def scenario() -> None:
        task = asyncio.ensure_future(pool.batcher.submit(_Request("x")))
        await _settle()
        assert not a.sent and [texts for texts, _ in b.sent] == [["x"]]
        b.answer()
        await task

    asyncio.run(scenario())


def test_a_replica_gone_for_good_fails_its_batch_as_retryable_and_is_replaced() -> None:
    a = _Actor("a")
    pool = _pool([a])
    spare = _Actor("spare")
    pool._new_actor = lambda: spare  # type: ignore[method-assign]

    async def scenario() -> None:
        task = asyncio.ensure_future(pool.batcher.submit(_Request("x")))
        await _settle()
        a.sent[0][1].set_exception(RuntimeError("ActorDiedError: the actor died unexpectedly"))
        with pytest.raises(ProviderFault) as caught:
            await task
        assert caught.value.retryable and "ActorDiedError" in str(caught.value)
        assert pool._ray.killed == [a] and pool.replicas[0].handle is spare
        again = asyncio.ensure_future(pool.batcher.submit(_Request("y")))
        await _settle()
        spare.answer()
        assert (await again).text == "Y"

    asyncio.run(scenario())
