"""Things a run decides once (#24): whether it is simulated, its personas, its model pool, the
batch check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import clinjudge
from clinjudge.judges import ModelSettings
from clinjudge.judges.doclens import doclens_estimate_prompts
from clinjudge.orchestration import RunConfig, prepare_run
from clinjudge.orchestration._context import ModelPool
from clinjudge.personas import resolve_personas
from clinjudge.rubrics import load_rubric
from tests.cli._helpers import invoke
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer


def test_simulated_counts_every_role() -> None:
    real = ModelSettings(model="openai/gpt-4o-mini")
    mixed = RunConfig(judge=real, roles={"orchestrator": ModelSettings(model="mock/chair")})
    assert mixed.simulated and not RunConfig(judge=real).simulated
    assert ModelPool(mixed, load_rubric("pdsqi9")).simulated  # the pool asks the config


def test_the_model_pool_is_built_once_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[int] = []
    real_init = ModelPool.__init__

    def init(self: ModelPool, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(ModelPool, "__init__", init)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    result = clinjudge.evaluate(data, model="mock/judge", db=tmp_path / "x.duckdb")
    assert result.simulated and len(built) == 1


def test_personas_are_resolved_when_the_run_is_prepared_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    config = RunConfig(
        data=str(data), mode="panel", judge=ModelSettings(model="mock/judge"), db="x.duckdb"
    )
    prepared = prepare_run(config)
    assert prepared.personas is not None

    def resolve_again(spec: object) -> Any:
        raise AssertionError(f"personas resolved again from {spec!r}")

    import clinjudge.orchestration._context as context

    monkeypatch.setattr(context, "resolve_personas", resolve_again)
    pool = ModelPool(config, prepared.rubric, personas=prepared.personas)
    assert [p.name for p in pool.personas] == [p.name for p in prepared.personas.personas]
    assert ModelPool(config, prepared.rubric).personas == []  # given none, it seats none
    # The dry-run estimate counts the members it is given, and never looks them up itself.
    one = doclens_estimate_prompts(prepared.items[0], config)
    five = doclens_estimate_prompts(prepared.items[0], config, resolve_personas("scoring"))
    assert len(five) > len(one)


def test_a_batch_run_is_checked_once(
    items_file: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import clinjudge._api as api
    import clinjudge.orchestration._batch_run as batch_run

    checks: list[str] = []
    real = batch_run.check_batch_config

    def check(*args: Any, **kwargs: Any) -> None:
        checks.append("check")
        real(*args, **kwargs)

    monkeypatch.setattr(api, "check_batch_config", check)
    monkeypatch.setattr(batch_run, "check_batch_config", check)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local endpoint needs no key
    with FakeOpenAIServer() as server:
        result = invoke(
            "run", "--data", str(items_file), "--model", "openai/gpt-4o-mini",
            "--base-url", server.base_url, "--db", str(db_path), "--batch",
            "--poll-interval", "0", "--no-progress",
        )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert checks == ["check"]
