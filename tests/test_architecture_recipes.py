"""The extension recipes in docs/architecture.md run as written: each fenced block tagged
``recipe=NAME file=FILE`` is written to FILE in a temporary folder and used the way the guide
says, and what it adds is checked against an independent computation here."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import duckdb
import pytest

import clinjudge
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "architecture.md"
_FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.M | re.S)


def recipe_files(name: str) -> dict[str, str]:
    """The guide's blocks for one recipe, by file name.

    Args:
        name: The ``recipe=`` tag.
    """
    files: dict[str, str] = {}
    for match in _FENCE.finditer(GUIDE.read_text(encoding="utf-8")):
        tags = dict(re.findall(r"(\w+)=(\S+)", match.group(2)))
        if tags.get("recipe") == name:
            files[tags["file"]] = match.group(3)
    assert files, f"docs/architecture.md has no block tagged recipe={name}"
    return files


def write_recipe(name: str, folder: Path) -> list[Path]:
    """Write one recipe's blocks into ``folder``."""
    paths = []
    for file, text in recipe_files(name).items():
        path = folder / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def finals_and_samples(db: Path, run_id: str) -> tuple[dict, dict]:
    """Final values and the deciding agent's sample values per (item, attribute)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT item_id, attribute, sample, value FROM judgments WHERE run_id = ? "
            "AND value IS NOT NULL AND (sample = 0 OR agent = 'judge')",
            [run_id],
        ).fetchall()
    finally:
        con.close()
    finals: dict = {}
    samples: dict = {}
    for item, attribute, sample, value in rows:
        if sample == 0:
            finals[(item, attribute)] = value
        else:
            samples.setdefault((item, attribute), []).append(value)
    return finals, samples


def test_the_rubric_recipe_validates_and_judges(tmp_path: Path) -> None:
    (path,) = write_recipe("rubric", tmp_path)
    rubric = clinjudge.rubrics.load_rubric(str(path))
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    db = tmp_path / "rubric.duckdb"
    result = clinjudge.evaluate(data, rubric=str(path), model="mock/judge", db=db)
    assert result.status == "completed" and result.items_ok == 3
    finals, _ = finals_and_samples(db, result.run_id)
    keys = {a.key for a in rubric.attributes}
    assert {attribute for _, attribute in finals} == keys
    for (_, attribute), value in finals.items():
        spec = next(a for a in rubric.attributes if a.key == attribute)
        assert spec.min <= value <= spec.max


_REDUCER_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
import {module}
import clinjudge
result = clinjudge.evaluate(sys.argv[2], model="mock/judge", db=sys.argv[3], samples=5,
                            reduce="midrange")
print(json.dumps({{"run_id": result.run_id, "status": result.status}}))
"""


def test_the_reducer_recipe_finalises_runs_with_its_rule(tmp_path: Path) -> None:
    (path,) = write_recipe("reducer", tmp_path)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(4))
    db = tmp_path / "reducer.duckdb"
    code = _REDUCER_RUN.format(module=path.stem)
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), str(data), str(db)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=True,
    )
    run = json.loads(out.stdout.strip().splitlines()[-1])
    assert run["status"] == "completed"
    finals, samples = finals_and_samples(db, run["run_id"])
    assert finals and set(finals) <= set(samples)
    spread = 0
    for key, value in finals.items():
        values = samples[key]
        spread += max(values) != min(values)
        assert value == pytest.approx((min(values) + max(values)) / 2), key
    assert spread, "the mock's samples never differ: the check would not tell midrange apart"


_AGREE = """
import sys
sys.path.insert(0, sys.argv[1])
import {module}
from clinjudge.cli import main
sys.argv = ["judge", "agree", sys.argv[2], "--db", sys.argv[3], "--json"]
main()
"""


def _rate_every_item(tmp_path: Path, finals: dict, rubric_name: str = "pdsqi9") -> Path:
    """Three physicians per item; their median is the judge's final on every other item and a
    point off it on the rest (gates: always 1, which keeps the scores they gate required)."""
    rubric = clinjudge.rubrics.load_rubric(rubric_name)
    rows = []
    for attribute in rubric.attributes:
        for index, item in enumerate(sorted({item for item, _ in finals})):
            final = finals.get((item, attribute.key))
            if attribute.max - attribute.min == 1:
                scores = [attribute.max] * 3
            else:
                near = round(final) if final is not None else attribute.min
                off = near - 1 if near > attribute.min else near + 1
                scores = [near, near, off] if index % 2 else [near, off, off]
            for rater, score in zip(("dr_a", "dr_b", "dr_c"), scores, strict=True):
                rows.append(
                    {"item_id": item, "rater_id": rater, "attribute": attribute.key, "score": score}
                )
    path = tmp_path / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_statistic_recipe_appears_in_agree(tmp_path: Path) -> None:
    (path,) = write_recipe("statistic", tmp_path)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(6))
    db = tmp_path / "agree.duckdb"
    run = clinjudge.evaluate(data, model="mock/judge", db=db)
    finals, _ = finals_and_samples(db, run.run_id)
    ratings = _rate_every_item(tmp_path, finals)
    clinjudge.import_ratings(ratings, db=db)
    out = subprocess.run(
        [sys.executable, "-c", _AGREE.format(module=path.stem), str(tmp_path), run.run_id, str(db)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=True,
    )
    result = json.loads(out.stdout)
    humans: dict = {}
    for row in map(json.loads, ratings.read_text().splitlines()):
        humans.setdefault((row["item_id"], row["attribute"]), []).append(row["score"])
    checked = 0
    for attribute, block in result["per_attribute"].items():
        pairs = [
            (finals[key], sorted(scores))
            for key, scores in humans.items()
            if key[1] == attribute and finals.get(key) is not None
        ]
        expected = sum(f == s[1] for f, s in pairs) / len(pairs)  # three ratings each
        got = block["statistics"]["exact_agreement"]
        assert got["value"] == pytest.approx(expected), attribute
        checked += 0 < expected < 1
    assert checked, "every attribute agreed all or nothing: the check would not tell"


def _install_recipe_package(folder: Path) -> None:
    """Make the recipe's module an installed distribution: its pyproject's entry points in a
    ``.dist-info`` beside it (what pip writes), found through PYTHONPATH."""
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    info = folder / "gateway_provider-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gateway-provider\nVersion: 0.1\n")
    lines = []
    for group, entries in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {target}" for name, target in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def _judge(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    judge = Path(sys.executable).parent / "judge"
    return subprocess.run(
        [str(judge), *args], capture_output=True, text=True, env=env, timeout=300, cwd=REPO
    )


def test_the_provider_recipe_judges_through_its_entry_point(tmp_path: Path) -> None:
    write_recipe("provider", tmp_path)
    _install_recipe_package(tmp_path)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    db = tmp_path / "gateway.duckdb"
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_SECRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    with FakeOpenAIServer() as server:
        args = ("run", "--data", str(data), "--model", "gateway/clinical-8b", "--db", str(db))
        no_secret = _judge(*args, "--base-url", server.base_url, env=env)
        assert no_secret.returncode == 2 and "GATEWAY_SECRET" in no_secret.stderr
        assert not server.requests and not db.exists()
        env["GATEWAY_SECRET"] = "s3cret-for-the-test"
        done = _judge(*args, "--base-url", server.base_url, "--no-progress", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(server.requests) == 3
    keys = {a.key for a in clinjudge.rubrics.load_rubric("pdsqi9").attributes}
    for body, headers in zip(server.requests, server.request_headers, strict=True):
        assert body["model"] == "clinical-8b"
        schema = body["response_format"]["json_schema"]["schema"]
        assert keys <= set(schema["properties"])
        payload = json.dumps(body).encode()
        expected = hmac.new(b"s3cret-for-the-test", payload, hashlib.sha256).hexdigest()
        assert headers["X-Gateway-Signature"] == expected
    con = duckdb.connect(str(db), read_only=True)
    try:
        stored = con.execute(
            "SELECT count(DISTINCT item_id), any_value(model) FROM calls WHERE status = 'ok'"
        ).fetchone()
        finals = con.execute("SELECT count(*) FROM judgments WHERE final").fetchone()
    finally:
        con.close()
    assert stored == (3, "gateway/clinical-8b") and finals is not None and finals[0] > 0
    assert "GATEWAY_SECRET" not in done.stdout and "s3cret" not in db.read_bytes().decode("latin-1")
