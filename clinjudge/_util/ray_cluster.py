"""What every ``--ray`` path shares: importing Ray, joining or starting it, sizing the replicas,
and the fault injection the tests use.

PRM scoring (:mod:`clinjudge.prm_bridge._ray_runner`) and the ``hf/`` judge on Ray
(:mod:`clinjudge.judges.clients._hf_ray`) both use these. Ray itself is imported only when a
function here is called: ``pip install 'clinjudge[ray]'``.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from clinjudge.errors import UserError

RAY_EXTRA = "ray"
RAY_INSTALL_HINT = f"--ray needs Ray: pip install 'clinjudge[{RAY_EXTRA}]'"
RAY_FAULTS_ENV = "CLINJUDGE_RAY_FAULTS"
"""Fault injection for tests: a folder on the workers' machine. A replica that finds a file
``exit_once`` there renames it away (only one replica wins) and exits hard before its batch;
a file ``delay_s`` holds seconds each batch waits first."""
LOCAL = "local"
"""The ``--ray`` value that starts a Ray in this process (or uses the one it joined)."""


class RayDependencyError(UserError, ImportError):
    """``--ray`` was asked for, but Ray is not installed."""


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


def ray_init(ray: Any, address: str | None) -> bool:
    """Join or start Ray; True when this call started (and so must stop) it.

    Args:
        ray: The ray module.
        address: None starts a local Ray (unless this process already joined one); ``auto``
            or ``HOST:PORT`` joins that cluster.
    """
    if ray.is_initialized():
        return False
    ray.init(
        address=address,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    return True


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
