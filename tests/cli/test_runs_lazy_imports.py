"""`judge export` of a run judged by a real (non-simulated) model loads neither the model
clients nor scipy, and `judge runs show` no scipy (#24: start-up, bench/startup.py), yet both
print the same scores and rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli._helpers import invoke, query
from tests.fake_openai import FakeOpenAIServer

HEAVY = ["openai", "litellm", "scipy", "clinjudge.judges"]


def test_show_and_export_of_a_real_run_load_no_model_client_or_statistics(
    items_file: Path, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local endpoint needs no key
    with FakeOpenAIServer() as server:
        ran = invoke(
            "run", "--data", str(items_file), "--model", "openai/gpt-4o-mini",
            "--base-url", server.base_url, "--db", str(db_path), "--no-progress",
        )  # fmt: skip
    assert ran.exit_code == 0, ran.stderr
    run_id = ran.stdout.strip()
    out = tmp_path / "judgments.jsonl"
    code = (
        "import json, sys\n"
        "from clinjudge.cli import main\n"
        "loaded = []\n"
        f"for argv in ({['export', run_id, '--out', str(out), '--db', str(db_path)]!r},\n"
        f"             {['runs', 'show', run_id, '--json', '--db', str(db_path)]!r}):\n"
        "    sys.argv = ['judge', *argv]\n"
        "    try:\n        main()\n    except SystemExit as exc:\n"
        "        assert not exc.code, exc.code\n"
        f"    loaded.append([m for m in {HEAVY!r} if m in sys.modules])\n"
        "print(json.dumps(loaded), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    after_export, after_show = json.loads(done.stderr.strip().splitlines()[-1])
    assert after_export == []
    # `runs show` reads the deciding agent from _util/modes.py, not the workflow registry.
    assert after_show == []
    summary = json.loads(done.stdout)
    assert summary["run_id"] == run_id and not summary["simulated"]
    assert "notice" not in summary and "doclens" not in summary
    # The final scores are still read with the stored rubric: each attribute counts the items
    # whose final judgment holds a number, as the judgments table has them.
    numbers = dict(
        query(
            db_path,
            "SELECT attribute, count(*) FROM judgments WHERE run_id = ? AND final "
            "AND status = 'ok' AND value IS NOT NULL GROUP BY attribute",
            [run_id],
        )
    )
    assert summary["scores"]
    assert {s["attribute"]: s["n"] for s in summary["scores"]} == {
        s["attribute"]: numbers.get(s["attribute"], 0) for s in summary["scores"]
    }
    assert set(numbers) <= {s["attribute"] for s in summary["scores"]}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and {r["run_id"] for r in rows} == {run_id}
    assert not any(r["simulated"] for r in rows)
