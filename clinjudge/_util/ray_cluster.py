"""What every ``--ray`` path shares: importing Ray, joining or starting it, sizing the replicas,
and the fault injection the tests use.

PRM scoring (:mod:`clinjudge.prm_bridge._ray_runner`) and the ``hf/`` judge on Ray
(:mod:`clinjudge.judges.clients._hf_ray`) both use these. Ray itself is imported only when a
function here is called: ``pip install 'clinjudge[ray]'``.
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clinjudge.errors import UserError

RAY_EXTRA = "ray"
RAY_INSTALL_HINT = f"--ray needs Ray: pip install 'clinjudge[{RAY_EXTRA}]'"
RAY_CLIENT_HINT = (
    f"--ray ray://... needs Ray Client (grpcio, in the {RAY_EXTRA} extra): "
    f"pip install 'clinjudge[{RAY_EXTRA}]'"
)
CONNECT_TIMEOUT_ENV = "CLINJUDGE_RAY_CONNECT_TIMEOUT"
"""Seconds to wait for the Ray cluster ``--ray`` names to answer (``judge prm``'s
``--ray-connect-timeout`` sets it too)."""
DEFAULT_CONNECT_TIMEOUT_S = 30.0
"""The wait without the setting: joining a cluster that answers takes a few seconds."""
RAY_FAULTS_ENV = "CLINJUDGE_RAY_FAULTS"
"""Fault injection for tests: a folder on the workers' machine. A replica that finds a file
``exit_once`` there renames it away (only one replica wins) and exits hard before its batch;
a file ``delay_s`` holds seconds each batch waits first."""
LOCAL = "local"
"""The ``--ray`` value that starts a Ray in this process (or uses the one it joined)."""


class RayDependencyError(UserError, ImportError):
    """``--ray`` was asked for, but Ray is not installed."""


class RayConnectError(UserError, ConnectionError):
    """The Ray cluster ``--ray`` names cannot be reached, or did not answer in time."""


def require_ray() -> Any:
    """Import ray, or fail with the install hint (one line, naming the extra)."""
    try:
        import ray
        import ray.data  # noqa: F401 - the `data` part of ray[data]
    except ImportError as exc:
        raise RayDependencyError(RAY_INSTALL_HINT) from exc
    return ray


def ray_address(value: str | None) -> str | None:
    """The address ``ray.init`` takes for a ``--ray`` value (``local``: None, start one here).

    Args:
        value: ``local``, ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``.
    """
    return None if value in (None, LOCAL) else value


def connect_timeout(seconds: float | None = None) -> float:
    """How long to wait for a Ray cluster to answer: ``seconds``, else
    ``$CLINJUDGE_RAY_CONNECT_TIMEOUT``, else 30.

    Args:
        seconds: The wait asked for (``--ray-connect-timeout``), if any.

    Raises:
        UserError: The wait is not a number of seconds above 0.
    """
    where = "--ray-connect-timeout"
    if seconds is None:
        text = os.environ.get(CONNECT_TIMEOUT_ENV, "").strip()
        if not text:
            return DEFAULT_CONNECT_TIMEOUT_S
        where = f"${CONNECT_TIMEOUT_ENV}"
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise UserError(f"{where}: expected seconds above 0 (e.g. 30), not {seconds}")
    return seconds


def _joined_address(address: str | None) -> str | None:
    """The cluster ``ray.init(address)`` joins: ``$RAY_ADDRESS`` replaces None and ``auto``,
    as Ray does (None: Ray starts here)."""
    from_env = os.environ.get("RAY_ADDRESS")
    return from_env if from_env and address in (None, "auto") else address


def _host_port(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``ray://HOST:PORT``, ``[IPv6]:PORT``) split in two.

    Raises:
        UserError: The address has no port, or not a number from 1 to 65535.
    """
    rest = address.partition("://")[2] if "://" in address else address
    rest = rest.split("/", 1)[0]
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--ray {address}: expected local, auto, HOST:PORT or ray://HOST:PORT",
                        setting="ray")  # fmt: skip
    return host, int(port)


def _tcp_answer(host: str, port: int, wait: float) -> str | None:
    """None when a TCP connection to ``host:port`` opens within ``wait`` seconds; else why not.

    The attempt runs in a daemon thread: a name lookup is not bounded by a socket timeout, and
    a thread that is left waiting must not hold the process at exit.
    """
    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=wait):
                outcome.append(None)
        except socket.gaierror as exc:
            outcome.append(f"the host name does not resolve ({exc.strerror or exc})")
        except ConnectionRefusedError:
            outcome.append("connection refused, nothing listens on that port")
        except TimeoutError:
            outcome.append(f"no answer within {wait:g} s")
        except OSError as exc:
            outcome.append(exc.strerror or str(exc) or type(exc).__name__)

    thread = threading.Thread(target=attempt, name="clinjudge-ray-probe", daemon=True)
    thread.start()
    thread.join(wait)
    return outcome[0] if outcome else f"no answer within {wait:g} s"


def check_reachable(address: str | None, timeout_s: float | None = None) -> None:
    """Fail in one line, within a bounded time, when ``--ray`` names a cluster that cannot be
    reached: called before anything is written. Ray itself would retry for ten minutes and
    more, printing only its own log lines.

    A TCP connection to the head's port is opened and closed (the host name resolved first);
    ``local`` (Ray starts here) and ``auto`` (Ray finds the address) are left to Ray, and
    :func:`ray_init` bounds their join. A process that has joined a Ray already uses it.

    Args:
        address: The ``--ray`` value's address (:func:`ray_address`).
        timeout_s: The wait (:func:`connect_timeout`).

    Raises:
        RayConnectError: No connection within the wait (refused, unknown host, no answer).
        RayDependencyError: A ``ray://`` address without Ray Client's package.
        UserError: An address without a port, or a wait that is not seconds above 0.
    """
    target = _joined_address(address)
    ray = sys.modules.get("ray")
    if target in (None, LOCAL, "auto") or (ray is not None and ray.is_initialized()):
        return
    if "://" in target:
        if not target.startswith("ray://"):
            return  # another Ray Client scheme: Ray's own handling
        _require_client()
    host, port = _host_port(target)
    wait = connect_timeout(timeout_s)
    why = _tcp_answer(host, port, wait)
    if why is not None:
        raise RayConnectError(f"cannot reach the Ray cluster at {_named(address, target)}: "
                              f"{why}{_wait_hint(why)}", setting="ray")  # fmt: skip


def _named(address: str | None, target: str) -> str:
    return target if target == address else f"{target} (from $RAY_ADDRESS)"


def _wait_hint(why: str) -> str:
    return f" (${CONNECT_TIMEOUT_ENV} sets the wait)" if why.startswith("no answer") else ""


def refuse_ray_client(address: str | None) -> None:
    """PRM scoring on Ray cannot go through Ray Client: its Ray Dataset streams on the driver,
    which must be a node of the cluster (over ``ray://`` Ray Data fails with ``'Worker' object
    has no attribute 'core_worker'``). Refused before anything is written.

    Args:
        address: The ``--ray`` value's address (:func:`ray_address`).

    Raises:
        UserError: The address (or ``$RAY_ADDRESS`` in its place) is a ``ray://`` one.
    """
    target = _joined_address(address)
    if target is not None and target.startswith("ray://"):
        raise UserError(f"--ray {_named(address, target)}: PRM scoring does not run through Ray "
                        "Client (ray://), whose driver is not a node of the cluster, as Ray Data "
                        "needs: give the head's HOST:PORT (e.g. 10.0.0.5:6379), or run judge on "
                        "a node of the cluster with --ray auto", setting="ray")  # fmt: skip


def _require_client() -> None:
    """Ray Client (``ray://``) needs grpcio, which ``ray[data]`` alone does not install."""
    try:
        import grpc  # noqa: F401
    except ImportError as exc:
        raise RayDependencyError(RAY_CLIENT_HINT) from exc


class _WithoutSigtermNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


@dataclass
class _Join:
    """A ``ray.init`` joining a cluster, in a daemon thread, and how it ended."""

    target: str
    thread: threading.Thread | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


_JOINING: _Join | None = None
"""A join that ran past its wait and may still be going (the next call waits for it again)."""
_JOINING_LOCK = threading.Lock()


def ray_init(ray: Any, address: str | None, *, timeout_s: float | None = None) -> bool:
    """Join or start Ray; True when this call started (and so must stop) it.

    Starting a Ray here takes Ray's own time. Joining a cluster waits at most the connect
    timeout, then fails naming the address: ``ray.init`` runs in a daemon thread, since Ray
    retries an address that does not answer for ten minutes and more, and Ctrl-C could not
    stop it until its current attempt ended. Off the main thread Ray also leaves the
    process's SIGTERM handling alone.

    Args:
        ray: The ray module.
        address: None starts a local Ray (unless this process already joined one); ``auto``,
            ``HOST:PORT`` or ``ray://HOST:PORT`` joins that cluster.
        timeout_s: The wait for a cluster to answer (:func:`connect_timeout`).

    Raises:
        RayConnectError: The cluster did not answer in time, or refused the driver.
    """
    if ray.is_initialized():
        return False
    options = {
        "address": address,
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
    }
    target = _joined_address(address)
    if target in (None, LOCAL):  # Ray starts here (``local`` may come from $RAY_ADDRESS)
        ray.init(**options)
        return True
    wait = connect_timeout(timeout_s)
    join = _start_join(ray, options, target)
    if not join.done.wait(wait):
        why = f"no answer within {wait:g} s"
        raise RayConnectError(f"cannot reach the Ray cluster at {_named(address, target)}: "
                              f"{why}{_wait_hint(why)}", setting="ray")  # fmt: skip
    if join.error is not None:
        why = error_line(join.error)
        raise RayConnectError(f"cannot join the Ray cluster at {_named(address, target)}: {why}",
                              setting="ray") from join.error  # fmt: skip
    return True


def _start_join(ray: Any, options: dict[str, Any], target: str) -> _Join:
    """A new join, or the one still going from an earlier call (never two at once).

    Raises:
        RayConnectError: An earlier join to another address is still going.
    """
    global _JOINING
    with _JOINING_LOCK:
        join = _JOINING
        if join is not None and not join.done.is_set():
            if join.target != target:
                raise RayConnectError(f"cannot reach the Ray cluster at {target}: an earlier "
                                      f"join of {join.target} is still waiting for an answer",
                                      setting="ray")  # fmt: skip
            return join
        join = _JOINING = _Join(target)

    def run() -> None:
        worker_log = logging.getLogger("ray._private.worker")
        quiet = _WithoutSigtermNotice()
        worker_log.addFilter(quiet)
        try:
            ray.init(**options)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            join.error = exc
        finally:
            worker_log.removeFilter(quiet)
            join.done.set()

    join.thread = threading.Thread(target=run, name="clinjudge-ray-join", daemon=True)
    join.thread.start()
    return join


def replica_resources(
    ray: Any, replicas: int | None, *, cpu_only: bool
) -> tuple[int, dict[str, Any]]:
    """How many replicas, and the resources each asks Ray for.

    One replica per GPU of the cluster by default, each with one GPU; without GPUs (or on
    ``cpu``) one replica by default, and the replicas share the cluster's CPUs (Ray sets each
    actor's torch threads to its share).

    Args:
        ray: The ray module (initialised).
        replicas: The number asked for (None: the default above).
        cpu_only: The model runs on CPU even where the cluster has GPUs.
    """
    resources = ray.cluster_resources()
    gpus = 0 if cpu_only else int(resources.get("GPU", 0))
    count = replicas or max(gpus, 1)
    if gpus:
        return count, {"num_gpus": 1}
    cpus = int(resources.get("CPU", 1))
    return count, {"num_cpus": max(1, cpus // count)}


def inject_faults() -> None:
    """Act on the test faults armed in ``$CLINJUDGE_RAY_FAULTS`` (see :data:`RAY_FAULTS_ENV`);
    called by a replica before each batch. Does nothing when the variable is unset."""
    folder = os.environ.get(RAY_FAULTS_ENV)
    if not folder:
        return
    delay = Path(folder, "delay_s")
    if delay.exists():
        time.sleep(float(delay.read_text() or 0))
    trigger = Path(folder, "exit_once")
    try:
        trigger.rename(Path(folder, f"exited.{os.getpid()}"))
    except OSError:
        return
    os._exit(1)


def duration(seconds: float) -> str:
    """``1h02m`` or ``3m05s``."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def error_line(exc: BaseException) -> str:
    """One line for a Ray failure: the innermost ``...Error: message`` line of its text (Ray
    wraps a worker's traceback, e.g. a model that cannot load there), else the first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    causes = [line for line in lines if re.match(r"^[\w.]*(Error|Exception): ", line)]
    return causes[-1] if causes else f"{type(exc).__name__}: {lines[0] if lines else ''}"
