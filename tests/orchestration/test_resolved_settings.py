"""Resolve once, store once: personas stored with the run, modes from the workflow registry,
mode-specific settings nested and rejected in another mode."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from clinjudge.judges import ModelSettings
from clinjudge.judges.workflows import register_workflow
from clinjudge.judges.workflows._registry import _WORKFLOWS, single_workflow
from clinjudge.orchestration import (
    ConfigError,
    RetryPolicy,
    RunConfig,
    create_run,
    estimate_run,
    execute_run,
    load_stored_run,
    prepare_run,
    run_config_from,
)
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

FAST = RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.05, jitter=0.01)
N_ITEMS = 2


def write_personas(path: Path, wording: str, names: tuple[str, str] = ("strict_md", "chair_md")):
    """A two-persona set whose second persona moderates; ``wording`` tags every message."""
    member, chair = names
    path.write_text(
        f"""name: trial
description: Two reviewers for the tests
moderator: {chair}
personas:
  - name: {member}
    display_name: Strict reviewer
    description: Grades harshly.
    system_message: "You are the strict reviewer ({wording}). End with the rubric JSON."
    stance: strict
  - name: {chair}
    display_name: Chair
    description: Moderates the panel.
    system_message: "You moderate the panel ({wording}). End with the rubric JSON."
    stance: moderator
    role: moderator
""",
        encoding="utf-8",
    )
    return path


def config_for(tmp_path: Path, server: FakeOpenAIServer, **kw: Any) -> RunConfig:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(N_ITEMS))
    judge = ModelSettings(model="openai/local-judge", base_url=server.base_url, timeout=5.0)
    return RunConfig(data=str(data), judge=judge, db=str(tmp_path / "r.duckdb"), retry=FAST, **kw)


def system_texts(server: FakeOpenAIServer, start: int = 0) -> list[str]:
    return [body["messages"][0]["content"] for body in server.requests[start:]]


def canonical_digest(data: Any) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces), first 16 hex digits."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# -- personas: resolved once, stored with the run ----------------------------------------------


@pytest.mark.parametrize("mode", ["panel", "magentic"])
def test_resume_after_the_persona_file_changed_runs_the_original_wording(
    tmp_path: Path, fake_openai: FakeOpenAIServer, mode: str
) -> None:
    persona_file = write_personas(tmp_path / "personas.yaml", "wording v1")
    extra = {"planning": False} if mode == "magentic" else {}
    config = config_for(tmp_path, fake_openai, mode=mode, personas=str(persona_file), **extra)
    prepared = prepare_run(config)
    with RunStore(config.db) as store:
        run_id = create_run(store, prepared)  # stopped before any sample was judged
    write_personas(persona_file, "wording v2")
    with RunStore(config.db) as store:
        full_id, stored = load_stored_run(store, run_id)
        tally = execute_run(store, full_id, stored, show_progress=False)
        agents = {r["agent"] for r in store.query("SELECT agent FROM calls")}
    assert tally.failed == 0 and tally.ok == N_ITEMS
    persona_systems = [s for s in system_texts(fake_openai) if "(wording v" in s]
    # Every persona call of every item, moderator included, with the wording of the start.
    assert len(persona_systems) == 2 * N_ITEMS
    assert all("wording v1" in s for s in persona_systems)
    assert not any("wording v2" in s for s in system_texts(fake_openai))
    assert {"strict_md", "chair_md"} <= agents


def test_personas_are_stored_with_their_fingerprint_and_moderator(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    persona_file = write_personas(tmp_path / "personas.yaml", "wording v1")
    config = config_for(tmp_path, fake_openai, mode="panel", personas=str(persona_file))
    prepared = prepare_run(config)
    with RunStore(config.db) as store:
        run_id = create_run(store, prepared)
        stored = store.get_run(run_id)["config"]
    data = stored["personas_data"]
    assert data["moderator"] == "chair_md"
    assert [p["name"] for p in data["personas"]] == ["strict_md", "chair_md"]
    assert [p["role"] for p in data["personas"]] == ["member", "moderator"]
    assert data["personas"][0]["system_message"].endswith("(wording v1). End with the rubric JSON.")
    assert stored["personas_fingerprint"] == canonical_digest(data)
    assert stored["personas"] == str(persona_file)  # the name stays, for people to read
    # Resume rebuilds the same set, moderator and all, with the file gone.
    persona_file.unlink()
    with RunStore(config.db, read_only=True) as store:
        _, again = load_stored_run(store, run_id)
    assert again.personas == prepared.personas
    assert again.personas is not None and again.personas.moderator == "chair_md"


def test_a_single_run_stores_no_personas(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    config = config_for(tmp_path, fake_openai, personas="no_such_set_or_file")
    prepared = prepare_run(config)  # single mode seats no personas: the spec is never read
    assert prepared.personas is None
    with RunStore(config.db) as store:
        stored = store.get_run(create_run(store, prepared))["config"]
    assert "personas_data" not in stored


def test_an_older_database_without_stored_personas_resolves_the_name_with_a_warning(
    tmp_path: Path, fake_openai: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    persona_file = write_personas(tmp_path / "personas.yaml", "wording v1")
    config = config_for(tmp_path, fake_openai, mode="panel", personas=str(persona_file))
    with RunStore(config.db) as store:
        run_id = create_run(store, prepare_run(config))
        stored = store.get_run(run_id)["config"]
        for key in ("personas_data", "personas_fingerprint"):
            del stored[key]  # as an older version wrote it
        store.con.execute(
            "UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(stored), run_id]
        )
    write_personas(persona_file, "wording v2")
    with caplog.at_level(logging.WARNING), RunStore(config.db) as store:
        full_id, old = load_stored_run(store, run_id)
        execute_run(store, full_id, old, show_progress=False)
    assert any("stored without its personas" in r.getMessage() for r in caplog.records)
    systems = system_texts(fake_openai)
    assert len(systems) == 2 * N_ITEMS and all("wording v2" in s for s in systems)


def test_estimates_use_the_prepared_personas(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    persona_file = write_personas(tmp_path / "personas.yaml", "wording v1")
    config = config_for(tmp_path, fake_openai, mode="panel", personas=str(persona_file))
    panel = prepare_run(config)
    persona_file.unlink()  # nothing reads the file after preparation
    single = prepare_run(config.model_copy(update={"mode": "single"}))
    panel_estimate, single_estimate = estimate_run(panel), estimate_run(single)
    assert panel_estimate.prompts == 2 * single_estimate.prompts == 2 * N_ITEMS
    assert panel_estimate.prompt_tokens > 2 * single_estimate.prompt_tokens


def test_a_workflow_reads_the_prepared_personas_not_the_file(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    persona_file = write_personas(tmp_path / "personas.yaml", "wording v1")
    config = config_for(tmp_path, fake_openai, mode="panel", personas=str(persona_file))
    prepared = prepare_run(config)
    persona_file.unlink()
    with RunStore(config.db) as store:
        run_id = create_run(store, prepared)
        tally = execute_run(store, run_id, prepared, show_progress=False)
    assert tally.ok == N_ITEMS
    assert all("wording v1" in s for s in system_texts(fake_openai))


def test_shards_of_one_run_agree_only_when_their_personas_read_the_same(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    persona_file = write_personas(tmp_path / "personas.yaml", "wording v1")
    config = config_for(
        tmp_path, fake_openai, mode="panel", personas=str(persona_file), shard="1/2"
    )
    first = prepare_run(config).run_id
    assert prepare_run(config.model_copy(update={"shard": "2/2"})).run_id == first
    write_personas(persona_file, "wording v2")
    assert prepare_run(config).run_id != first


# -- modes come from the workflow registry -----------------------------------------------------


def test_an_unknown_mode_lists_the_registered_modes() -> None:
    with pytest.raises(ConfigError) as caught:
        run_config_from({"mode": "jury", "model": "mock/judge"})
    message = str(caught.value)
    assert "field mode" in message and "unknown mode 'jury'" in message
    assert "registered modes: magentic, panel, single" in message


def test_a_registered_workflow_is_a_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_WORKFLOWS, "echo", _WORKFLOWS["single"])  # removed after the test
    register_workflow("echo", "judge", single_workflow)
    assert run_config_from({"mode": "echo", "model": "mock/judge"}).mode == "echo"
    with pytest.raises(ConfigError, match="registered modes: echo, magentic, panel, single"):
        run_config_from({"mode": "jury", "model": "mock/judge"})


# -- mode-specific settings: nested sections, rejected in another mode -------------------------

MODE_ONLY = [
    ("panel_aggregate", "mean", "panel"),
    ("rounds", 2, "magentic"),
    ("max_turns", 30, "magentic"),
    ("max_stalls", 5, "magentic"),
    ("blind_first_round", True, "magentic"),
    ("planning", False, "magentic"),
]


@pytest.mark.parametrize(("field", "value", "owner"), MODE_ONLY)
def test_a_setting_of_another_mode_is_rejected(field: str, value: Any, owner: str) -> None:
    for mode in ("single", "panel", "magentic"):
        options = {"mode": mode, "model": "mock/judge", field: value}
        if mode == owner:
            assert getattr(run_config_from(options), field) == value
            continue
        with pytest.raises(ConfigError) as caught:
            run_config_from(options)
        message = str(caught.value)
        assert field in message and f"{owner} mode only" in message and repr(mode) in message


def test_defaults_and_unset_options_are_never_rejected() -> None:
    # None is how the CLI passes a flag that was not given.
    options = {name: None for name, _, _ in MODE_ONLY}
    config = run_config_from({"mode": "single", "model": "mock/judge", **options})
    assert (config.rounds, config.panel_aggregate, config.planning) == (1, "median", True)


def test_nested_sections_set_the_same_fields() -> None:
    panel = run_config_from(
        {"mode": "panel", "model": "mock/judge", "panel": {"aggregate": "mean"}}
    )
    assert panel.panel_aggregate == "mean"
    magentic = run_config_from(
        {
            "mode": "magentic",
            "model": "mock/judge",
            "magentic": {"rounds": 2, "max_turns": 30, "blind_first_round": True},
        }
    )
    assert (magentic.rounds, magentic.max_turns, magentic.blind_first_round) == (2, 30, True)
    with pytest.raises(ConfigError, match=r"rounds \(magentic.rounds\) applies to magentic"):
        run_config_from({"mode": "panel", "model": "mock/judge", "magentic": {"rounds": 2}})


def test_a_config_file_setting_is_given_when_present(tmp_path: Path) -> None:
    config_file = tmp_path / "judge.yaml"
    # The default value, but written in the file: given, so it is checked.
    config_file.write_text("mode: single\nrounds: 1\n")
    with pytest.raises(ConfigError, match=rf"{config_file}: rounds .* magentic mode only"):
        run_config_from({"config": str(config_file), "model": "mock/judge"})
    config_file.write_text("mode: magentic\nmagentic:\n  rounds: 3\n  planning: false\n")
    config = run_config_from({"config": str(config_file), "model": "mock/judge"})
    assert (config.mode, config.rounds, config.planning) == ("magentic", 3, False)
    # An option beats the file's nested value, as for any setting.
    assert run_config_from({"config": str(config_file), "rounds": 2}).rounds == 2
    # Switching the mode by option leaves the file's magentic settings unused: an error.
    with pytest.raises(ConfigError, match="magentic mode only, but the mode is 'panel'"):
        run_config_from({"config": str(config_file), "mode": "panel"})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"magentic": {"roundz": 2}}, "unknown setting magentic.roundz; magentic settings are"),
        ({"panel": "mean"}, "panel must be a section of panel-mode settings"),
        ({"rounds": 2, "magentic": {"rounds": 3}}, "rounds and magentic.rounds are the same"),
    ],
)
def test_bad_sections_are_named(settings: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        run_config_from({"mode": "magentic", "model": "mock/judge", **settings})
    config_file = tmp_path / "judge.yaml"
    config_file.write_text(json.dumps({"mode": "magentic", **settings}))  # JSON is YAML
    with pytest.raises(ConfigError, match=message):
        run_config_from({"config": str(config_file), "model": "mock/judge"})


def test_timeout_retries_sets_the_retry_section(tmp_path: Path) -> None:
    assert run_config_from({"model": "mock/judge"}).retry.timeout_retries == 1
    config = tmp_path / "judge.yaml"
    config.write_text("retry: {max_attempts: 3, timeout_retries: 0}\n")
    from_file = run_config_from({"config": str(config)})
    assert (from_file.retry.max_attempts, from_file.retry.timeout_retries) == (3, 0)
    # The option wins over the file and keeps the section's other keys.
    both = run_config_from({"config": str(config), "timeout_retries": 4})
    assert (both.retry.max_attempts, both.retry.timeout_retries) == (3, 4)
    policy = run_config_from({"model": "mock/judge", "retry": FAST, "timeout_retries": 2}).retry
    assert (policy.max_attempts, policy.timeout_retries) == (FAST.max_attempts, 2)
