"""LLM calls and tokens per item of the judge modes: single, panel and magentic (SPEC §5, §10).

Runs every mode against the fake OpenAI server (in process, no latency) on the same synthetic
items and reads the calls table of each run: LLM calls, prompt tokens and completion tokens per
item, each also as a ratio to the single judge. The fake server counts tokens as whitespace
words, so the token numbers compare prompt sizes between modes, not a real tokenizer's counts.

Configurations: single; panel of the 3 personas of the ``scoring`` set; magentic with the same
personas for 1 and 2 rounds, with and without ``--no-planning``. Magentic needs a routing
responder (the orchestrator's ledger and speaker choices), taken from ``tests/magentic_fake.py``;
without that file, or without the magentic mode, those rows are reported as pending.

Those magentic rows are a best case: the fake's ledger reports progress and says the request is
satisfied as soon as every persona has spoken. Two harder scenarios are reported next to them
(1 round, planning): ``stalled``, where every ledger says no progress is being made, so the chair
counts stalls and replans (updated facts and plan) each time it reaches ``--max-stalls``; and
``looping``, where the ledger keeps choosing the same persona, so the request is never
satisfied and the discussion runs until the turn cap (``--max-turns``) ends it.

Usage: python bench/panel_cost.py [--items 8] [--personas scoring]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.throughput import bench_items  # noqa: E402
from clinjudge.judges import ModelSettings  # noqa: E402
from clinjudge.judges.workflows import workflow_for  # noqa: E402
from clinjudge.orchestration import RetryPolicy, RunConfig, create_run, execute_run, prepare_run  # noqa: E402
from clinjudge.runs import RunStore  # noqa: E402
from tests.fake_openai import FakeOpenAIServer, pdsqi9_scores  # noqa: E402

Responder = Callable[[dict[str, Any]], Any]

# Harder magentic scenarios: label -> the fake ledger's behaviour (see the module docstring).
SCENARIOS = {"stalled": "stalled", "looping": "repeat_speaker"}


@dataclass
class Row:
    """Per-item averages of one configuration."""

    label: str
    calls: float | None = None
    prompt_tokens: float | None = None
    completion_tokens: float | None = None
    ok: int = 0
    failed: int = 0
    note: str = ""


def _json_responder(body: dict[str, Any]) -> dict[str, Any]:
    """A valid PDSQI-9 rating whatever the prompt (single judge and panel members)."""
    text = "".join(str(m.get("content")) for m in body.get("messages", []))
    return pdsqi9_scores(text[-2000:])


def _magentic_responder(
    personas: str, rounds: int, ledger: str = "ok"
) -> tuple[Responder | None, str]:
    """The routing responder of tests/magentic_fake.py, if it exists and magentic is a mode.

    Its ledger says the request is satisfied once every persona has spoken ``rounds`` times;
    ``ledger`` picks a misbehaving ledger (``stalled``, ``repeat_speaker``).
    """
    try:
        workflow_for("magentic")
    except ValueError:
        return None, "magentic mode not registered yet (pending)"
    try:
        module = importlib.import_module("tests.magentic_fake")
    except ModuleNotFoundError:
        return None, "tests/magentic_fake.py not written yet (pending)"
    fake = getattr(module, "PanelFake", None)
    if fake is None:
        return None, "tests/magentic_fake.py has no PanelFake responder (pending)"
    return fake(personas=personas, satisfied_after=rounds, ledger=ledger), ""


def _measure(label: str, tmp: Path, data: Path, base_url: str, n_items: int, **config: Any) -> Row:
    judge = ModelSettings(model="openai/bench-judge", base_url=base_url, timeout=30.0)
    db = tmp / f"{label.replace(' ', '_').replace(',', '')}.duckdb"
    run_config = RunConfig(
        data=str(data),
        judge=judge,
        db=str(db),
        concurrency=8,
        retry=RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.05, jitter=0.0),
        **config,
    )
    prepared = prepare_run(run_config)
    with RunStore(db) as store:
        run_id = create_run(store, prepared)
        tally = execute_run(store, run_id, prepared, show_progress=False)
        totals = store.query(
            """
            SELECT count(*) AS calls, coalesce(sum(prompt_tokens), 0) AS p,
                   coalesce(sum(completion_tokens), 0) AS c
            FROM calls WHERE run_id = ?""",
            [run_id],
        )[0]
    return Row(
        label,
        totals["calls"] / n_items,
        totals["p"] / n_items,
        totals["c"] / n_items,
        tally.ok,
        tally.failed,
    )


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.2f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _table(rows: list[Row]) -> list[str]:
    base = rows[0]
    lines = [
        "| mode | calls/item | prompt tok/item | completion tok/item | calls x | prompt x "
        "| completion x | ok/failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if row.calls is None:
            lines.append(f"| {row.label} | {row.note} | | | | | | |")
            continue
        lines.append(
            f"| {row.label} | {_num(row.calls)} | {_num(row.prompt_tokens)} "
            f"| {_num(row.completion_tokens)} | {_ratio(row.calls, base.calls)} "
            f"| {_ratio(row.prompt_tokens, base.prompt_tokens)} "
            f"| {_ratio(row.completion_tokens, base.completion_tokens)} "
            f"| {row.ok}/{row.failed} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--personas", default="scoring")
    args = parser.parse_args()

    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = tmp / "items.jsonl"
        data.write_text("".join(i.model_dump_json() + "\n" for i in bench_items(args.items)))
        with FakeOpenAIServer(_json_responder) as server:
            rows.append(_measure("single", tmp, data, server.base_url, args.items))
            rows.append(
                _measure(
                    f"panel ({args.personas})",
                    tmp,
                    data,
                    server.base_url,
                    args.items,
                    mode="panel",
                    personas=args.personas,
                )
            )
        # The best case (the fake's ledger ends on time), then the stalling and looping ones.
        cases = [
            (f"magentic {rounds} round(s), " + ("planning" if planning else "--no-planning"),
             rounds, planning, "ok")
            for rounds in (1, 2)
            for planning in (True, False)
        ] + [
            (f"magentic 1 round(s), planning, {scenario}", 1, True, ledger)
            for scenario, ledger in SCENARIOS.items()
        ]  # fmt: skip
        for label, rounds, planning, ledger in cases:
            magentic, pending = _magentic_responder(args.personas, rounds, ledger)
            if magentic is None:
                rows.append(Row(label, note=pending))
                continue
            with FakeOpenAIServer(magentic) as server:
                rows.append(
                    _measure(
                        label,
                        tmp,
                        data,
                        server.base_url,
                        args.items,
                        mode="magentic",
                        personas=args.personas,
                        rounds=rounds,
                        planning=planning,
                    )
                )

    print(f"# panel_cost {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {args.items} items")
    print("\n".join(_table(rows)))
    by_label = {r.label: r for r in rows}
    for rounds in (1, 2):
        default = by_label[f"magentic {rounds} round(s), planning"]
        lean = by_label[f"magentic {rounds} round(s), --no-planning"]
        if default.calls and lean.calls is not None:
            print(
                f"magentic {rounds} round(s): --no-planning / default calls = "
                f"{lean.calls / default.calls:.2f} (target <= 0.6)"
            )
    best = by_label["magentic 1 round(s), planning"]
    for scenario in SCENARIOS:
        worse = by_label[f"magentic 1 round(s), planning, {scenario}"]
        if best.calls and worse.calls is not None:
            print(
                f"magentic 1 round, {scenario} / best case: calls "
                f"{worse.calls / best.calls:.2f}x, prompt tokens "
                f"{_ratio(worse.prompt_tokens, best.prompt_tokens)}x"
            )


if __name__ == "__main__":
    main()
