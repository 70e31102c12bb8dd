"""Shared fixtures: a fake OpenAI server on loopback, a tiny dataset, an isolated database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import clinjudge  # noqa: F401 - sets the offline environment before anything imports litellm
from clinjudge.rubrics import Rubric, load_rubric
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A started fake OpenAI-compatible server answering valid PDSQI-9 JSON."""
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="session")
def pdsqi9() -> Rubric:
    """The built-in PDSQI-9 rubric."""
    return load_rubric("pdsqi9")


@pytest.fixture
def items_file(tmp_path: Path) -> Path:
    """A JSONL file of 6 valid items."""
    return write_jsonl(tmp_path / "items.jsonl", make_items(6))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Path for a fresh DuckDB file."""
    return tmp_path / "runs" / "test.duckdb"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_judge_script: the test runs the installed `judge` console script"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Checked per test, so a missing script skips only those tests (and fails them under CI).
    if item.get_closest_marker("needs_judge_script") is not None:
        from tests.cli._helpers import JUDGE
        from tests.requirements import require_judge_script

        require_judge_script(JUDGE)
