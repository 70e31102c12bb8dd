"""`judge probe --perturber MODEL` against the fake server: a model rewrites the rule-based
variants; a rewrite that keeps the edit replaces the variant (labelled, the rule-based text
kept beside it), one that loses it is refused, and the simulated provider cannot perturb."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.cli._helpers import invoke, query
from tests.cli.test_probe_cli import _items, reader, write_jsonl
from tests.fake_openai import FakeOpenAIServer

_COPY_EDIT = "You copy-edit clinical summaries"


def _perturb_request(body: dict[str, Any]) -> str | None:
    """The summary a perturber call asks to rewrite (None: a judge call)."""
    system = next((m for m in body["messages"] if m.get("role") == "system"), None)
    if not system or _COPY_EDIT not in str(system.get("content")):
        return None
    user = str(body["messages"][-1]["content"])
    match = re.search(r"SUMMARY:\n(.*?)(?:\n\nThese passages|\Z)", user, re.S)
    assert match, user
    return match.group(1)


def rewriter(body: dict[str, Any]) -> str | dict[str, Any]:
    """A perturber that rewords the first date's lead-in and keeps everything else (a
    padding variant's repeated sentences stay word for word in their second copy)."""
    summary = _perturb_request(body)
    if summary is None:
        return reader(body)
    return summary.replace("On 2023", "As of 2023", 1)


def careless(body: dict[str, Any]) -> str | dict[str, Any]:
    """A perturber that loses the edit (and most of the summary)."""
    return reader(body) if _perturb_request(body) is None else "The patient is well."


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local endpoint needs no key


def _probe(responder: Any, tmp_path: Path, perturber: str) -> tuple[Any, Path]:
    data = write_jsonl(tmp_path / "items.jsonl", _items(4))
    db = tmp_path / "p.duckdb"
    with FakeOpenAIServer(responder) as server:
        result = invoke(
            "probe", "--data", str(data), "--model", "openai/local-judge", "--base-url",
            server.base_url, "--db", str(db), "--no-progress", "--json",
            "--probes", "contradiction,padding,neutral", "--perturber", perturber,
        )  # fmt: skip
    return result, db


def test_a_rewrite_that_keeps_the_edit_replaces_the_variant(tmp_path: Path) -> None:
    result, db = _probe(rewriter, tmp_path, "openai/rewriter")
    assert result.exit_code == 0, result.stderr
    assert (
        "perturber openai/rewriter: 8 variant(s) rewritten, 8 call(s), cost unknown; kept "
        "rule-based: 4 the neutral edit is the form itself: not rewritten"
    ) in result.stderr
    [(summary, meta)] = query(db, "SELECT summary, meta FROM items WHERE item_id = 'it-00~padding'")
    assert summary.count("As of 2023") == 1
    assert json.loads(meta)["probe_perturber"] == "openai/rewriter"
    [(edit,)] = query(db, "SELECT edit FROM probe_variants WHERE item_id = 'it-00~padding'")
    note = json.loads(edit)["perturber"]
    assert note["rewritten"] is True and note["model"] == "openai/rewriter"
    assert note["rule_based_summary"].startswith(json.loads(edit)["added"][0])
    [(original,)] = query(db, "SELECT summary FROM items WHERE item_id = 'it-00'")
    assert "As of" not in original  # originals are never rewritten
    # The viewer labels the rewrite and keeps the rule-based text beside it.
    from clinjudge.reports import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

        client = TestClient(create_app(db, n_boot=20))
        [(run_id,)] = query(db, "SELECT run_id FROM runs")
        page = client.get(f"/runs/{run_id}/items/it-00~padding").text
    assert '<span class="badge perturbed">rewritten by openai/rewriter</span>' in page
    assert "the rule-based variant before the rewrite" in page
    neutral = client.get(f"/runs/{run_id}/items/it-00~neutral").text
    assert "the perturber openai/rewriter did not rewrite it" in neutral


def test_a_rewrite_that_loses_the_edit_is_refused(tmp_path: Path) -> None:
    result, db = _probe(careless, tmp_path, "openai/careless")
    assert result.exit_code == 0, result.stderr
    assert "0 variant(s) rewritten" in result.stderr
    assert "8 rewrite length far from the variant's" in result.stderr
    rewritten = query(db, "SELECT count(*) FROM items WHERE summary = 'The patient is well.'")
    assert rewritten == [(0,)]


def test_the_simulated_provider_cannot_perturb(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", _items(2))
    result = invoke(
        "probe", "--data", str(data), "--model", "mock/judge", "--db",
        str(tmp_path / "m.duckdb"), "--perturber", "mock/rewriter", "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "the simulated provider cannot rewrite text" in result.stderr
