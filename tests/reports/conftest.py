"""Fixtures of the viewer tests: one store of real runs, shared by the module's tests."""

from __future__ import annotations

import pytest

from tests.browser_support import browser  # noqa: F401 - the fixture, for the tests here
from tests.reports._store import ViewerStore, build_store


@pytest.fixture(scope="package")
def viewer_store(tmp_path_factory: pytest.TempPathFactory) -> ViewerStore:
    """A database holding single, magentic, DocLens, audit and (with torch) PRM runs."""
    return build_store(tmp_path_factory.mktemp("viewer"))
