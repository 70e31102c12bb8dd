"""`judge compare` of probe runs: the probe results of two judge configurations side by side
in the terminal (80 columns), in `--json` (`probes`), in the API and in `judge report
--compare`. The judges are fake-server responders of tests/cli/test_probe_cli.py: one that reads
the notes and a constant one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from rich.cells import cell_len

from tests.cli._helpers import JUDGE, invoke, query
from tests.cli.test_probe_cli import ITEMS, _items, constant, reader, write_jsonl
from tests.fake_openai import FakeOpenAIServer

PROBES = "contradiction,uncited,neutral"


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local endpoint needs no key


@pytest.fixture(scope="module")
def probe_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A store with two probe runs of the same items: a reading judge and a constant one."""
    tmp = tmp_path_factory.mktemp("probe_compare")
    data = write_jsonl(tmp / "items.jsonl", _items())
    db = tmp / "probes.duckdb"
    ids = []
    for name, responder in (("reader", reader), ("constant", constant)):
        with FakeOpenAIServer(responder) as server:
            result = invoke(
                "probe", "--data", str(data), "--model", "openai/local-judge", "--base-url",
                server.base_url, "--db", str(db), "--no-progress", "--probes", PROBES,
                "--name", name, "--json", env={"OPENAI_API_KEY": ""},
            )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        ids.append(query(db, "SELECT run_id FROM runs WHERE name = ?", [name])[0][0])
    return db, ids[0], ids[1]


def test_compare_json_has_the_probe_table(probe_runs: tuple[Path, str, str]) -> None:
    db, read, const = probe_runs
    result = invoke("compare", read, const, "--db", str(db), "--json", "--boot", "20")
    assert result.exit_code == 0, result.stderr
    probes = json.loads(result.stdout)["probes"]
    heads = {p["probe"]: p for p in probes if p["attribute"] is None}
    assert list(heads) == ["contradiction", "uncited", "neutral"]
    assert {rid: c["verdict"] for rid, c in heads["contradiction"]["runs"].items()} == {
        read: "pass",
        const: "fail",
    }
    assert heads["neutral"]["kind"] == "invariance"
    assert {c["verdict"] for c in heads["neutral"]["runs"].values()} == {"pass"}
    assert heads["contradiction"]["runs"][read]["variants"] == ITEMS
    accurate = next(
        p for p in probes if (p["probe"], p["attribute"]) == ("contradiction", "accurate")
    )
    assert accurate["expected"] == "lower"
    cell = accurate["runs"][read]
    assert cell["n"] == ITEMS and cell["share_as_expected"] == 1.0
    assert 0.75 < cell["ci_low"] < 0.85 and cell["ci_high"] == 1.0  # Wilson, 16 of 16
    assert accurate["runs"][const]["share_as_expected"] == 0.0


def test_compare_api_and_a_run_that_is_not_a_probe_run(
    probe_runs: tuple[Path, str, str], tmp_path: Path
) -> None:
    import clinjudge

    db, read, const = probe_runs
    comparison = clinjudge.compare([read, const], db=db, n_boot=20)
    assert [p.probe for p in comparison.probes if p.attribute is None] == [
        "contradiction",
        "uncited",
        "neutral",
    ]
    # Beside a run that is not a probe run, the probe table has the probe run's column only.
    made = invoke("run", "--data", str(db.parent / "items.jsonl"), "--model", "mock/judge",
                  "--db", str(db), "--no-progress", "--limit", "2")  # fmt: skip
    assert made.exit_code == 0, made.stderr
    mixed = clinjudge.compare([made.stdout.strip(), read], db=db, n_boot=20)
    assert {rid for p in mixed.probes for rid in p.runs} == {read}
    # Runs that are not probe runs: no probe table (an empty list in the JSON).
    data = write_jsonl(tmp_path / "items.jsonl", _items(3))
    plain = tmp_path / "plain.duckdb"
    ids = []
    for _ in range(2):
        made = invoke("run", "--data", str(data), "--model", "mock/judge", "--db", str(plain),
                      "--no-progress")  # fmt: skip
        assert made.exit_code == 0, made.stderr
        ids.append(made.stdout.strip())
    alone = clinjudge.compare(ids, db=plain, n_boot=20)
    assert alone.probes == [] and alone.to_dict()["probes"] == []


@pytest.mark.needs_judge_script
def test_compare_terminal_probe_table_fits_80_columns(probe_runs: tuple[Path, str, str]) -> None:
    db, read, const = probe_runs
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "CLINJUDGE_DB": str(db)}
    result = subprocess.run(
        [JUDGE, "compare", read, const, "--boot", "20"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    probes = out[out.index("Probes (docs/trust.md)") :]
    assert all(cell_len(line) <= 80 for line in probes.splitlines()), probes
    assert "…" not in probes
    assert f"1: {read} (reader)" in probes and f"2: {const} (constant)" in probes
    lines = probes.splitlines()
    verdict = next(
        line
        for i, line in enumerate(lines)
        if line.startswith("│ verdict") and "contradiction (directional)" in lines[i - 2]
    )
    assert "PASS, 16 variant(s)" in verdict and "FAIL, 16 variant(s)" in verdict
    assert "1.00 [0.81, 1.00]" in probes  # the reader's share of accurate, with its interval
    assert "neutral (invariance)" in probes


def test_compare_report_has_a_probe_section(
    probe_runs: tuple[Path, str, str], tmp_path: Path
) -> None:
    db, read, const = probe_runs
    result = invoke(
        "report", read, const, "--compare", "--out", str(tmp_path / "r"), "--db", str(db),
        "--boot", "20",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    html = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "<h2" in html and ">Probes</h2>" in html and 'data-table="probes"' in html
    assert "PASS, 16 variant(s)" in html and "FAIL, 16 variant(s)" in html
    markdown = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert "## Probes" in markdown and "pass, 1.00 \\[0.81, 1.00\\], n 16" in markdown
