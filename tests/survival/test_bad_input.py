"""Bad input through the real CLI: a clear error naming file, line and field; exit 2; the
database exactly as it was (or not created at all).

Every case starts from a database that already holds one finished run and some ratings, runs one
`judge` command with one malformed input, and compares every table afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clinjudge.judges import ModelSettings
from clinjudge.orchestration._fit import context_window, oversized_item
from clinjudge.rubrics import Item, Rubric
from tests.cli._helpers import invoke
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

TABLES = ("runs", "items", "samples", "judgments", "calls", "messages", "human_ratings")
GOOD = {"id": "a", "notes": ["A note."], "summary": "S.", "specialty": "PC"}


def line(**changes: Any) -> str:
    record = {**GOOD, **changes}
    return json.dumps({k: v for k, v in record.items() if v is not ...}, ensure_ascii=False)


@dataclass
class Case:
    """One malformed input: how to write it, the command, what stderr must say."""

    name: str
    write: Callable[[Path], list[str]]  # writes files under the dir; returns the judge args
    expect: list[str]  # fragments of stderr; "{dir}" is the case's directory


def _items(name: str, text: str | bytes, *expect: str, extra: tuple[str, ...] = ()) -> Case:
    def write(folder: Path) -> list[str]:
        path = folder / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return ["run", "--data", str(path), "--model", "mock/judge", *extra]

    return Case(name.split(".")[0], write, [f"{{dir}}/{name}", *expect])


def _ratings(name: str, records: list[dict[str, Any]], *expect: str) -> Case:
    def write(folder: Path) -> list[str]:
        path = folder / name
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return ["ratings", "import", str(path)]

    return Case(name.split(".")[0], write, [f"{{dir}}/{name}", *expect])


def _csv(name: str, text: str, *expect: str) -> Case:
    return _items(name, text, *expect)


def _parquet(name: str, table: dict[str, list[Any]], *expect: str) -> Case:
    def write(folder: Path) -> list[str]:
        path = folder / name
        pq.write_table(pa.table(table), path)
        return ["run", "--data", str(path), "--model", "mock/judge"]

    return Case(name.split(".")[0], write, [f"{{dir}}/{name}", *expect])


def _shot_pool(folder: Path) -> list[str]:
    data = write_jsonl(folder / "items.jsonl", make_items(3))
    pool = folder / "pool.jsonl"
    pool.write_text(line(id="s1", scores={"accurate": 7}) + "\n")
    return ["run", "--data", str(data), "--shot-pool", str(pool), "--shots", "1"]


def _config(folder: Path) -> list[str]:
    data = write_jsonl(folder / "items.jsonl", make_items(3))
    config = folder / "run.yaml"
    config.write_text(f"data: {data}\njudge:\n  model: mock/judge\n  temprature: 0.1\n")
    return ["run", "--config", str(config)]


def _rating(**changes: Any) -> dict[str, Any]:
    record = {"item_id": "i1", "rater_id": "r1", "attribute": "accurate", "score": 4, **changes}
    return {k: v for k, v in record.items() if v is not ...}


CASES = [
    # -- JSONL items ----------------------------------------------------------------------------
    _items(
        "syntax.jsonl", line() + "\n\n" + '{"id": "b", "summary": \n', "line 3", "not valid JSON"
    ),
    _items("cut.jsonl", line() + "\n" + line(id="b")[:30], "line 2", "not valid JSON"),
    _items("array.jsonl", line() + "\n[1, 2]\n", "line 2", "must be a JSON object"),
    _items("scalar.jsonl", "42\n", "line 1", "must be a JSON object"),
    _items("no_summary.jsonl", line(summary=...) + "\n", "line 1", "field summary"),
    _items("no_id.jsonl", line(id=...) + "\n", "line 1", "field id"),
    _items("id_list.jsonl", line(id=["a"]) + "\n", "line 1", "field id"),
    _items("summary_number.jsonl", line(summary=5) + "\n", "line 1", "field summary"),
    _items("notes_object.jsonl", line(notes={"text": "x"}) + "\n", "line 1", "field notes"),
    _items("note_no_text.jsonl", line(notes=[{"id": "1"}]) + "\n", "field notes.0.text"),
    _items("empty_note.jsonl", line(notes=["ok", ""]) + "\n", "line 1", "field notes.1.text"),
    _items("empty_summary.jsonl", line(summary="") + "\n", "line 1", "field summary"),
    _items("unknown_field.jsonl", line(colour="red") + "\n", "line 1", "field colour"),
    _items("no_specialty.jsonl", line(specialty=...) + "\n", "line 1", "field specialty"),
    _items("no_notes.jsonl", line(notes=[]) + "\n", "line 1", "field notes"),
    _items("meta_list.jsonl", line(meta=[1]) + "\n", "line 1", "field meta"),
    _items("note_number.jsonl", line(notes=[7]) + "\n", "line 1", "field notes.0"),
    _items(
        "duplicate_ids.jsonl",
        line() + "\n" + line() + "\n",
        "line 2",
        "field id: duplicate id 'a'",
        "line 1",
    ),
    _items(
        "latin1.jsonl",
        (line() + "\n").encode() + line(id="b", notes=["café"]).encode("latin-1") + b"\n",
        "line 2",
        "not valid UTF-8",
    ),
    _items("empty.jsonl", "", "no records"),
    _items("blank.jsonl", "\n   \n\n", "no records"),
    _items("notes.txt", "just text\n", "unsupported format"),
    # -- CSV and Parquet items ------------------------------------------------------------------
    _csv(
        "bad_cell.csv",
        'id,notes,summary,specialty\na,"[""n""]",S,PC\nb,[oops,S,PC\n',
        "row 2",
        "field notes",
    ),
    _csv("no_summary_col.csv", 'id,notes,specialty\na,"[""n""]",PC\n', "row 1", "field summary"),
    _csv(
        "csv_latin1.csv",
        "id,notes,summary,specialty\na,x,caf\xe9,PC\n".encode("latin-1"),
        "line 2",
        "not valid UTF-8",
    ),
    _parquet(
        "summary_int.parquet",
        {"id": ["a"], "notes": [["n"]], "summary": [5], "specialty": ["PC"]},
        "row 1",
        "field summary",
    ),
    _parquet("no_notes_col.parquet", {"id": ["a"], "summary": ["s"], "specialty": ["PC"]}, "row 1"),
    # -- ratings --------------------------------------------------------------------------------
    _ratings("wrong_key.jsonl", [_rating(attribute="accuracy")], "line 1", "field attribute"),
    _ratings("off_scale.jsonl", [_rating(score=9)], "line 1", "field score"),
    _ratings("no_rater.jsonl", [_rating(rater_id=...)], "line 1", "field rater_id"),
    _ratings("score_text.jsonl", [_rating(score="good")], "line 1", "field score"),
    _ratings(
        "gate.jsonl",
        [_rating(attribute="abstraction", score=0), _rating(attribute="synthesized", score=3)],
        "line 2",
        "field score",
    ),
    _ratings(
        "dup_rating.jsonl",
        [_rating(), _rating(score=5)],
        "line 2",
        "duplicate rating",
    ),
    # -- names and settings ---------------------------------------------------------------------
    Case(
        "unknown_persona",
        lambda d: [
            "run",
            "--data",
            str(write_jsonl(d / "i.jsonl", make_items(2))),
            "--mode",
            "panel",
            "--personas",
            "dr_nobody",
        ],
        ["unknown persona 'dr_nobody'"],
    ),
    Case(
        "unknown_model",
        lambda d: [
            "run",
            "--data",
            str(write_jsonl(d / "i.jsonl", make_items(2))),
            "--model",
            "gpt4",
        ],
        ["field judge.model"],
    ),
    Case(
        "unknown_rubric",
        lambda d: [
            "run",
            "--data",
            str(write_jsonl(d / "i.jsonl", make_items(2))),
            "--rubric",
            "x",
        ],
        ["unknown rubric 'x'"],
    ),
    Case("shot_pool_scores", _shot_pool, ["{dir}/pool.jsonl", "line 1", "field scores"]),
    Case("config_key", _config, ["{dir}/run.yaml", "field judge.temprature"]),
]


def dump(db: Path) -> dict[str, list[tuple]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}
    finally:
        con.close()


@pytest.fixture(scope="module")
def seeded_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[tuple]]]:
    """A database with one finished mock run and one rating, and its contents."""
    folder = tmp_path_factory.mktemp("seeded")
    db = folder / "runs.duckdb"
    data = write_jsonl(folder / "items.jsonl", make_items(3))
    result = invoke("run", "--data", str(data), "--model", "mock/judge", "--db", str(db))
    assert result.exit_code == 0, result.stderr
    ratings = folder / "ratings.jsonl"
    ratings.write_text(json.dumps(_rating(item_id="item-0000")) + "\n")
    assert invoke("ratings", "import", str(ratings), "--db", str(db)).exit_code == 0
    return db, dump(db)


def _assert_clear_failure(result: Any, expect: list[str], folder: Path) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""  # no run id: nothing was started
    stderr = " ".join(result.stderr.split())
    for fragment in expect:
        assert fragment.format(dir=folder) in stderr, (fragment, result.stderr)


def test_there_are_at_least_thirty_cases() -> None:
    assert len({c.name for c in CASES}) == len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_and_the_database_is_unchanged(
    case: Case, seeded_db: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLINJUDGE_MODEL", raising=False)
    db, before = seeded_db
    args = case.write(tmp_path)
    result = invoke(*args, "--db", str(db))
    _assert_clear_failure(result, case.expect, tmp_path)
    assert dump(db) == before


@pytest.mark.parametrize("case", CASES[:12], ids=[c.name for c in CASES[:12]])
def test_bad_input_creates_no_database(case: Case, tmp_path: Path) -> None:
    db = tmp_path / "new" / "runs.duckdb"
    result = invoke(*case.write(tmp_path), "--db", str(db))
    _assert_clear_failure(result, case.expect, tmp_path)
    assert not db.parent.exists()


# -- database paths ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda d: d / "afile" / "x.duckdb", "is not a folder"),
        (lambda d: d / "adir.duckdb", "is a folder, not a database file"),
        (lambda d: d / "garbage.duckdb", "not a valid DuckDB database file"),
    ],
    ids=["parent_is_a_file", "db_is_a_directory", "not_a_database"],
)
def test_unusable_database_path(tmp_path: Path, make: Callable[[Path], Path], fragment: str):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir.duckdb").mkdir()
    (tmp_path / "garbage.duckdb").write_text("not a database")
    db = make(tmp_path)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    for args in (
        ["run", "--data", str(data), "--model", "mock/judge"],
        ["run", "--resume", "x"],
        ["runs", "list"],
    ):
        result = invoke(*args, "--db", str(db))
        assert result.exit_code == 2, result.stderr
        assert str(db) in result.stderr
        if args[1] != "--resume" and args[0] == "run":  # read-only commands may say "no such"
            assert fragment in " ".join(result.stderr.split())
        assert "Traceback" not in result.stderr
    assert (tmp_path / "garbage.duckdb").read_text() == "not a database"


def test_locked_database_is_refused_and_left_intact(seeded_db: tuple[Path, dict], tmp_path):
    db, before = seeded_db
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; con = duckdb.connect(sys.argv[1]); print('ready', flush=True); "
            "sys.stdin.read()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
        for args in (["run", "--data", str(data), "--model", "mock/judge"], ["runs", "list"]):
            result = invoke(*args, "--db", str(db))
            assert result.exit_code == 2
            # One line that names the database and says what is wrong.
            assert result.stderr.count("\n") == 1, result.stderr
            assert f"{db}: database is in use by another process (PID {holder.pid})" in (
                result.stderr
            )
    finally:
        holder.communicate("", timeout=30)
    assert dump(db) == before


# -- notes beyond the model's context window -----------------------------------------------


def test_context_window_is_known_for_hosted_models_only() -> None:
    assert context_window(ModelSettings(model="openai/gpt-4o-mini")) == 128000
    assert context_window(ModelSettings(model="openai/local-judge")) is None
    assert context_window(ModelSettings(model="mock/judge")) is None


def test_huge_note_beyond_the_context_is_named(pdsqi9: Rubric) -> None:
    huge = Item(id="big", notes=["small", "word " * 140_000], summary="s", specialty="PC")
    fine = make_items(3)
    settings = ModelSettings(model="openai/gpt-4o-mini")
    limit = context_window(settings)
    assert limit is not None
    problems = [oversized_item(i, pdsqi9, settings, "items.jsonl", limit) for i in [*fine, huge]]
    assert problems[:3] == [None, None, None]
    assert str(problems[3]).startswith(
        "items.jsonl: item 'big': field notes.1.text: the prompt is "
    )
    assert "128000-token context window of openai/gpt-4o-mini" in str(problems[3])


# -- names only the provider can check: unknown model, wrong key -----------------------------

RIGHT_KEY = "right-key-0123456789"


class GatedServer(FakeOpenAIServer):
    """404 for model ``nope``, 401 unless the request carries ``RIGHT_KEY``, else normal."""

    def _handle_chat(self, handler: Any, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(body)
        if body.get("model") == "nope":
            handler._send(404, b'{"error": {"message": "The model `nope` does not exist"}}')
        elif handler.headers.get("Authorization") != f"Bearer {RIGHT_KEY}":
            handler._send(401, b'{"error": {"message": "Incorrect API key provided."}}')
        else:
            super()._handle_chat(handler, body)


def _gated_run(srv: FakeOpenAIServer, data: Path, db: Path, model: str, key: str) -> Any:
    return invoke(
        "run", "--data", str(data), "--model", model, "--base-url", srv.base_url,
        "--db", str(db), "--concurrency", "2", "--no-progress",
        env={"OPENAI_API_KEY": key},
    )  # fmt: skip


def _stored(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(
            "SELECT r.status, (SELECT count(*) FROM samples), (SELECT count(*) FROM judgments),"
            " (SELECT count(*) FROM calls) FROM runs r"
        ).fetchall()
    finally:
        con.close()


def test_unknown_model_stops_the_run_at_once(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(20))
    db = tmp_path / "runs.duckdb"
    with GatedServer() as srv:
        result = _gated_run(srv, data, db, "openai/nope", RIGHT_KEY)
        sent = srv.request_count
    assert result.exit_code == 1
    stderr = " ".join(result.stderr.split())
    assert "error: model openai/nope: HTTP 404" in stderr and "does not exist" in stderr
    assert sent <= 2  # the calls in flight, nothing after
    # The run is recorded as failed, with no sample stored as if it had been judged.
    assert _stored(db) == [("failed", 0, 0, 0)]


def test_wrong_key_stops_the_run_and_resume_finishes_it(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(20))
    db = tmp_path / "runs.duckdb"
    with GatedServer() as srv:
        result = _gated_run(srv, data, db, "openai/local-judge", "wrong-key-0000000000")
        assert result.exit_code == 1
        assert "HTTP 401" in result.stderr and "judge run --resume" in result.stderr
        assert "wrong-key" not in result.stderr
        assert _stored(db) == [("failed", 0, 0, 0)]
        run_id = result.stdout.strip()
        resumed = invoke(
            "run", "--resume", run_id, "--db", str(db), "--no-progress",
            env={"OPENAI_API_KEY": RIGHT_KEY},
        )  # fmt: skip
    assert resumed.exit_code == 0, resumed.stderr
    assert _stored(db) == [("completed", 20, 20 * 11 + 20 * 11, 20)]
