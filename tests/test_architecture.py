"""The package tree is the data flow: imports point one way and never reach into another
package's private modules (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import clinjudge

ROOT = Path(clinjudge.__file__).parent

# What each package may import of ours, besides `errors`, `_util` and the root's `__version__`.
ALLOWED: dict[str, set[str]] = {
    "rubrics": set(),
    "personas": set(),
    "inputs": {"rubrics"},
    "prm_bridge": {"rubrics", "inputs"},
    "judges.clients": {"rubrics"},
    "judges.workflows": {"judges.clients", "rubrics", "personas", "prm_bridge"},
    "judges.doclens": {"judges.clients", "judges.workflows", "rubrics", "personas"},
    "judges": {"judges.clients", "judges.workflows", "judges.doclens"},
    "runs": {"rubrics", "inputs", "judges", "judges.clients", "judges.workflows", "prm_bridge"},
    "analysis": {"rubrics", "inputs", "runs", "judges.doclens"},
    "orchestration": {
        "rubrics",
        "personas",
        "inputs",
        "prm_bridge",
        "judges",
        "judges.clients",
        "judges.workflows",
        "judges.doclens",
        "runs",
    },
    "reports": {
        "rubrics",
        "personas",
        "prm_bridge",
        "judges",
        "judges.workflows",
        "judges.doclens",
        "runs",
        "analysis",
    },
}
SHARED = {"errors", "_util", ""}
PACKAGES = sorted(ALLOWED, key=len, reverse=True)


def _module_name(path: Path) -> str:
    parts = ["clinjudge", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(module: str) -> str | None:
    """The part of the design a module belongs to (``judges.doclens``, ``runs``, ...)."""
    rest = module.removeprefix("clinjudge").lstrip(".")
    for package in PACKAGES:
        if rest == package or rest.startswith(package + "."):
            return package
    first = rest.split(".")[0]
    # The root's own private modules (the API in _api.py) are the root package; _util is shared.
    return "" if first.startswith("_") and first != "_util" else first


def _imports() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every import of ours in the package."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
                targets += [
                    f"{node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            found += [(module, t, node.lineno) for t in targets if t.startswith("clinjudge")]
    return found


IMPORTS = _imports()


def test_the_scan_sees_the_package() -> None:
    importers = {module for module, _, _ in IMPORTS}
    assert "clinjudge.orchestration._session" in importers
    assert "clinjudge.judges.doclens._workflows" in importers
    assert len(IMPORTS) > 300


def test_no_module_imports_another_packages_private_module() -> None:
    leaks = []
    for module, target, line in IMPORTS:
        private = [i for i, part in enumerate(target.split(".")) if part.startswith("_")]
        if not private or target.startswith("clinjudge._util"):
            continue
        owner = ".".join(target.split(".")[: private[0]])
        if not (module == owner or module.startswith(owner + ".")):
            leaks.append(f"{module}:{line} imports {target}")
        elif _package_of(module) != _package_of(target):
            leaks.append(f"{module}:{line} imports {target} (a subpackage's private module)")
    assert leaks == []


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_lies_upstream(package: str) -> None:
    reached = set()
    for module, target, _ in IMPORTS:
        source, dest = _package_of(module), _package_of(target)
        if source == package and dest != package and dest not in SHARED:
            reached.add(dest)
    assert reached <= ALLOWED[package], f"{package} imports {sorted(reached - ALLOWED[package])}"


def test_allowed_imports_have_no_cycle() -> None:
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(package: str, path: list[str]) -> None:
        assert package not in visiting, " -> ".join([*path, package])
        if package in done:
            return
        visiting.add(package)
        for upstream in ALLOWED.get(package, set()):
            visit(upstream, [*path, package])
        visiting.discard(package)
        done.add(package)

    for package in ALLOWED:
        visit(package, [])


def test_the_library_never_imports_the_cli() -> None:
    library = [
        m for m, t, _ in IMPORTS if t.startswith("clinjudge.cli") and _package_of(m) != "cli"
    ]
    assert library == []
