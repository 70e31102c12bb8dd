"""`judge prm score --model PATH`: a local path that does not exist is named as such (exit 2),
not reported as a malformed hub id; a hub id still goes to the hub loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli._helpers import invoke
from tests.requirements import require_module


@pytest.fixture
def chains(tmp_path: Path) -> Path:
    path = tmp_path / "chains.jsonl"
    path.write_text(json.dumps({"id": "a", "steps": ["First step.", "Second step."]}) + "\n")
    return path


@pytest.mark.parametrize(
    "model",
    ["/no/such/path", "../missing-checkpoint", "~/no-such-checkpoint-x9", "models/prm"],
)
def test_missing_local_path_is_named(
    model: str, chains: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_module("transformers")  # without it the missing extra is reported first
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()  # an existing folder makes models/prm a local path
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = invoke("prm", "score", "--model", model, "--input", str(chains))
    assert result.exit_code == 2, result.stderr
    assert f"{model}: cannot load the tokenizer: no such file or folder" in result.stderr
    assert "Repo id" not in result.stderr


def test_hub_id_goes_to_the_hub(
    chains: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_module("transformers")
    monkeypatch.chdir(tmp_path)  # no folder named someorg here
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub is not reachable from tests
    result = invoke("prm", "score", "--model", "someorg/some-prm", "--input", str(chains))
    assert result.exit_code == 2, result.stderr
    assert "someorg/some-prm: cannot load the tokenizer" in result.stderr
    assert "no such file or folder" not in result.stderr
