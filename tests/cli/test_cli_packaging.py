"""Packaging and notes a pip user can act on: SPDX licence, torch builds, audit defaults,
dry-run notes."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from tests.cli._helpers import invoke

ROOT = Path(__file__).resolve().parents[2]


def test_license_is_an_spdx_string() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    requires = project["build-system"]["requires"]
    # PEP 639 licence expressions need setuptools 77 or newer.
    assert any(r.replace(" ", "").startswith("setuptools>=77") for r in requires), requires
    data = project["tool"]["setuptools"]["package-data"]["clinjudge.demo"]
    assert "*.jsonl" in data and "audit/*.jsonl" in data


def test_readme_says_where_torch_builds_come_from() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "https://download.pytorch.org/whl/cpu" in readme
    assert "CUDA build" in readme


def test_audit_defaults_leave_out_prm_without_a_prm(tmp_path: Path) -> None:
    vendors = ROOT / "examples" / "audit"
    result = invoke(
        "audit", "--data", str(vendors / "vendor_a.jsonl"),
        "--data", str(vendors / "vendor_b.jsonl"), "--db", str(tmp_path / "a.duckdb"),
        "--json", "--boot", "50", "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    audit = json.loads(result.stdout)
    assert audit["flag_rules"] == ["accurate<=2", "voice_summ>=1"]
    assert not any("PRM" in note for note in audit["notes"])


def test_dry_run_note_points_at_nothing_a_pip_user_lacks(tmp_path: Path) -> None:
    result = invoke(
        "run", "--data", str(ROOT / "examples" / "pdsqi9_demo.jsonl"), "--mode", "magentic",
        "--dry-run", "--db", str(tmp_path / "x.duckdb"),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "note:" in result.stderr
    assert "bench/" not in result.stderr and "RESULTS.md" not in result.stderr
