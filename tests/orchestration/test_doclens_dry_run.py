"""`--dry-run` with a claim rubric counts DocLens's real prompts (extraction, entailment,
citations; per member in panel modes) and writes nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clinjudge.judges import ModelSettings, count_message_tokens
from clinjudge.judges.doclens import doclens_estimate_prompts
from clinjudge.orchestration import RunConfig, estimate_run, prepare_run
from tests.cli._helpers import invoke, query

DEMO = str(Path(__file__).resolve().parents[2] / "examples" / "doclens_demo.jsonl")


def config(mode: str = "single", **extra: object) -> RunConfig:
    return RunConfig(
        rubric="doclens", data=DEMO, mode=mode, judge=ModelSettings(model="mock/judge"), **extra
    )


def dry_run_calls(tmp_path: Path, mode: str) -> tuple[int, str]:
    db = tmp_path / "sub" / "dry.duckdb"
    result = invoke(
        "run", "--rubric", "doclens", "--data", DEMO, "--db", str(db), "--mode", mode,
        "--dry-run",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert not db.parent.exists()  # nothing written
    found = re.search(r"model calls \(first attempts\)\s*│\s*(\d+)", result.stderr)
    assert found, result.stderr
    return int(found.group(1)), " ".join(result.stderr.split())


def test_estimate_counts_every_doclens_prompt() -> None:
    prepared = prepare_run(config())
    estimate = estimate_run(prepared)
    expected = [doclens_estimate_prompts(item, prepared.config) for item in prepared.items]
    sizes = [count_message_tokens([t.content for t in p]) for ps in expected for p in ps]
    assert estimate.prompts == len(sizes) > 3 * len(prepared.items)
    assert estimate.prompt_tokens == sum(sizes)
    assert estimate.max_prompt_tokens_one_call == max(sizes)
    assert "max_claims=30" in estimate.note
    assert "sentences stand in for its claims" in estimate.note
    twice = estimate_run(prepare_run(config(samples=2)))
    assert twice.prompts == 2 * estimate.prompts


def test_estimate_without_citations_sends_fewer_calls() -> None:
    full = estimate_run(prepare_run(config()))
    base = config()
    no_citations = base.model_copy(
        update={"doclens": base.doclens.model_copy(update={"citations": False})}
    )
    fewer = estimate_run(prepare_run(no_citations))
    assert fewer.prompts == 3 * 4  # two extractions and two batch entailments per item
    assert fewer.prompts < full.prompts
    assert "no citation calls" in fewer.note


@pytest.mark.parametrize("mode", ["single", "panel"])
def test_dry_run_matches_the_calls_of_a_mock_run(tmp_path: Path, mode: str) -> None:
    estimated, note = dry_run_calls(tmp_path, mode)
    assert estimated > 3  # more than one call per item
    db = tmp_path / "real.duckdb"
    result = invoke(
        "run", "--rubric", "doclens", "--data", DEMO, "--db", str(db), "--mode", mode,
        "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert query(db, "select count(*) from calls") == [(estimated,)]
    if mode == "panel":
        assert "each once per panel member" in note


def test_magentic_dry_run_counts_members_and_flags_the_discussion(tmp_path: Path) -> None:
    single, _ = dry_run_calls(tmp_path, "single")
    magentic, note = dry_run_calls(tmp_path, "magentic")
    extractions = 2 * 3
    assert magentic - extractions == 3 * (single - extractions)  # three personas
    assert "discussion of disputed claims" in note
