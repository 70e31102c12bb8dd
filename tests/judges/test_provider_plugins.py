"""Providers are plugins (#40): every provider-specific decision lives in its module under
``judges/clients/providers/``; a package outside clinjudge adds one through the
``clinjudge.providers`` entry point group, and ``judge run`` uses it with nothing else changed."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import clinjudge
from clinjudge.judges.clients import (
    ENTRY_POINT_GROUP,
    ModelConfigError,
    ModelSettings,
    Provider,
    context_window,
    counts_exactly,
    provider_for,
    provider_names,
    register_provider,
    token_prices,
)
from clinjudge.judges.clients.providers import _registry
from tests.cli._helpers import query

ROOT = Path(clinjudge.__file__).parent
PROVIDERS_DIR = ROOT / "judges" / "clients" / "providers"
PLUGIN_DIR = Path(__file__).parent / "plugin_provider"

# Modules that carry out one provider's calls and are reached only through its provider
# module (litellm's own route names are litellm's business), and the CLI's display of stored
# model names (importing the providers would cost read-only commands their start-up time).
IMPLEMENTATIONS = {
    "judges/clients/_litellm_client.py",
    "judges/clients/_mock_client.py",
    "judges/clients/_direct_client.py",
    "cli/_fit.py",
}


def _is_provider_text(value: object, names: set[str]) -> bool:
    """A provider name, or a model prefix such as ``hf/``."""
    return isinstance(value, str) and (
        value in names or value.split("/", 1)[0] in names and "/" in value
    )


def _literals(node: ast.AST) -> list[object]:
    """String constants of a node, and of a tuple, list or set literal's elements."""
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return []


def provider_branches(source: str, names: set[str]) -> list[int]:
    """Lines of ``source`` that branch on a provider name: a comparison or membership test with
    one, a test against a ``*_PROVIDERS`` set, or ``startswith``/``removeprefix`` of a model
    prefix.

    Args:
        source: Python source.
        names: The provider names.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            texts = [v for side in sides for v in _literals(side)]
            sets = [s for s in sides if isinstance(s, ast.Name) and s.id.endswith("_PROVIDERS")]
            if sets or any(_is_provider_text(t, names) for t in texts):
                found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            prefix_call = node.func.attr in ("startswith", "removeprefix", "endswith")
            texts = [v for arg in node.args for v in _literals(arg)]
            if prefix_call and any(_is_provider_text(t, names) for t in texts):
                found.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "is_mock":
            found.append(node.lineno)
    return found


def _names() -> set[str]:
    return set(provider_names())


def test_no_provider_name_is_a_branch_outside_the_providers() -> None:
    names = _names()
    assert {"openai", "azure", "anthropic", "hf", "mock", "ollama", "litellm"} <= names
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if path.is_relative_to(PROVIDERS_DIR) or relative in IMPLEMENTATIONS:
            continue
        if relative.startswith("judges/clients/_hf_"):  # the hf provider's engine
            continue
        lines = provider_branches(path.read_text(encoding="utf-8"), names)
        found += [f"{relative}:{line}" for line in lines]
    assert found == [], "provider-specific branches outside providers/: move them into a hook"


@pytest.mark.parametrize(
    "source",
    [
        'if settings.provider == "azure":\n    pass\n',
        'x = settings.provider in {"openai", "azure"}\n',
        'if model.startswith("hf/"):\n    pass\n',
        "if settings.provider in HF_PROVIDERS:\n    pass\n",
        "if settings.is_mock:\n    pass\n",
    ],
)
def test_a_planted_branch_is_caught(source: str) -> None:
    assert provider_branches(source, _names()) == [1]


def test_other_comparisons_are_not_branches() -> None:
    source = 'if mode == "json_object" or setting in ("auto", "off"):\n    pass\n'
    assert provider_branches(source, _names()) == []


@pytest.mark.parametrize(
    ("model", "simulated", "in_process", "batch", "prefix_cache"),
    [
        ("openai/gpt-4o-mini", False, False, True, "automatic"),
        ("azure/my-deployment", False, False, True, "automatic"),
        ("azure_openai/my-deployment", False, False, True, "automatic"),
        ("anthropic/claude-sonnet-4-5", False, False, False, "marked"),
        ("ollama/llama3", False, False, False, None),
        ("hf/models/tiny", False, True, False, None),
        ("hf-hub/org/name", False, True, False, None),
        ("mock/judge", True, False, False, None),
        ("gemini/gemini-2.0-flash", False, False, False, None),  # litellm's
    ],
)
def test_each_model_prefix_finds_its_provider(
    model: str, simulated: bool, in_process: bool, batch: bool, prefix_cache: str | None
) -> None:
    provider = provider_for(ModelSettings(model=model))
    assert provider.simulated is simulated
    assert provider.in_process is in_process
    assert (provider.batch_endpoint is not None) is batch
    assert provider.prefix_cache == prefix_cache


def test_prices_and_window_come_from_the_provider() -> None:
    assert token_prices(ModelSettings(model="mock/judge")).input == 0.0  # type: ignore[union-attr]
    assert token_prices(ModelSettings(model="hf/models/tiny")).output == 0.0  # type: ignore[union-attr]
    assert context_window(ModelSettings(model="mock/judge")) is None
    assert counts_exactly(ModelSettings(model="openai/gpt-4o-mini"))
    assert not counts_exactly(ModelSettings(model="anthropic/claude-sonnet-4-5"))
    claude = token_prices(ModelSettings(model="anthropic/claude-3-5-sonnet-20241022"))
    if claude is not None:  # litellm's map is installed: cache reads at Anthropic's discount
        assert claude.cached_input < claude.input < claude.cache_write


def test_a_name_served_twice_is_refused() -> None:
    class Clash(Provider):
        names = ("openai",)

    with pytest.raises(ValueError, match="already served"):
        register_provider(Clash())


def test_an_entry_point_provider_is_loaded_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    monkeypatch.setattr(_registry, "_PROVIDERS", dict(_registry._PROVIDERS))
    monkeypatch.setattr(_registry, "_LOADED", set())
    provider = provider_for(ModelSettings(model="echo/anything"))
    assert type(provider).__name__ == "EchoProvider"
    assert ENTRY_POINT_GROUP == "clinjudge.providers"
    assert not provider.simulated and provider.token_prices(ModelSettings(model="echo/x")) is None


def test_a_broken_entry_point_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    info = tmp_path / "broken_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nbroken = no_such_module:X\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_registry, "_LOADED", set())
    with pytest.raises(ModelConfigError, match="broken"):
        provider_for(ModelSettings(model="broken/model"))


def test_judge_run_with_a_plugin_provider_stores_judgments(items_file: Path, db_path: Path) -> None:
    """An installed package's provider (here: a folder on PYTHONPATH holding the module and
    its ``.dist-info``), used by ``judge run`` as any built-in one is."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGIN_DIR), env.get("PYTHONPATH")]))
    judge = Path(sys.executable).parent / "judge"
    done = subprocess.run(
        [str(judge), "run", "--data", str(items_file), "--model", "echo/top",
         "--db", str(db_path), "--no-progress"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    runs = query(db_path, "SELECT count(*), any_value(simulated) FROM runs")
    assert runs == [(1, False)]
    ok = query(db_path, "SELECT count(DISTINCT item_id) FROM samples WHERE status = 'ok'")
    assert ok == [(6,)]
    finals = query(db_path, "SELECT count(*) FROM judgments WHERE final")
    assert finals[0][0] > 0
    models = query(db_path, "SELECT DISTINCT model FROM calls")
    assert models == [("echo/top",)]
