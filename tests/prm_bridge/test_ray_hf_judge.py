"""`judge run --model hf/... --ray`: the local judge's replicas on a local Ray started here (2
CPUs), with a tiny random chat model built here.

The run loop stays in the driver; only the batches go to the replicas. Decoding is greedy, and
one process decodes a request the same whatever batch it shares (test_hf_local.py checks that),
so a run on Ray must store what the same run stores in one process, reply for reply, even when
a replica dies mid-run and its batch runs again on the restarted replica. The module shares
its Ray with the other Ray tests of this folder (``ray_faults`` in conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clinjudge.orchestration import run_config_from
from tests.cli._helpers import invoke, query
from tests.factories import make_items, write_jsonl
from tests.judges.clients._hf_models import save_tiny_chat_model

PANEL = ("--mode", "panel", "--personas", "high_scorer,low_scorer")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random chat model saved as a checkpoint folder."""
    return save_tiny_chat_model(tmp_path_factory.mktemp("hf-ray") / "tiny")


def _judge(folder: Path, model: Path, *extra: str) -> tuple[Path, str]:
    """A 2-member panel on 3 items with the local model; (db, run id)."""
    folder.mkdir()
    # ProbSum's short rubric keeps the prompts (and the CPU time) small; it needs a reference.
    items = [i.model_copy(update={"reference": f"Cough; fever day {n}."})
             for n, i in enumerate(make_items(3))]  # fmt: skip
    data = write_jsonl(folder / "items.jsonl", items)
    db = folder / "runs.duckdb"
    result = invoke(
        "run", "--data", str(data), "--model", f"hf/{model}", *PANEL, "--rubric", "probsum",
        "--temperature", "0", "--max-tokens", "32", "--samples", "1", "--concurrency", "8",
        "--timeout", "600",        "--db", str(db), "--no-progress", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return db, result.stdout.strip().splitlines()[-1]


def _stored(db: Path, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """What a run stored that a model's replies decide (ids and timings left out)."""
    return {
        "calls": query(
            db,
            "SELECT item_id, sample, agent, role, seq, model, prompt_tokens, completion_tokens, "
            "tokens_estimated, status, finish_reason FROM calls WHERE run_id = ? "
            "ORDER BY item_id, sample, agent, seq",
            [run_id],
        ),
        "messages": query(
            db,
            "SELECT item_id, sample, agent, seq, role, content FROM messages WHERE run_id = ? "
            "ORDER BY item_id, sample, agent, seq",
            [run_id],
        ),
        "judgments": query(
            db,
            "SELECT item_id, sample, agent, attribute, value, final, rationale FROM judgments "
            "WHERE run_id = ? ORDER BY item_id, sample, agent, attribute, final",
            [run_id],
        ),
    }


def test_a_run_on_ray_stores_what_one_process_stores_even_when_a_replica_dies(
    ray_faults: Path,
    tiny_model: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLINJUDGE_HF_MAX_BATCH", "2")  # 6 calls together: 3 batches, 2 replicas
    db, run_id = _judge(tmp_path / "local", tiny_model)
    before = set(ray_faults.glob("exited.*"))
    (ray_faults / "exit_once").write_text("", encoding="utf-8")  # the first batch's replica dies
    with caplog.at_level("INFO", logger="clinjudge.judges.clients._hf_ray"):
        ray_db, ray_run = _judge(tmp_path / "ray", tiny_model, "--ray", "local",
                                 "--ray-replicas", "2")  # fmt: skip
    assert not (ray_faults / "exit_once").exists()
    assert len(set(ray_faults.glob("exited.*")) - before) == 1, "no replica took the fault"
    local, on_ray = _stored(db, run_id), _stored(ray_db, ray_run)
    # 3 items x 2 members, each call stored once: the retried batch is not stored twice.
    assert len(local["calls"]) == 6 and all(c[9] == "ok" for c in local["calls"])
    assert len({(c[0], c[2]) for c in on_ray["calls"]}) == len(on_ray["calls"])
    assert all(not c[8] and c[6] > 100 for c in on_ray["calls"])  # the tokenizer's counts
    assert on_ray == local
    assert len({j[6] for j in local["judgments"]}) > 1  # replies differ: a real comparison
    # Both replicas served, and the driver logged what each did.
    lines = [r.getMessage() for r in caplog.records]
    replicas = [line for line in lines if ": replica " in line]
    assert len(replicas) >= 2 and all("tokens/s" in line for line in replicas)
    assert any("replicas ready" in line for line in lines)
    config = query(ray_db, "SELECT config FROM runs WHERE run_id = ?", [ray_run])[0][0]
    assert '"ray": "local"' in config and '"ray_replicas": 2' in config  # a resume reuses them


def test_ray_settings_go_to_the_hf_models_and_the_prm_only() -> None:
    both = run_config_from(
        {"model": "hf/some/model", "ray": "auto", "ray_replicas": 2, "prm": "prm/dir",
         "role_model": ["orchestrator=openai/o3-mini", "chair=hf/other/model"]}
    )  # fmt: skip
    assert assert_ray(both.judge) == ("auto", 2)
    assert assert_ray(both.roles["chair"]) == ("auto", 2)
    assert assert_ray(both.roles["orchestrator"]) == (None, None)
    assert both.prm is not None and (both.prm.ray, both.prm.ray_replicas) == ("auto", 2)
    api = run_config_from({"model": "openai/gpt-4o-mini", "ray": "auto", "prm": "prm/dir"})
    assert assert_ray(api.judge) == (None, None) and api.prm is not None
    assert api.prm.ray == "auto"


def assert_ray(settings: Any) -> tuple[Any, Any]:
    return settings.ray, settings.ray_replicas


def test_ray_with_an_api_judge_and_no_prm_is_refused_in_one_line(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    for model in ("openai/gpt-4o-mini", "mock/judge"):
        result = invoke("run", "--data", str(data), "--model", model, "--ray", "local",
                        "--db", str(tmp_path / "runs.duckdb"), "--no-progress")  # fmt: skip
        assert result.exit_code == 2
        message = result.stderr.strip()
        assert "hf/ judge models" in message and "--shard" in message and model in message
        assert len(message.splitlines()) == 1
    # A config file cannot put an API judge on Ray either.
    config = tmp_path / "run.yaml"
    config.write_text("judge:\n  model: openai/gpt-4o-mini\n  ray: local\n", encoding="utf-8")
    result = invoke("run", "--data", str(data), "--config", str(config),
                    "--db", str(tmp_path / "runs.duckdb"), "--no-progress")  # fmt: skip
    assert result.exit_code == 2 and "only hf/ models run on Ray" in result.stderr
    assert not (tmp_path / "runs.duckdb").exists()


def test_without_ray_an_hf_judge_on_ray_is_one_line_and_nothing_is_written(
    tiny_model: Path, tmp_path: Path
) -> None:
    # As on a machine without the extra: `import ray` fails.
    blocker = "import sys; sys.modules['ray'] = None\nfrom clinjudge.cli import main; main()\n"
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    db = tmp_path / "runs.duckdb"
    done = subprocess.run(
        [sys.executable, "-c", blocker, "run", "--data", str(data), "--model",
         f"hf/{tiny_model}", "--ray", "local", "--db", str(db), "--no-progress"],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "error: --ray needs Ray: pip install 'clinjudge[ray]'"
    assert not db.exists()
