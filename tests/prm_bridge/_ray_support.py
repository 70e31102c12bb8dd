"""A local Ray (2 CPUs) for one test module, with the fault-injection folder its workers read."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from clinjudge._util.ray_cluster import RAY_FAULTS_ENV
from tests.requirements import require_module


@contextmanager
def local_ray(faults: Path) -> Iterator[str]:
    """Start Ray here and yield its GCS address; the workers inherit ``CLINJUDGE_RAY_FAULTS``
    (set before ``ray.init``), so each test can arm the faults it needs in ``faults``.

    Args:
        faults: The folder of fault triggers.
    """
    ray = require_module("ray")
    require_module("ray.data")
    saved = os.environ.get(RAY_FAULTS_ENV)
    os.environ[RAY_FAULTS_ENV] = str(faults)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop(RAY_FAULTS_ENV, None)
        else:
            os.environ[RAY_FAULTS_ENV] = saved
