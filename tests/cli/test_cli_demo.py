"""A demo that shows something: `judge demo`, and simulated panels that spread by stance."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from clinjudge.rubrics import Polarity, load_rubric
from tests.cli._helpers import invoke, query
from tests.factories import make_items, write_jsonl

REPO_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_demo_writes_the_files_and_prints_commands(tmp_path: Path) -> None:
    target = tmp_path / "try"
    result = invoke("demo", str(target))
    assert result.exit_code == 0, result.stderr
    written = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    shipped = sorted(
        p.relative_to(REPO_EXAMPLES).as_posix()
        for p in REPO_EXAMPLES.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert written == shipped and "pdsqi9_demo.jsonl" in written
    assert (target / "pdsqi9_demo.jsonl").read_bytes() == (
        REPO_EXAMPLES / "pdsqi9_demo.jsonl"
    ).read_bytes()
    config = yaml.safe_load((target / "judge.yaml").read_text())
    assert config["data"] == f"{target.as_posix()}/pdsqi9_demo.jsonl"
    assert Path(config["shot_pool"]).exists()
    assert f"--data {target.as_posix()}/pdsqi9_demo.jsonl" in result.stdout
    assert "SIMULATED" in result.stderr

    again = invoke("demo", str(target))
    assert again.exit_code == 2 and "--force" in again.stderr
    assert invoke("demo", str(target), "--force").exit_code == 0


def _member_values(db: Path) -> dict[tuple[str, str], dict[str, float]]:
    rows = query(db, "SELECT item_id, attribute, agent, value FROM judgments WHERE NOT final")
    by: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for item, attribute, agent, value in rows:
        by[(item, attribute)][agent] = value
    return by


@pytest.fixture
def twelve_items(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "twelve.jsonl", make_items(12))


def test_simulated_panel_spreads_by_stance(twelve_items: Path, db_path: Path) -> None:
    result = invoke(
        "run", "--data", str(twelve_items), "--model", "mock/judge", "--mode", "panel",
        "--db", str(db_path), "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rubric = load_rubric("pdsqi9")
    values = _member_values(db_path)
    strictly = 0
    for attribute in rubric.attributes:
        if attribute.polarity != Polarity.higher_better or attribute.gate is not None:
            continue
        for n in range(12):
            v = values[(f"item-{n:04d}", attribute.key)]
            assert v["high_scorer"] >= v["middle_scorer"] >= v["low_scorer"], (n, attribute.key)
            strictly += v["high_scorer"] > v["low_scorer"]
    assert strictly > 12  # not a tie on most items
    # Items differ from each other (not one fixed score vector).
    per_item = {
        tuple(values[(f"item-{n:04d}", a.key)]["middle_scorer"] for a in rubric.attributes)
        for n in range(12)
    }
    assert len(per_item) > 3
    raw = query(db_path, "SELECT rationale FROM samples WHERE agent = 'high_scorer' LIMIT 1")
    assert "SIMULATED" in raw[0][0]


def test_simulated_chair_decides_between_the_members(twelve_items: Path, db_path: Path) -> None:
    result = invoke(
        "run", "--data", str(twelve_items), "--model", "mock/judge", "--mode", "magentic",
        "--db", str(db_path), "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    values = _member_values(db_path)
    members = ("high_scorer", "middle_scorer", "low_scorer")
    checked = 0
    for (_, attribute), by_agent in values.items():
        if attribute == "synthesized" or not all(m in by_agent for m in members):
            continue
        heard = [by_agent[m] for m in members if by_agent[m] is not None]
        assert min(heard) <= by_agent["orchestrator"] <= max(heard), (attribute, by_agent)
        checked += 1
    assert checked >= 12 * 9
    replies = query(
        db_path, "SELECT content FROM messages WHERE agent = 'orchestrator' AND role = 'assistant'"
    )
    final = [r[0] for r in replies if r[0].lstrip().startswith("[final]")]
    assert final and "SIMULATED" in json.loads(final[0].split("] ", 1)[1])["rationale"]
