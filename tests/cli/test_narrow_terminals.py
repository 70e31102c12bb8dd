"""Tables and the progress bar at 80 and 100 columns (issue 39, "Everyday use"): every line fits,
no number or header is cut to "…", and the values are there whole.

`judge runs list` and `judge runs show` run in a real pseudo-terminal sized with
`stty cols N`; the other tables go through a process of their own with ``COLUMNS`` (the console
reads the width once, when it starts) or a console of that width.
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from rich.cells import cell_len
from rich.console import Console

from clinjudge.cli._common import judge_command
from clinjudge.cli._demo import with_judge
from clinjudge.cli._fit import short_model
from clinjudge.orchestration._progress import RunProgress
from clinjudge.runs import FLAG_MEANINGS
from clinjudge.runs._provider_batches import ensure_batch_tables
from clinjudge.runs._store import RunStore
from tests.cli._helpers import JUDGE, invoke

WIDTHS = [80, 100]
HF_MODEL = "hf//home/user/models/SmolLM2-135M"
REPO = Path(__file__).resolve().parents[2]
RATINGS = REPO / "examples" / "pdsqi9_demo_ratings.jsonl"
DEMO_ITEMS = REPO / "examples" / "pdsqi9_demo.jsonl"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return {**env, "NO_COLOR": "1", "TERM": "xterm-256color", **extra}


def in_pty(width: int, *args: str) -> str:
    """What `judge ARGS` writes to a real terminal of ``width`` columns (``stty cols``)."""
    master, slave = pty.openpty()
    shell = f'stty cols {width} rows 200; exec "$0" "$@"'
    proc = subprocess.Popen(
        ["sh", "-c", shell, JUDGE, *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=_env(),
        start_new_session=True,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=120) == 0, b"".join(chunks).decode(errors="replace")
    text = b"".join(chunks).decode("utf-8", errors="replace").replace("\r\n", "\n")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # cursor codes, if any


def with_columns(width: int, *args: str) -> str:
    """stdout of `judge ARGS` in a process whose console is ``width`` columns wide."""
    result = subprocess.run(
        [JUDGE, *args], env=_env(COLUMNS=str(width)), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def assert_whole(out: str, width: int) -> None:
    """Nothing cut to "…" and no line wider than the terminal."""
    cut = [line for line in out.splitlines() if "…" in line]
    assert not cut, "\n".join(cut)
    too_wide = [line for line in out.splitlines() if cell_len(line) > width]
    assert not too_wide, "\n".join(too_wide)


def _mock_run(items: Path, db: Path, *extra: str) -> str:
    result = invoke(
        "run", "--data", str(items), "--model", "mock/judge", "--db", str(db), "--samples", "3",
        "--no-progress", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture
def dressed_run(items_file: Path, db_path: Path) -> str:
    """A mock run made to look like one of an `hf/` model by absolute path, with suspect
    flags of samples and of the run, and a provider batch."""
    run_id = _mock_run(items_file, db_path, "--name", "a-rather-long-run-name-for-tables")
    with RunStore(str(db_path)) as store:
        ensure_batch_tables(store)
        con = store.con
        con.execute("UPDATE calls SET model = ? WHERE run_id = ?", [HF_MODEL, run_id])
        models = json.dumps({"judge": HF_MODEL})
        con.execute("UPDATE runs SET models = ? WHERE run_id = ?", [models, run_id])
        flag = next(iter(FLAG_MEANINGS))
        con.execute(
            "INSERT INTO quality_flags VALUES (?, 'item-0', 0, 'judge', ?, 'accurate', 'x'), "
            "(?, '', 0, '', 'no_spread', 'citation', 'final score 3 on all 6 items')",
            [run_id, flag, run_id],
        )
        con.execute(
            "INSERT INTO provider_batches (run_id, attempt, batch_id, status, provider, model, "
            "created_at, request_count, completed, failed, errors, ingested) VALUES "
            "(?, 1, 'batch_6789abcdef0123456789abcdef', 'completed', 'openai', 'gpt-4o-mini', "
            "?, 18, 17, 1, ?, true)",
            [run_id, datetime.now(UTC), json.dumps(["1 request: context_length_exceeded"])],
        )
    return run_id


@pytest.mark.needs_judge_script
@pytest.mark.parametrize("width", WIDTHS)
def test_runs_list_in_a_real_terminal(dressed_run: str, db_path: Path, width: int) -> None:
    out = in_pty(width, "runs", "list", "--db", str(db_path))
    assert_whole(out, width)
    row = json.loads(invoke("runs", "list", "--db", str(db_path), "--json").stdout)[0]
    for cell in (
        dressed_run,
        "completed",
        str(row["created_at"])[:16],
        "a-rather-long-run-name-for-tables",
        "hf/SmolLM2-135M",
        f"{row['n_items']} items",
        f"{row['n_samples']} samples",
        f"{row['failed_items']} failed",
        f"${row['cost_usd']:.4f}",
    ):
        assert cell in out, (cell, out)
    assert "/home/user" not in out  # a path is shown by its file name


@pytest.mark.needs_judge_script
@pytest.mark.parametrize("width", WIDTHS)
def test_runs_show_in_a_real_terminal(dressed_run: str, db_path: Path, width: int) -> None:
    out = in_pty(width, "runs", "show", dressed_run, "--db", str(db_path))
    assert_whole(out, width)
    summary = json.loads(invoke("runs", "show", dressed_run, "--db", str(db_path), "--json").stdout)
    role = summary["by_agent"][0]
    for cell in (
        str(role["calls"]),
        str(role["tokens_in"]),
        str(role["tokens_out"]),
        f"{role['cost_usd']:.4f}",
        f"{role['latency_s_sum']:.4f}",
        "hf/SmolLM2-135M",
        "batch_6789abcdef0123456789abcdef",
        "no_spread",
    ):
        assert cell in out, (cell, out)
    words = out.split()
    for header in ("tokens", "cost", "latency", "requests", "completed", "failed"):
        assert header in words, header
    # The by-role row is one line (the model is not spread over many).
    assert len([line for line in out.splitlines() if "hf/SmolLM2" in line]) == 1
    assert "suspect-judgment flags" in out.replace("\n", " ")
    assert "provider batches" in out


@pytest.mark.needs_judge_script
@pytest.mark.parametrize("width", WIDTHS)
def test_agree_tables_fit(db_path: Path, width: int) -> None:
    run_id = _mock_run(DEMO_ITEMS, db_path)
    assert invoke("ratings", "import", str(RATINGS), "--db", str(db_path)).exit_code == 0
    out = with_columns(width, "agree", run_id, "--db", str(db_path), "--boot", "50")
    assert_whole(out, width)
    data = json.loads(
        invoke("agree", run_id, "--db", str(db_path), "--boot", "50", "--json").stdout
    )
    icc = data["per_attribute"]["accurate"]["primary"]["value"]
    assert f"{icc:.3f}" in out
    for header in ("ICC(3,k)", "Wilcoxon", "kappa", "alpha", "AC2"):
        assert header in out.split(), header

    file_out = with_columns(width, "agree", "--ratings", str(RATINGS), "--boot", "50")
    assert_whole(file_out, width)


def test_agree_ratings_without_judge_shows_the_raters_among_themselves() -> None:
    result = invoke("agree", "--ratings", str(RATINGS), "--boot", "50")
    assert result.exit_code == 0, result.stderr
    assert "undefined" not in result.stdout
    assert "No --judge was named" in result.stdout and "among themselves" in result.stdout
    data = json.loads(invoke("agree", "--ratings", str(RATINGS), "--boot", "50", "--json").stdout)
    for name in ("accurate", "citation"):
        value = data["per_attribute"][name]["icc"]["ICC3k"]["value"]
        assert f"{value:.3f}" in result.stdout, name


@pytest.mark.parametrize("width", WIDTHS)
def test_progress_bar_reads_whole(width: int) -> None:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, no_color=True)
    progress = RunProgress(console, 3000, calls=lambda: (3, 65.0))
    progress.start()
    try:
        for index in range(1234):
            progress.advance(index % 9 != 0, 12_345, 0.00123, 456.0)
        progress.tick()
        assert progress._bar is not None
        shown = Console(file=io.StringIO(), width=width, record=True, no_color=True)
        for renderable in progress._bar.get_renderables():
            shown.print(renderable)
    finally:
        progress.stop()
    out = shown.export_text()
    assert_whole(out, width)
    assert "━" in out  # the bar
    assert re.search(r"1234/3000 \d+:\d\d:\d\d ETA \d+:\d\d:\d\d", out), out
    flat = " ".join(out.split())
    for part in ("ok 1096", "failed 138", "samples/min", "(456 req/min)", "15,233,730 tok"):
        assert part in flat, part
    assert "$1.5178" in flat and "3 calls in flight (oldest 1m05s)" in flat


def test_run_ends_with_where_the_results_are(items_file: Path, db_path: Path) -> None:
    result = invoke(
        "run", "--data", str(items_file), "--model", "mock/judge", "--db", str(db_path),
        "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    run_id = result.stdout.strip()
    err = result.stderr
    assert f"results: run {run_id} in {db_path.absolute()}" in err
    assert f"judge runs show {run_id} --db {db_path}" in err
    assert f"judge view --db {db_path}" in err
    assert f"judge export {run_id} --out scores.csv --db {db_path}" in err


def test_judge_command_names_the_path_when_judge_is_not_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "venv" / "bin" / "judge"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert judge_command(str(script)) == str(script)
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin")
    assert judge_command(str(script)) == "judge"
    assert judge_command("judge") == "judge"  # found on PATH by its name
    lines = with_judge(["# judge run it", "RUN=$(judge run --x)", "judge runs show $RUN"], "/v/j")
    assert lines == ["# judge run it", "RUN=$(/v/j run --x)", "/v/j runs show $RUN"]


def test_demo_names_a_runnable_judge(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin"  # the README's install: the venv is not activated
    result = subprocess.run(
        [JUDGE, "demo", str(tmp_path / "demo")], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    assert commands and all(JUDGE in line for line in commands), result.stdout
    assert "activate" in result.stderr


def test_short_model_names() -> None:
    assert short_model(HF_MODEL) == "hf/SmolLM2-135M"
    assert short_model("hf/models/tiny.Q4_1.gguf") == "hf/tiny.Q4_1.gguf"
    assert short_model("openai/gpt-4o-mini") == "openai/gpt-4o-mini"
    assert short_model("hf-hub/org/name") == "hf-hub/org/name"


def test_wide_export_has_one_row_per_item(items_file: Path, db_path: Path, tmp_path: Path) -> None:
    run_id = _mock_run(items_file, db_path)
    wide = tmp_path / "wide.csv"
    result = invoke("export", run_id, "--db", str(db_path), "--out", str(wide), "--table", "wide")
    assert result.exit_code == 0, result.stderr
    con = duckdb.connect()
    rows = con.execute(f"SELECT * FROM read_csv_auto('{wide}')").fetchall()
    columns = [d[0] for d in con.description]
    assert len(rows) == 6
    assert columns[:3] == ["run_id", "item_id", "vendor"]
    for column in ("accurate", "citation", "valid", "samples_failed", "calls", "cost_usd"):
        assert column in columns, column
    assert columns.index("citation") < columns.index("accurate")  # the rubric's order
    long = tmp_path / "long.parquet"
    assert invoke("export", run_id, "--db", str(db_path), "--out", str(long)).exit_code == 0
    finals = dict(
        con.execute(
            f"SELECT item_id, value FROM '{long}' WHERE final AND attribute = 'accurate'"
        ).fetchall()
    )
    accurate = columns.index("accurate")
    assert {row[1]: row[accurate] for row in rows} == finals
    assert all(row[columns.index("calls")] == 3 for row in rows)


@pytest.mark.parametrize("width", WIDTHS)
def test_closing_flag_lines_read_whole(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from clinjudge.cli import _outcome

    shown = Console(file=io.StringIO(), width=width, record=True, no_color=True)
    monkeypatch.setattr(_outcome, "console", shown)
    flag = SimpleNamespace(flag="no_spread", attribute="citation", detail="final 3 on 6 of 6")
    counts = SimpleNamespace(
        run_id="20261207-140307-baddd7",
        suspect_samples=12,
        flag_counts={"at_token_cap": 10, "short_reason": 2},
        run_flags=[flag],
    )
    _outcome.print_flags(counts)  # type: ignore[arg-type]
    _outcome.print_next_steps(counts.run_id, "/tmp/elsewhere.duckdb")
    out = shown.export_text()
    assert "…" not in out
    flat = " ".join(out.split())
    for part in (
        "suspect: 12 sample(s) flagged (at_token_cap 10, short_reason 2)",
        "run flag: no_spread citation: final 3 on 6 of 6",
        "judge runs show 20261207-140307-baddd7 --db /tmp/elsewhere.duckdb",
        "results: run 20261207-140307-baddd7 in /tmp/elsewhere.duckdb",
    ):
        assert part in flat, (part, out)
