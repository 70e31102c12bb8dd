"""scripts/aci_bench_to_jsonl.py on a synthetic folder in the ACI-BENCH layout (never the data)."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

from tests.cli._helpers import invoke

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "aci_bench_to_jsonl.py"
COLUMNS = ["dataset", "encounter_id", "dialogue", "note"]


def _load():
    spec = importlib.util.spec_from_file_location("aci_bench_to_jsonl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _csv(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def _source(tmp_path: Path) -> Path:
    source = tmp_path / "aci"
    row = {"dataset": "aci", "encounter_id": "E1", "dialogue": "[doctor] hi\n[patient] hello"}
    _csv(source / "test1.csv", [{**row, "note": "ASSESSMENT\nCold.\nPLAN\nRest."}])
    _csv(source / "predictions" / "SYS.csv", [{**row, "note": "PLAN\nRest at home."}])
    return source


def test_specialty_is_set_and_stated(tmp_path, capsys, db_path):
    script = _load()
    source, out = _source(tmp_path), tmp_path / "out"
    assert (
        script.main(["--source", str(source), "--out", str(out), "--specialty", "Cardiology"]) == 0
    )
    [record] = [json.loads(line) for line in (out / "SYS.jsonl").read_text().splitlines()]
    assert record["specialty"] == "Cardiology" and record["summary"] == "PLAN\nRest at home."
    assert "'Cardiology' (--specialty)" in capsys.readouterr().err
    assert script.main(["--source", str(source), "--out", str(out)]) == 0
    [record] = [json.loads(line) for line in (out / "SYS.jsonl").read_text().splitlines()]
    assert record["specialty"] == script.DEFAULT_SPECIALTY
    assert script.main(["--source", str(source), "--out", str(out), "--specialty", " "]) == 2
    # the converted file validates for PDSQI-9, which needs a specialty
    checked = invoke("run", "--rubric", "pdsqi9", "--data", str(out / "SYS.jsonl"),
                     "--model", "mock/judge", "--dry-run", "--db", str(db_path))  # fmt: skip
    assert checked.exit_code == 0, checked.stderr
