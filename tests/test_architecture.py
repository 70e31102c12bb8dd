"""The package tree is the data flow: imports point one way and never reach into another
package's private modules (docs/architecture.md)."""

from __future__ import annotations

import ast
import re
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
        "inputs",  # the rating pages check scores as ratings files are checked (#38)
        "personas",
        "prm_bridge",
        "judges",
        "judges.workflows",
        "judges.doclens",
        "runs",
        "analysis",
    },
}
SHARED = {"errors", "_util"}
# Packages free to import anything: the CLI is the outermost shell; the root package "" holds
# the public API (`_api`), which calls every part. Nothing below may import either.
OUTERMOST = {"cli", ""}
NOT_CODE = {"demo"}  # data shipped in the package (no Python modules)
PACKAGES = sorted(ALLOWED, key=len, reverse=True)


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = ["clinjudge", *path.relative_to(root).with_suffix("").parts]
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


def _is_module(name: str, root: Path) -> bool:
    """Whether ``clinjudge.a.b`` names a module or package in the tree at ``root``."""
    path = root.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names, relative ones (``from .x import y``) too."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _dynamic_imports(tree: ast.AST) -> list[tuple[str, int]]:
    """``importlib.import_module("clinjudge....")`` and ``__import__`` calls with a literal."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0]
        literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
        if name in ("import_module", "__import__") and literal:
            found.append((first.value, node.lineno))  # type: ignore[attr-defined]
    return found


def scan_imports(root: Path = ROOT) -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every import of ours under ``root``:
    absolute, relative and dynamic ones, and names taken from a package
    (``from clinjudge import runs`` imports ``clinjudge.runs``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(module, path, node)
                targets = [base]
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private or _is_module(full, root):
                        targets.append(full)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            found += [(module, t, node.lineno) for t in targets if t.startswith("clinjudge")]
        found += [(module, t, n) for t, n in _dynamic_imports(tree) if t.startswith("clinjudge")]
    return found


def _imports() -> list[tuple[str, str, int]]:
    return scan_imports(ROOT)


IMPORTS = _imports()


def test_the_scan_sees_the_package() -> None:
    importers = {module for module, _, _ in IMPORTS}
    assert "clinjudge.orchestration._session" in importers
    assert "clinjudge.judges.doclens._workflows" in importers
    assert len(IMPORTS) > 300


def private_leaks(imports: list[tuple[str, str, int]]) -> list[str]:
    """Imports of another package's (or a subpackage's) private modules."""
    leaks = []
    for module, target, line in imports:
        private = [i for i, part in enumerate(target.split(".")) if part.startswith("_")]
        if not private or target.startswith("clinjudge._util"):
            continue
        owner = ".".join(target.split(".")[: private[0]])
        if not (module == owner or module.startswith(owner + ".")):
            leaks.append(f"{module}:{line} imports {target}")
        elif _package_of(module) != _package_of(target):
            leaks.append(f"{module}:{line} imports {target} (a subpackage's private module)")
    return leaks


def upstream_breaches(imports: list[tuple[str, str, int]], package: str) -> set[str]:
    """Packages that ``package`` imports though they do not lie upstream of it (the root
    package and the CLI never do)."""
    reached = set()
    for module, target, _ in imports:
        source, dest = _package_of(module), _package_of(target)
        if source == package and dest != package and dest not in SHARED:
            reached.add(dest)
    return reached - ALLOWED[package]


def unlisted_packages(root: Path = ROOT) -> list[str]:
    """Packages in the tree that the table above does not place."""
    known = set(ALLOWED) | SHARED | OUTERMOST | NOT_CODE
    found = []
    for init in sorted(root.rglob("__init__.py")):
        name = _module_name(init, root).removeprefix("clinjudge").lstrip(".")
        if name and _package_of(f"clinjudge.{name}") not in known:
            found.append(name)
    return found


def test_no_module_imports_another_packages_private_module() -> None:
    assert private_leaks(IMPORTS) == []


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_lies_upstream(package: str) -> None:
    breaches = upstream_breaches(IMPORTS, package)
    assert not breaches, f"{package} imports {sorted(breaches)}"


def test_every_package_is_placed_in_the_table() -> None:
    assert unlisted_packages() == []


def _planted_tree(tmp_path: Path, planted: dict[str, str]) -> Path:
    """A small clinjudge tree with the given modules (relative path to source)."""
    root = tmp_path / "clinjudge"
    files = {
        "__init__.py": "",
        "_api.py": "",
        "rubrics/__init__.py": "",
        "runs/__init__.py": "",
        "runs/_store.py": "",
        "analysis/__init__.py": "",
        **planted,
    }
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root


@pytest.mark.parametrize(
    ("source", "reached"),
    [
        ("from clinjudge import runs\n", "runs"),  # through the root package
        ("from ..runs import _store\n", "runs"),  # relative
        ("from .. import runs\n", "runs"),  # relative, a package by name
        ("import importlib\nimportlib.import_module('clinjudge.runs._store')\n", "runs"),
        ("from clinjudge import _api\n", ""),  # the public API lies downstream of everything
        ("from clinjudge import evaluate\n", ""),
    ],
)
def test_a_planted_upward_import_is_caught(tmp_path: Path, source: str, reached: str) -> None:
    imports = scan_imports(_planted_tree(tmp_path, {"rubrics/_planted.py": source}))
    assert reached in upstream_breaches(imports, "rubrics")


def test_a_planted_private_import_is_caught(tmp_path: Path) -> None:
    for source in (
        "import importlib\nimportlib.import_module('clinjudge.runs._store')\n",
        "from ..runs import _store\n",
    ):
        imports = scan_imports(_planted_tree(tmp_path, {"analysis/_planted.py": source}))
        assert any("clinjudge.runs._store" in leak for leak in private_leaks(imports)), source


def test_a_planted_unlisted_package_is_caught(tmp_path: Path) -> None:
    root = _planted_tree(tmp_path, {"scheduling/__init__.py": "", "scheduling/_jobs.py": ""})
    assert unlisted_packages(root) == ["scheduling"]


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


# -- SQL lives in runs (#24) -------------------------------------------------------------------

# Statements that read or change tables; keywords in capitals, as our SQL writes them.
_SQL = re.compile(
    r"\bSELECT\b[\s\S]*?\bFROM\b|\bINSERT\s+(?:OR\s+\w+\s+)?INTO\b|\bUPDATE\s+\w+\s+SET\b"
    r"|\bDELETE\s+FROM\b|\b(?:CREATE|ALTER|DROP)\s+TABLE\b"
)
# Modules outside runs allowed SQL, each with why. Keep it short: a module that no longer holds
# SQL must leave the list (the test says so).
SQL_EXEMPT = {
    # Reads input files (JSONL, CSV, Parquet) through DuckDB, not the store.
    "inputs/_records.py",
}


def _literal_text(node: ast.AST) -> str | None:
    """The text of a string literal, an f-string or a ``+`` of them (other parts as ``{}``)."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(_literal_text(v) or "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_text(node.left), _literal_text(node.right)
        return None if left is None and right is None else (left or "{}") + (right or "{}")
    return None


def sql_outside_runs(root: Path = ROOT) -> dict[str, list[int]]:
    """Modules outside ``runs`` (relative path -> lines) whose string literals hold SQL;
    docstrings and other bare strings are prose and are not read."""
    found: dict[str, list[int]] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("runs/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        prose = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        lines = {
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant | ast.JoinedStr | ast.BinOp)
            and id(node) not in prose
            and _SQL.search(_literal_text(node) or "")
        }
        if lines:
            found[relative] = sorted(lines)
    return found


def test_sql_lives_only_in_runs(tmp_path: Path) -> None:
    # runs owns the schema, so every query is a named function there (docs/architecture.md).
    found = sql_outside_runs()
    leaks = {module: lines for module, lines in found.items() if module not in SQL_EXEMPT}
    assert leaks == {}, f"SQL outside clinjudge/runs (module: lines): {leaks}"
    stale = sorted(SQL_EXEMPT - set(found))
    assert stale == [], f"no SQL left in {stale}: remove them from SQL_EXEMPT"
    # The scan sees literals, f-strings and concatenations, and leaves docstrings alone.
    planted = {
        "analysis/_planted.py": (
            '"""SELECT x FROM y in prose."""\n'
            'Q = "SELECT a " + "FROM t"\n'
            'def f(t):\n    return f"DELETE FROM {t}"\n'
            'U = """UPDATE runs SET name = ?"""\n'
        ),
        "reports/_planted.py": '"""Docstring: INSERT INTO t."""\nX = "insert into prose"\n',
        "runs/_planted.py": 'Q = "SELECT 1 FROM t"\n',
    }
    root = _planted_tree(tmp_path, planted)
    assert sql_outside_runs(root) == {"analysis/_planted.py": [2, 4, 5]}


# Front doors export what other packages, the benchmarks and the docs use; the rest stays in the
# private modules (tests import those directly). ``analysis`` loads lazily and is left out.
NARROW_FRONT_DOORS = ("prm_bridge", "runs", "orchestration", "judges", "judges.doclens",
                      "judges.workflows", "rubrics", "inputs", "reports", "personas",
                      "runs.analysis_reads", "runs.report_reads",
                      "runs.orchestration_reads")  # fmt: skip


def _exported(package: str) -> list[str]:
    tree = ast.parse((ROOT / package.replace(".", "/") / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    return []


def _used_outside(package: str) -> set[str]:
    """Words of every module outside ``package`` (and of bench/), a cheap superset of what
    they import from it."""
    own = ROOT / package.replace(".", "/")
    files = [p for p in ROOT.rglob("*.py") if own not in p.parents]
    files += list((ROOT.parent / "bench").glob("*.py"))
    words: set[str] = set()
    for path in files:
        text = path.read_text()
        if f"clinjudge.{package}" in text or f"import {package.rsplit('.', 1)[-1]}" in text:
            words |= set(re.findall(r"\w+", text))
    return words


@pytest.mark.parametrize("package", NARROW_FRONT_DOORS)
def test_front_doors_export_only_what_is_used(package: str) -> None:
    docs = ROOT.parent / "docs"
    texts = [p.read_text() for p in docs.glob("*.md")] + [(ROOT.parent / "README.md").read_text()]
    documented = set(re.findall(r"\w+", "\n".join(texts)))
    module = __import__(f"clinjudge.{package}", fromlist=["_"])
    used = _used_outside(package) | documented
    unused = []
    for name in _exported(package):
        value = getattr(module, name)
        is_error = isinstance(value, type) and issubclass(value, BaseException)
        if name not in used and not is_error and not name.startswith("register_"):
            unused.append(name)
    assert unused == [], f"clinjudge.{package} exports names nothing outside it uses: {unused}"


# -- The store's front doors (#40) -------------------------------------------------------------

# The store's core (``clinjudge.runs``: schema, migrations, writes, the CLI's and the API's reads)
# is open to every package downstream of it; each read front door to its one consumer.
READ_DOORS = {
    "analysis": "runs.analysis_reads",
    "reports": "runs.report_reads",
    "orchestration": "runs.orchestration_reads",
}


def store_door_breaches(imports: list[tuple[str, str, int]]) -> list[str]:
    """Imports of a read front door (or of a module inside it) by anything but its consumer
    package and the door itself: other packages, the CLI, the API, the core, other doors."""
    doors = {f"clinjudge.{door}": consumer for consumer, door in READ_DOORS.items()}
    breaches = []
    for module, target, line in imports:
        door = next((d for d in doors if target == d or target.startswith(d + ".")), None)
        inside = door is not None and (module == door or module.startswith(door + "."))
        if door is not None and not inside and _package_of(module) != doors[door]:
            breaches.append(f"{module}:{line} imports {target}")
    return breaches


def test_each_read_door_is_imported_by_its_consumer_only() -> None:
    assert store_door_breaches(IMPORTS) == []
    # Each consumer goes through its door, and what a door exports the core does not.
    for consumer, door in READ_DOORS.items():
        importers = {m for m, t, _ in IMPORTS if t == f"clinjudge.{door}"}
        assert any(_package_of(m) == consumer for m in importers), door
        assert set(_exported(door)) & set(_exported("runs")) == set(), door


def test_a_planted_read_from_another_consumers_door_is_caught(tmp_path: Path) -> None:
    planted = {
        "runs/analysis_reads/__init__.py": "from clinjudge.runs._store import RunStore\n",
        "runs/report_reads/__init__.py": "",
        "reports/__init__.py": "",
        "analysis/_fine.py": "from clinjudge.runs.analysis_reads import RunStore\n",
        "reports/_planted.py": "from clinjudge.runs.analysis_reads import RunStore\n",
        "runs/_core.py": "from clinjudge.runs.report_reads import x\n",
        "_api.py": "from clinjudge.runs import analysis_reads\n",
    }
    imports = scan_imports(_planted_tree(tmp_path, planted))
    assert store_door_breaches(imports) == [
        "clinjudge._api:1 imports clinjudge.runs.analysis_reads",
        "clinjudge.reports._planted:1 imports clinjudge.runs.analysis_reads",
        "clinjudge.runs._core:1 imports clinjudge.runs.report_reads",
    ]


def _consumer_words(consumer: str) -> set[str]:
    """Words of the consumer package's modules, a cheap superset of what it imports."""
    paths = (ROOT / consumer).rglob("*.py")
    return {word for path in paths for word in re.findall(r"\w+", path.read_text())}


@pytest.mark.parametrize("consumer", sorted(READ_DOORS))
def test_read_doors_export_only_what_their_consumer_uses(consumer: str) -> None:
    door = READ_DOORS[consumer]
    unused = sorted(set(_exported(door)) - _consumer_words(consumer))
    assert unused == [], f"clinjudge.{door} exports names {consumer} does not use: {unused}"


# -- No import circles (#40) -------------------------------------------------------------------

# Folders whose circles other work in progress is breaking (issue 40), each with that work: a
# circle there is let through meanwhile, and a folder left with none fails the test, so the lead
# removes its entry once that work lands. Empty is the goal.
KNOWN_CYCLE_FOLDERS = {
    "clinjudge.analysis": "_agreement_result, _statistics (statistics registry, #40 part 3)",
}


def _folder(module: str, root: Path = ROOT) -> str:
    """The package folder a module lies in (a package's ``__init__`` lies in its own)."""
    is_package = root.joinpath(*module.split(".")[1:], "__init__.py").exists()
    return module if is_package else module.rsplit(".", 1)[0]


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of ours -> the modules of ours it imports anywhere in it (inside functions
    and ``TYPE_CHECKING`` blocks too): lazy imports hide a circle, they do not remove it.
    ``from package import module`` inside ``package`` is an edge to the module alone: the
    package is already loading."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = {name for name, _ in _dynamic_imports(tree)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, path, node)
                found = {f"{base}.{a.name}" for a in node.names}
                modules = {name for name in found if _is_module(name, root)}
                targets |= modules
                if modules != found or not module.startswith(base + "."):
                    targets.add(base)
        graph[module] = {t for t in targets if t.startswith("clinjudge") and t != module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of a graph: its strongly connected parts of two modules or more (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = [stack.pop()]
            while part[-1] != node:
                part.append(stack.pop())
            if len(part) > 1:
                cycles.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_circles_in_any_folder() -> None:
    cycles = import_cycles(module_graph())
    folders = [{_folder(m) for m in cycle} for cycle in cycles]
    new = [c for c, f in zip(cycles, folders, strict=True) if not f <= set(KNOWN_CYCLE_FOLDERS)]
    assert new == [], f"import circles (move the shared piece into its own module): {new}"
    gone = sorted(set(KNOWN_CYCLE_FOLDERS) - set().union(*folders))
    assert gone == [], f"no circle left in {gone}: remove them from KNOWN_CYCLE_FOLDERS"


def test_a_planted_circle_is_caught(tmp_path: Path) -> None:
    planted = {
        "orchestration/__init__.py": "from clinjudge.orchestration._a import a\n",
        "orchestration/_a.py": "from clinjudge.orchestration._b import b\n",
        # Inside a function, as the lazy imports that hid circles were.
        "orchestration/_b.py": "def b():\n    from clinjudge.orchestration._a import a\n",
        # A module taken from its own package is no circle through the package.
        "orchestration/_c.py": "from clinjudge.orchestration import _b\n",
    }
    graph = module_graph(_planted_tree(tmp_path, planted))
    assert import_cycles(graph) == [["clinjudge.orchestration._a", "clinjudge.orchestration._b"]]


# -- AutoGen is an adapter at the edges (#40) ---------------------------------------------------

# The only modules of the package that import AutoGen (autogen_core, autogen_ext,
# autogen_agentchat) when they run, each with why; imports for type checking only do not
# count. Conversations, requests and replies are our own types everywhere else: a module that
# no longer needs AutoGen must leave the list (the test says so).
AUTOGEN_AT_THE_EDGE = {
    # autogen-ext's OpenAI and Azure clients (a third party's AutoGen client) behind our
    # ModelClient: our messages become AutoGen's there, and its result a Completion.
    "judges/clients/_sdk_client.py",
    # The magentic workflow: AutoGen's agent framework, its runtime and the agents' client
    # (AutoGen's create() turned into our conversation call).
    "judges/workflows/_magentic.py",
    "judges/workflows/_magentic_chair.py",
    "judges/workflows/_magentic_client.py",
    "judges/workflows/_magentic_runtime.py",
    # The PRM verifier, an AutoGen agent seated in magentic discussions.
    "prm_bridge/_tool.py",
}
AUTOGEN_PACKAGES = ("autogen_core", "autogen_ext", "autogen_agentchat")


def _runtime_imports_of(tree: ast.Module, package: str) -> bool:
    """Whether a module imports ``package`` outside an ``if TYPE_CHECKING:`` block."""
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        if any(name == package or name.startswith(package + ".") for name in names):
            return True
    return False


def autogen_importers(root: Path = ROOT) -> set[str]:
    """Modules under ``root`` (relative paths) that import AutoGen when they run."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(_runtime_imports_of(tree, p) for p in AUTOGEN_PACKAGES):
            found.add(path.relative_to(root).as_posix())
    return found


def test_only_the_edges_import_autogen() -> None:
    assert autogen_importers() == AUTOGEN_AT_THE_EDGE


def test_a_planted_autogen_import_is_caught(tmp_path: Path) -> None:
    (tmp_path / "providers").mkdir()
    (tmp_path / "_model.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from autogen_core.models import LLMMessage\n",
        encoding="utf-8",
    )
    (tmp_path / "providers" / "new.py").write_text(
        "def build():\n    from autogen_ext.models.openai import OpenAIChatCompletionClient\n",
        encoding="utf-8",
    )
    assert autogen_importers(tmp_path) == {"providers/new.py"}
