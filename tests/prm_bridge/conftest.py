"""One local Ray for every Ray test of this folder: starting one costs seconds per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.prm_bridge._ray_support import local_ray


@pytest.fixture(scope="package")  # stopped once this folder is done
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(GCS address, fault folder) of the Ray started for these tests, on first use."""
    faults = tmp_path_factory.mktemp("ray-faults")
    with local_ray(faults) as address:
        yield address, faults


@pytest.fixture
def ray_faults(ray_cluster: tuple[str, Path]) -> Path:
    """The fault folder the Ray workers read (see ``local_ray``)."""
    return ray_cluster[1]
