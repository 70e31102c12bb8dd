"""`judge run --prm`: PRM evidence reaches single judges, panels and discussions, and is stored."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from clinjudge.judges import ModelSettings
from clinjudge.orchestration import (
    ConfigError,
    RetryPolicy,
    RunConfig,
    create_run,
    execute_run,
    prepare_run,
)
from clinjudge.prm_bridge import PRMRunSettings
from clinjudge.runs import RunStore
from tests.cli._helpers import invoke
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer, pdsqi9_scores
from tests.magentic_fake import PanelFake
from tests.requirements import require_module

FAST = RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.02, jitter=0.0)


@pytest.fixture(scope="module")
def prm_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, float]:
    require_module("torch")  # skips (fails under CI) only the tests that take a PRM
    from tests.prm_bridge._tiny import save_exact_medprm

    path = tmp_path_factory.mktemp("prm_run")
    return str(path), save_exact_medprm(path, a=-0.8)  # P(+) ~ 0.31 at every step: all flagged


class Recorder:
    """Responder that keeps every request and answers like ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Any:
        with self._lock:
            self.bodies.append(body)
        return self.inner(body)


def _single_reply(body: dict[str, Any]) -> dict[str, Any]:
    return pdsqi9_scores(body["messages"][-1]["content"])


def _run(tmp_path: Path, responder: Any, prm: PRMRunSettings, **config: Any) -> tuple[Path, str]:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer(responder=responder) as srv:
        judge = ModelSettings(model="openai/local-judge", base_url=srv.base_url, timeout=5.0)
        run_config = RunConfig(data=str(data), db=str(db), judge=judge, retry=FAST, prm=prm,
                               **config)  # fmt: skip
        prepared = prepare_run(run_config)
        with RunStore(db) as store:
            run_id = create_run(store, prepared)
            tally = execute_run(store, run_id, prepared, show_progress=False)
    assert tally.failed == 0
    return db, run_id


def _prm_rows(db: Path, run_id: str) -> tuple[list[dict], list[dict]]:
    with RunStore(db, read_only=True) as store:
        steps = store.query("SELECT * FROM prm_steps WHERE run_id = ? ORDER BY ALL", [run_id])
        calls = store.query("SELECT * FROM calls WHERE run_id = ? AND role = 'prm'", [run_id])
    return steps, calls


def test_single_judge_sees_the_evidence_and_it_is_stored_once_per_item(
    tmp_path: Path, prm_model: tuple[str, float]
) -> None:
    model, p = prm_model
    recorder = Recorder(_single_reply)
    db, run_id = _run(
        tmp_path, recorder, PRMRunSettings(model=model, device="cpu", segmenter="lines"), samples=3
    )
    assert len(recorder.bodies) == 6
    for body in recorder.bodies:
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        assert "PROCESS REWARD MODEL EVIDENCE\nThe document comes with a report" in system
        block = user.split("<PRM_EVIDENCE>\n", 1)[1].split("\n</PRM_EVIDENCE>", 1)[0]
        assert f"{p:.3f}" in block and "Flagged steps:" in block
        assert user.index("</CLINICAL_SUMMARY>") < user.index("<PRM_EVIDENCE>")
    steps, calls = _prm_rows(db, run_id)
    assert {s["item_id"] for s in steps} == {"item-0000", "item-0001"}
    assert all(s["score"] == pytest.approx(p, abs=1e-5) and s["flagged"] for s in steps)
    assert len(calls) == 2  # one forward pass per item, not per sample
    assert all(c["status"] == "ok" and c["prompt_tokens"] > 0 for c in calls)


def test_panel_members_share_one_report(tmp_path: Path, prm_model: tuple[str, float]) -> None:
    model, _ = prm_model
    recorder = Recorder(_single_reply)
    db, run_id = _run(
        tmp_path, recorder, PRMRunSettings(model=model, device="cpu"), mode="panel",
        personas="scoring",
    )  # fmt: skip
    assert len(recorder.bodies) == 6
    assert all("<PRM_EVIDENCE>" in b["messages"][1]["content"] for b in recorder.bodies)
    _, calls = _prm_rows(db, run_id)
    assert len(calls) == 2


def test_magentic_verifier_reports_before_round_one(
    tmp_path: Path, prm_model: tuple[str, float]
) -> None:
    model, p = prm_model
    fake = PanelFake()
    recorder = Recorder(fake)
    db, run_id = _run(
        tmp_path, recorder, PRMRunSettings(model=model, device="cpu"), mode="magentic",
        personas=fake.personas, planning=False,
    )  # fmt: skip
    with RunStore(db, read_only=True) as store:
        agents = [
            r["agent"]
            for r in store.query(
                "SELECT agent FROM messages WHERE run_id = ? AND item_id = 'item-0000' "
                "ORDER BY seq",
                [run_id],
            )
        ]
        verifier_text = store.query(
            "SELECT content FROM messages WHERE run_id = ? AND agent = 'prm_verifier'", [run_id]
        )[0]["content"]
        final = store.query(
            "SELECT count(*) AS n FROM judgments WHERE run_id = ? AND final", [run_id]
        )[0]["n"]
    members = [a for a in agents if a in ("high_scorer", "low_scorer")]
    assert agents.index("prm_verifier") < agents.index(members[0])
    assert agents.count("prm_verifier") == 1
    assert f"{p:.3f}" in verifier_text
    assert verifier_text.startswith("[evidence] PROCESS REWARD MODEL EVIDENCE\n<PRM_EVIDENCE>\n")
    assert final > 0
    persona_requests = [
        b for b in recorder.bodies if fake.members[0].system_message in b["messages"][0]["content"]
    ]
    assert persona_requests
    assert all(
        any("Process reward model check" in str(m.get("content")) for m in b["messages"])
        for b in persona_requests
    )
    steps, calls = _prm_rows(db, run_id)
    assert len(calls) == 2 and steps


def test_bad_prm_fails_before_anything_is_written(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    config = RunConfig(
        data=str(data), judge=ModelSettings(model="mock/judge"),
        prm=PRMRunSettings(model=str(tmp_path / "no-such-model"), device="cpu"),
    )  # fmt: skip
    with pytest.raises(ConfigError, match="prm model"):
        prepare_run(config)
    db = tmp_path / "cli.duckdb"
    result = invoke("run", "--data", str(data), "--prm", str(tmp_path / "nope"), "--db", str(db))
    assert result.exit_code == 2 and "prm model" in result.stderr
    assert not db.exists()
    batch = invoke("run", "--data", str(data), "--model", "openai/gpt-4o-mini", "--batch",
                   "--prm", str(tmp_path / "nope"), "--dry-run", "--db", str(db))  # fmt: skip
    assert batch.exit_code == 2 and "batch run does not combine with a prm model" in batch.stderr


def test_audit_with_prm_flags_low_steps(tmp_path: Path, prm_model: tuple[str, float]) -> None:
    import json

    model, p = prm_model
    vendors = []
    for vendor in ("alpha", "beta"):
        items = [item.model_copy(update={"vendor": vendor}) for item in make_items(2)]
        vendors.append(write_jsonl(tmp_path / f"{vendor}.jsonl", items))
    result = invoke(
        "audit", "--data", str(vendors[0]), "--data", str(vendors[1]), "--model", "mock/judge",
        "--prm", model, "--flag", "prm<0.5", "--boot", "100", "--json",
        "--db", str(tmp_path / "audit.duckdb"), "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    audit = json.loads(result.stdout)
    assert len(audit["flagged"]) == 4  # every step of every item scores ~0.31
    expected = [f"lowest PRM step {p:.3f} (prm<0.5)"]
    assert all(f["reasons"] == expected for f in audit["flagged"])
