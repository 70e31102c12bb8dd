"""Builders of test data shared by the suites (importable; fixtures live in conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from clinjudge.rubrics import Item
from tests.fake_openai import LIKERT_KEYS


def make_items(count: int, prefix: str = "item") -> list[Item]:
    """Small synthetic items (no clinical content needed for plumbing tests).

    Args:
        count: How many items.
        prefix: Item ids are ``{prefix}-0000``, ``{prefix}-0001``, ...
    """
    return [
        Item(
            id=f"{prefix}-{n:04d}",
            notes=[f"Visit {k}: synthetic note {k} for patient {n}." for k in (1, 2, 3)],
            summary=f"Synthetic summary {n} [Note 1] [Note 3].",
            specialty="Primary Care",
        )
        for n in range(count)
    ]


def write_jsonl(path: Path, items: list[Item]) -> Path:
    """Write items as JSONL and return the path.

    Args:
        path: The file to write.
        items: The items.
    """
    path.write_text("".join(json.dumps(i.model_dump(exclude_none=True)) + "\n" for i in items))
    return path


def mock_run(tmp: Path, count: int) -> Any:
    """Judge ``count`` small items with the simulated judge in ``tmp/x.duckdb``; the tally.

    Args:
        tmp: A folder for the data and the database.
        count: How many items.
    """
    from clinjudge.judges import ModelSettings
    from clinjudge.orchestration import RunConfig, create_run, execute_run, prepare_run
    from clinjudge.runs import RunStore

    data = write_jsonl(tmp / "items.jsonl", make_items(count))
    config = RunConfig(
        data=str(data), db=str(tmp / "x.duckdb"), judge=ModelSettings(model="mock/judge")
    )
    prepared = prepare_run(config)
    with RunStore(config.db) as store:
        run_id = create_run(store, prepared)
        return execute_run(store, run_id, prepared, show_progress=False)


def judged_doclens_run(tmp: Path) -> tuple[Path, str]:
    """Judge the two hand-checked DocLens items of tests/doclens_fake from the CLI, with a config
    file, on the fake server; returns the database and the run id.

    Args:
        tmp: A folder for the data, config and database.
    """
    from tests.cli._helpers import invoke
    from tests.doclens_fake import ITEMS, make_responder
    from tests.fake_openai import FakeOpenAIServer

    data = write_jsonl(tmp / "items.jsonl", ITEMS)
    db = tmp / "runs.duckdb"
    with FakeOpenAIServer(make_responder()) as server:
        config = {
            "rubric": "doclens",
            "data": str(data),
            "db": str(db),
            "judge": {"model": "openai/local-judge", "base_url": server.base_url},
            "doclens": {"max_citations": 10, "uncited": "borrow_next", "citation_base": 0},
        }
        (tmp / "judge.yaml").write_text(yaml.safe_dump(config))
        result = invoke("run", "--config", str(tmp / "judge.yaml"), "--no-progress")
    assert result.exit_code == 0, result.stderr
    return db, result.stdout.strip()


# Scripted panel: the fake server answers each built-in scoring persona with a fixed rating.

RATINGS: dict[str, dict[str, Any]] = {
    "high_scorer": {
        **dict.fromkeys(LIKERT_KEYS, 5),
        "abstraction": 1,
        "synthesized": 5,
        "voice_summ": 0,
        "voice_note": 0,
    },
    "low_scorer": {
        **dict.fromkeys(LIKERT_KEYS, 1),
        "abstraction": 0,
        "synthesized": None,
        "voice_summ": 1,
        "voice_note": 1,
    },
    "middle_scorer": {
        **dict.fromkeys(LIKERT_KEYS, 4),
        "abstraction": 1,
        "synthesized": 2,
        "voice_summ": 0,
        "voice_note": 1,
    },
}


def persona_of(body: dict[str, Any]) -> str:
    """Which persona sent a request, from the text of its system message."""
    system = body["messages"][0]
    assert system["role"] == "system"
    text = system["content"]
    if "the unfavourable end" in text:
        return "low_scorer"
    if "the favourable end" in text:
        return "high_scorer"
    if "moderator of a panel" in text:
        return "middle_scorer"
    raise AssertionError("request from no known persona")


def responder(body: dict[str, Any]) -> dict[str, Any]:
    return {**RATINGS[persona_of(body)], "rationale": f"as {persona_of(body)}"}


@contextmanager
def small_tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (e.g. ``3m``) mounted under ``tmp_path``, for real full-disk tests.

    Needs root, as in CI; the test is skipped where mounting is not allowed.
    """
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
