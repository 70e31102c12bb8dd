"""Builders shared by the survival suites: fast retries, in-process runs, a network guard."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clinjudge.judges import ModelSettings
from clinjudge.orchestration import (
    RetryPolicy,
    RunConfig,
    RunTally,
    create_run,
    execute_run,
    prepare_run,
)
from clinjudge.runs import RunStore
from tests.fake_openai import FakeOpenAIServer

FAST = RetryPolicy(max_attempts=4, initial_wait=0.01, max_wait=0.05, jitter=0.01)


def make_config(data: Path, srv: FakeOpenAIServer, db: Path, **kw: Any) -> RunConfig:
    """A run against the fake server with short timeouts and fast retries."""
    settings = {"model": "openai/local-judge", "base_url": srv.base_url, "timeout": 5.0}
    settings.update(kw.pop("judge", {}))
    kw.setdefault("retry", FAST)
    return RunConfig(data=str(data), judge=ModelSettings(**settings), db=str(db), **kw)


def run_in_process(config: RunConfig) -> tuple[RunStore, str, RunTally]:
    """Create and execute a run; the store stays open for the caller."""
    prepared = prepare_run(config)
    store = RunStore(config.db)
    run_id = create_run(store, prepared)
    return store, run_id, execute_run(store, run_id, prepared, show_progress=False)


@dataclass
class NetworkGuard:
    """Refuses and records every connection or name lookup not aimed at an allowed endpoint."""

    allowed: set[tuple[str, int]] = field(default_factory=set)
    blocked: list[str] = field(default_factory=list)
    connected: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def allow(self, host: str, port: int) -> None:
        """Allow connections to ``host:port``."""
        self.allowed.add((host, port))

    def check(self, address: Any) -> None:
        """Raise (and record) unless ``address`` is allowed; Unix sockets are local."""
        if isinstance(address, str | bytes):
            return
        host, port = str(address[0]), int(address[1])
        with self.lock:
            if (host, port) in self.allowed:
                self.connected.append((host, port))
                return
            self.blocked.append(f"{host}:{port}")
        raise ConnectionRefusedError(f"network guard: connection to {host}:{port} refused")

    def check_lookup(self, host: Any) -> None:
        """Name lookups are network traffic too, unless the name is a loopback address."""
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name in {"127.0.0.1", "localhost", "::1"} or any(name == h for h, _ in self.allowed):
            return
        with self.lock:
            self.blocked.append(f"lookup {name}")
        raise socket.gaierror(f"network guard: lookup of {name} refused")
