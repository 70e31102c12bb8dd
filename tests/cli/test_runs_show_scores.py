"""`judge runs show` summarises a Likert run's final scores per attribute: n, mean, median and
a one-line distribution over the scale points, checked against scores the fake server was told
to give (computed here, independently of the store and the analysis)."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from clinjudge.cli._scores_view import BARS, EMPTY
from tests.cli._helpers import invoke
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

N_ITEMS = 12
REFUSED = {1, 4}  # items whose judge replies are prose: failed judgments
LIKERT = ["citation", "accurate", "thorough", "useful", "organized", "comprehensible", "succinct"]


def _scores(item: int) -> dict:
    """The scores the judge gives item ``item``: a spread over the scale, some points unused."""
    scores = {key: (item * (k + 1)) % 5 + 1 for k, key in enumerate(LIKERT)}
    scores["accurate"] = 4 if item % 3 else 2  # points 1, 3 and 5 never given
    scores["abstraction"] = item % 2
    scores["synthesized"] = (item % 5) + 1 if item % 2 else None
    scores["voice_summ"] = int(item in (0, 2))
    scores["voice_note"] = 0
    return {**scores, "rationale": "fixed scores"}


def _reply(body: dict) -> str | dict:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    text = users[-1]["content"] if users else ""
    text = text if isinstance(text, str) else "\n".join(p["text"] for p in text)
    item = int(re.search(r"Synthetic summary (\d+) ", text).group(1))  # type: ignore[union-attr]
    return "I would rather not grade this." if item in REFUSED else _scores(item)


@pytest.fixture
def scored_run(tmp_path: Path, db_path: Path) -> str:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(N_ITEMS))
    with FakeOpenAIServer(_reply) as server:
        result = invoke(
            "run", "--data", str(data), "--model", "openai/local-judge",
            "--base-url", server.base_url, "--db", str(db_path), "--max-repairs", "0",
            "--allow-failures", "100%", "--no-progress",
        )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


def _expected(attribute: str, low: int, high: int) -> dict:
    given = [_scores(i)[attribute] for i in range(N_ITEMS) if i not in REFUSED]
    numbers = [v for v in given if v is not None]
    return {
        "n": len(numbers),
        "mean": statistics.fmean(numbers) if numbers else None,
        "median": statistics.median(numbers) if numbers else None,
        "null": len(given) - len(numbers),
        "failed": len(REFUSED),
        "counts": {str(p): numbers.count(p) for p in range(low, high + 1)},
    }


SCALES = {**dict.fromkeys(LIKERT, (1, 5)), "synthesized": (1, 5)}
SCALES.update(abstraction=(0, 1), voice_summ=(0, 1), voice_note=(0, 1))


def test_json_scores_match_an_independent_count(scored_run: str, db_path: Path) -> None:
    result = invoke("runs", "show", scored_run, "--db", str(db_path), "--json")
    assert result.exit_code == 0, result.stderr
    scores = {s["attribute"]: s for s in json.loads(result.stdout)["scores"]}
    assert set(scores) == set(SCALES)
    for attribute, (low, high) in SCALES.items():
        expected = _expected(attribute, low, high)
        got = scores[attribute]
        assert got["counts"] == expected["counts"], attribute
        assert (got["n"], got["null"], got["failed"]) == (
            expected["n"],
            expected["null"],
            expected["failed"],
        ), attribute
        assert got["mean"] == pytest.approx(expected["mean"]), attribute
        assert got["median"] == pytest.approx(expected["median"]), attribute


def test_table_shows_the_distribution_per_scale_point(scored_run: str, db_path: Path) -> None:
    result = invoke("runs", "show", scored_run, "--db", str(db_path), env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.stderr
    assert "final scores per attribute" in result.stdout
    for attribute, (low, high) in SCALES.items():
        expected = _expected(attribute, low, high)
        row = next(line for line in result.stdout.splitlines() if f" {attribute} " in line)
        match = re.search(rf"{low} (\S+) {high}", row)
        assert match, row
        bar = match.group(1)
        counts = list(expected["counts"].values())
        assert len(bar) == high - low + 1, row
        top = max(counts)
        for char, count in zip(bar, counts, strict=True):
            if count == 0:
                assert char == EMPTY, row
            elif count == top:
                assert char == BARS[-1], row
            else:
                assert char in BARS[:-1], row
        # Higher counts never get lower bars.
        heights = [-1 if c == EMPTY else BARS.index(c) for c in bar]
        for i in range(len(counts) - 1):
            for j in range(len(counts)):
                if counts[i] < counts[j]:
                    assert heights[i] <= heights[j], row
        cells = [c.strip() for c in row.split("│") if c.strip()]
        mean = "-" if expected["mean"] is None else f"{expected['mean']:.2f}"
        median = "-" if expected["median"] is None else f"{expected['median']:.2f}"
        assert cells[:4] == [attribute, str(expected["n"]), mean, median], row
        assert cells[-2:] == [str(expected["null"]), str(expected["failed"])], row
