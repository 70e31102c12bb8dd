"""In-process models (``hf/``) are read from this machine only, and cached by what they hold
(issue 36, part 6 and part 7's first finding).

* ``hf/models/nope`` with no such folder was read as the hub repository ``models/nope``: the
  run was stored, then every sample tried huggingface.co. A missing path, or a path that holds
  no model (``hf//etc/passwd``, a ``.gguf`` that is not GGUF, ``config.json`` without weights),
  is now a usage error (exit 2) before the store is created, with no connection; downloading
  needs ``hf-hub/ORG/NAME``.
* ``--cache`` keyed an ``hf/`` model by its path: weights replaced under the same path got the
  old model's cached replies. The key now holds a hash of the files' bytes (headers alone are
  the same for two fine-tunes of one architecture), and a replaced model is loaded again.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import clinjudge
from clinjudge.judges import ModelSettings
from clinjudge.judges.clients import ChatMessage, ModelConfigError, _hf_client, check_credentials
from clinjudge.judges.clients import _hf_source as hf_source
from clinjudge.judges.clients._cache import cache_key, cache_payload
from clinjudge.runs import RunStore
from tests.cli._helpers import invoke
from tests.factories import make_items, write_jsonl
from tests.judges.clients._hf_models import require_hf_extra, save_tiny_chat_model
from tests.survival.factories import NetworkGuard

MESSAGES = [ChatMessage("system", "grade"), ChatMessage("user", "note", "user")]


def _key(model: str) -> str:
    return cache_key(ModelSettings(model=model), MESSAGES, [], None, "0|1")


def _refused_before_the_run(tmp_path: Path, model: str) -> str:
    """``judge run --model MODEL``: exit 2 and no store; the error text."""
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "runs.duckdb"
    result = invoke("run", "--data", str(data), "--model", model, "--db", str(db), "--no-progress")
    assert result.exit_code == 2, result.output
    assert not db.exists(), "a run was stored that --resume could never finish"
    assert "--resume" not in result.output
    return str(result.stderr)


# -- part 6: hf/ is local; the hub only by hf-hub/ ---------------------------------------------


def test_missing_relative_path_fails_before_the_run_without_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, network_guard: NetworkGuard
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    error = _refused_before_the_run(tmp_path, "hf/models/nope")
    assert "hf/models/nope" in error and "no such file or folder" in error
    assert "hf-hub/models/nope" in error  # how to ask for the hub, said once
    assert network_guard.blocked == [] and network_guard.connected == []


@pytest.mark.parametrize("kind", ["absent", "not_a_model", "fake_gguf", "no_weights"])
def test_paths_that_hold_no_model_fail_before_the_run(
    tmp_path: Path, kind: str, network_guard: NetworkGuard
) -> None:
    if kind == "absent":
        path, expected = tmp_path / "absent" / "model", "no such file or folder"
    elif kind == "not_a_model":
        path, expected = Path("/etc/passwd"), "must be a .gguf checkpoint"
    elif kind == "fake_gguf":
        path, expected = tmp_path / "model.gguf", "is not a GGUF file"
        path.write_text("not gguf at all")
    else:
        path, expected = tmp_path / "checkpoint", "no weights"
        path.mkdir()
        (path / "config.json").write_text("{}")
    if not path.exists() and kind == "not_a_model":
        pytest.skip("no /etc/passwd here")
    error = _refused_before_the_run(tmp_path, f"hf/{path}")
    assert expected in error and str(path) in error
    assert network_guard.blocked == []


def test_resume_refuses_a_model_whose_files_are_gone(tmp_path: Path) -> None:
    model = tmp_path / "gone"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    settings = ModelSettings(model=f"hf/{model}")
    check_credentials(settings)
    shutil.rmtree(model)
    with pytest.raises(ModelConfigError, match="no such file or folder"):
        check_credentials(settings)


def test_hub_repositories_need_the_hf_hub_form(network_guard: NetworkGuard) -> None:
    with pytest.raises(ModelConfigError, match="hf-hub/HuggingFaceTB/SmolLM2-135M-Instruct"):
        check_credentials(ModelSettings(model="hf/HuggingFaceTB/SmolLM2-135M-Instruct"))
    # The opt-in is checked for its form only: nothing is fetched before the run.
    check_credentials(ModelSettings(model="hf-hub/HuggingFaceTB/SmolLM2-135M-Instruct"))
    check_credentials(ModelSettings(model="hf-hub/org/repo/model.Q4_K_M.gguf"))
    with pytest.raises(ModelConfigError, match="hf-hub/ORG/NAME"):
        check_credentials(ModelSettings(model="hf-hub/just-a-name"))
    assert network_guard.blocked == []


# -- part 7: the cache keys a model by what its files hold -------------------------------------


def test_cache_key_follows_the_weights_not_the_path(tmp_path: Path) -> None:
    model = tmp_path / "model"
    save_tiny_chat_model(model, context=256, seed=0)
    first = _key(f"hf/{model}")
    assert _key(f"hf/{model}") == first
    shutil.rmtree(model)
    # Same architecture: the safetensors header (names, shapes, offsets) is the same.
    save_tiny_chat_model(model, context=256, seed=1)
    assert _key(f"hf/{model}") != first
    shutil.rmtree(model)
    save_tiny_chat_model(model, context=256, seed=0)
    assert _key(f"hf/{model}") == first  # content, not when or where it was written
    payload = cache_payload(ModelSettings(model=f"hf/{model}"), MESSAGES, [], None, "0|1")
    assert len(payload["model_files"]) == 64


def test_a_gguf_rewritten_with_the_same_size_and_mtime_gets_a_new_key(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + b"\x01" * 4096)
    stat = path.stat()
    first = _key(f"hf/{path}")
    path.write_bytes(b"GGUF" + b"\x02" * 4096)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert _key(f"hf/{path}") != first


def test_hub_models_are_keyed_by_their_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub")
    asked: list[str] = []

    def model_info(self: Any, repo_id: str, **_: Any) -> Any:
        asked.append(repo_id)
        return SimpleNamespace(sha="c0ffee" if len(asked) == 1 else "decade")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_source, "_REVISIONS", {})
    source = hf_source.resolve_source("org/repo", hub=True)
    assert hf_source.model_fingerprint(source) == "hf-hub/org/repo@c0ffee"
    first = _key("hf-hub/org/repo")
    monkeypatch.setattr(hf_source, "_REVISIONS", {})  # a later process: the repository moved on
    assert _key("hf-hub/org/repo") != first
    assert asked == ["org/repo", "org/repo"]


def test_replaced_weights_never_get_the_old_models_cached_replies(
    tmp_path: Path, network_guard: NetworkGuard
) -> None:
    model = tmp_path / "model"
    save_tiny_chat_model(model, seed=0)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    db = tmp_path / "runs.duckdb"

    def run() -> list[dict[str, Any]]:
        result = clinjudge.evaluate(
            data, model=f"hf/{model}", db=db, samples=1, timeout=600, max_tokens=200, cache=True
        )
        calls = RunStore(db).query("SELECT * FROM calls WHERE run_id = ?", [result.run_id])
        assert calls and all(c["status"] == "ok" for c in calls)
        return calls

    def engine() -> object:
        (found,) = [
            e for (s, *_), (_, e) in _hf_client._ENGINES.items() if s.location == str(model)
        ]
        return found

    assert not any(c["cached"] for c in run())
    old = engine()
    shutil.rmtree(model)
    save_tiny_chat_model(model, seed=1)
    assert not any(c["cached"] for c in run()), "the old model's replies answered for the new"
    assert engine() is not old  # and the new replies are the new model's: loaded again
    assert all(c["cached"] for c in run())  # the new model's own replies are reused
    assert network_guard.blocked == []


def test_local_models_load_offline_and_hub_models_at_the_commit_keyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_hf_extra()
    from clinjudge.judges.clients import _hf_engine

    asked: list[dict[str, Any]] = []

    def from_pretrained(location: str, **kwargs: Any) -> Any:
        asked.append(kwargs)
        raise OSError("stop here")

    monkeypatch.setattr(_hf_engine.AutoTokenizer, "from_pretrained", from_pretrained)
    monkeypatch.setattr(hf_source, "_REVISIONS", {"org/repo": "c0ffee"})
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    for source in (
        hf_source.resolve_source(str(tmp_path)),
        hf_source.resolve_source("org/repo", hub=True),
    ):
        with pytest.raises(_hf_engine.LocalModelError, match="stop here"):
            _hf_engine.LocalModel(source, device="cpu")._load()
    local, hub = asked
    assert local == {"local_files_only": True}
    assert hub == {"revision": "c0ffee"}
