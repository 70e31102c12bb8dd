"""`judge run --prm MODEL --ray local`: the PRM evidence is scored on Ray before judging, and the
run stores and prompts exactly what the same run scored in one process stores and prompts.

One Ray session (2 CPUs) serves every Ray test of this folder (``ray_cluster`` in conftest.py).
Every forward pass holds one chain in both paths (``batch_tokens: 256`` and chains longer than
128 tokens), so the step scores can be compared to the last bit: float sums depend on a batch's
shape, and one process groups the chains of concurrent samples as they happen to wait.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clinjudge.judges.workflows import prm_scorer
from clinjudge.prm_bridge import PRMRunSettings
from clinjudge.rubrics import Item
from tests.cli._helpers import invoke, query
from tests.factories import write_jsonl
from tests.fake_openai import FakeOpenAIServer, pdsqi9_scores
from tests.requirements import require_module


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    """A tiny random Med-PRM-shaped checkpoint: scores differ from step to step."""
    require_module("torch")
    from tests.prm_bridge._tiny import save_tiny

    path = tmp_path_factory.mktemp("tiny-run-ray")
    save_tiny(path, "medprm", seed=3)
    return str(path)


def _items() -> list[Item]:
    lines = ["Cough for three days.", "No fever.", "Lungs clear on exam.", "Plan: fluids, rest.",
             "Return if short of breath.", "Start amoxicillin 500 mg."]  # fmt: skip
    return [
        Item(
            id=f"item-{n}",
            notes=[f"Visit {k}: patient {n} seen for cough, day {k} of illness." for k in (1, 2)],
            summary="\n".join(lines[n : n + 2 + n]),
            specialty="Primary Care",
        )
        for n in range(3)
    ]


def _judge(tmp_path: Path, model: str, *extra: str) -> tuple[Path, str, list[str]]:
    """Judge the items against the fake server; (db, run id, every judge prompt sorted)."""
    tmp_path.mkdir()
    data = write_jsonl(tmp_path / "items.jsonl", _items())
    config = tmp_path / "run.yaml"
    config.write_text("prm:\n  batch_tokens: 256\n  segmenter: lines\n", encoding="utf-8")
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer(responder=lambda b: pdsqi9_scores(b["messages"][-1]["content"])) as srv:
        result = invoke(
            "run", "--data", str(data), "--model", "openai/local-judge", "--base-url",
            srv.base_url, "--config", str(config), "--prm", model, "--prm-device", "cpu",
            "--samples", "2", "--db", str(db), "--no-progress", *extra,
        )  # fmt: skip
        prompts = sorted(json.dumps(body["messages"]) for body in srv.requests)
    assert result.exit_code == 0, result.stderr
    return db, result.stdout.strip().splitlines()[-1], prompts


def _stored(db: Path, run_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    steps = query(
        db,
        "SELECT item_id, candidate, step, kind, text, score, flagged, model FROM prm_steps "
        "WHERE run_id = ? ORDER BY item_id, step",
        [run_id],
    )
    calls = query(
        db,
        "SELECT item_id, agent, seq, model, prompt_tokens, status, error FROM calls "
        "WHERE run_id = ? AND role = 'prm' ORDER BY item_id",
        [run_id],
    )
    return steps, calls


def test_ray_prepass_stores_and_prompts_what_one_process_does(
    ray_faults, model, tmp_path, monkeypatch
):
    db, run_id, prompts = _judge(tmp_path / "local", model)
    # The model this process loaded for the first run (and checks again before the second):
    # with --ray, the evidence step must not score with it.
    local = prm_scorer(PRMRunSettings(model=model, device="cpu", batch_tokens=256))
    forward = local.score
    local_calls: list[int] = []
    monkeypatch.setattr(local, "score", lambda *a, **k: local_calls.append(1) or forward(*a, **k))
    # The replica that takes the first batch dies: the scores come from Ray, after a retry.
    before = set(ray_faults.glob("exited.*"))
    (ray_faults / "exit_once").write_text("")
    ray_db, ray_run, ray_prompts = _judge(tmp_path / "ray", model, "--ray", "local")
    assert len(set(ray_faults.glob("exited.*")) - before) == 1
    assert local_calls == []
    steps, calls = _stored(db, run_id)
    ray_steps, ray_calls = _stored(ray_db, ray_run)
    assert len({s[0] for s in steps}) == 3 and len(steps) > 6
    assert len({s[5] for s in steps}) > 3  # a random model: the scores differ between steps
    assert all(c[4] > 128 for c in calls)  # one chain per forward pass in both paths
    assert ray_steps == steps  # floats compared exactly
    assert ray_calls == calls  # one prm call per item, recorded with the item's first sample
    assert len(prompts) == 6 and ray_prompts == prompts
    assert all("<PRM_EVIDENCE>" in p for p in prompts)


def test_ray_without_prm_is_refused_in_one_line(tmp_path):
    data = write_jsonl(tmp_path / "items.jsonl", _items())
    result = invoke("run", "--data", str(data), "--model", "mock/judge", "--ray", "local",
                    "--db", str(tmp_path / "runs.duckdb"), "--no-progress")  # fmt: skip
    assert result.exit_code == 2
    message = result.stderr.strip()
    assert "--ray runs --prm scoring and hf/ judge models" in message
    assert len(message.splitlines()) == 1
    assert not (tmp_path / "runs.duckdb").exists()
