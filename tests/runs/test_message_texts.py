"""System messages stored once per run (``message_rows`` + ``message_texts`` behind the
``messages`` view): every reader sees the transcripts the model was sent and answered, in new
files, in files of the old layout (read as they are, migrated, resumed), after merges and
deletions.

Expected transcripts are built here from what the fake server received and answered, never
from the store's own rows.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest

from clinjudge import load_run
from clinjudge.judges import ModelSettings
from clinjudge.orchestration import RetryPolicy, RunConfig, create_run, execute_run, prepare_run
from clinjudge.runs import RunStore, delete_run, export_run, merge_databases
from clinjudge.runs import _message_texts as message_texts
from clinjudge.runs._store import SCHEMA_VERSION
from clinjudge.runs.report_reads._viewer_reads import item_table_rows, item_table_rows_by_item
from tests.factories import make_items, persona_of, responder, write_jsonl
from tests.fake_openai import FakeOpenAIServer, pdsqi9_scores

FAST = RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.05, jitter=0.01)

Transcript = tuple[tuple[str, str], ...]

# The messages table as clinjudge 0.x wrote it up to schema version 5 (written out here, not
# taken from the package).
OLD_MESSAGES_DDL = """
CREATE TABLE messages (
    run_id VARCHAR,
    item_id VARCHAR,
    sample INTEGER,
    agent VARCHAR,
    seq INTEGER,
    role VARCHAR,
    content VARCHAR,
    PRIMARY KEY (run_id, item_id, sample, agent, seq)
)
"""


class Recorder:
    """A fake-server responder that keeps every exchange: (agent, request turns + reply)."""

    def __init__(self, panel: bool = False) -> None:
        self.panel = panel
        self.exchanges: list[tuple[str, Transcript]] = []

    def __call__(self, body: dict[str, Any]) -> str:
        turns = tuple((m["role"], m["content"]) for m in body["messages"])
        if self.panel:
            agent, reply = persona_of(body), json.dumps(responder(body))
        else:
            agent, reply = "judge", json.dumps(pdsqi9_scores(turns[-1][1]))
        self.exchanges.append((agent, (*turns, ("assistant", reply))))
        return reply

    def expected(self) -> Counter[tuple[str, Transcript]]:
        return Counter(self.exchanges)


def _config(data: Path, db: Path, url: str, **kw: Any) -> RunConfig:
    judge = ModelSettings(model="openai/local-judge", base_url=url, timeout=5.0)
    return RunConfig(data=str(data), db=str(db), judge=judge, retry=FAST, **kw)


def _judge(config: RunConfig, run_id: str | None = None) -> str:
    prepared = prepare_run(config)
    with RunStore(config.db) as store:
        run_id = run_id or create_run(store, prepared)
        execute_run(store, run_id, prepared, show_progress=False)
    return run_id


def _run(
    tmp: Path, name: str, *, items: int = 3, panel: bool = False, **kw: Any
) -> tuple[Path, str, Recorder]:
    data = write_jsonl(tmp / f"{name}.jsonl", make_items(items))
    recorder = Recorder(panel)
    with FakeOpenAIServer(recorder) as server:
        if panel:
            kw.update(mode="panel", personas="scoring")
        config = _config(data, tmp / f"{name}.duckdb", server.base_url, **kw)
        run_id = _judge(config)
    return tmp / f"{name}.duckdb", run_id, recorder


def _grouped(rows: list[dict[str, Any]]) -> dict[tuple[str, int, str], list[tuple[int, str, str]]]:
    out: dict[tuple[str, int, str], list[tuple[int, str, str]]] = {}
    for row in rows:
        key = (row["item_id"], row["sample"], row["agent"])
        out.setdefault(key, []).append((row["seq"], row["role"], row["content"]))
    return {key: sorted(turns) for key, turns in out.items()}


def _as_exchanges(grouped: dict[tuple[str, int, str], list[tuple[int, str, str]]]) -> Counter:
    return Counter(
        (agent, tuple((role, content) for _, role, content in turns))
        for (_, _, agent), turns in grouped.items()
    )


def _every_reader(db: Path, run_id: str) -> dict[str, Any]:
    """What each reader of transcripts returns for a run, in one comparable form each."""
    with RunStore(db, read_only=True) as store:
        items = [
            r["item_id"]
            for r in store.query("SELECT item_id FROM items WHERE run_id = ?", [run_id])
        ]
        sql = store.query("SELECT * FROM messages WHERE run_id = ?", [run_id])
        page = {item: item_table_rows(store, "messages", run_id, item) for item in items}
        pages = item_table_rows_by_item(store, "messages", run_id, items)
    api = load_run(run_id, db=db).messages().to_pylist()
    return {"sql": sql, "api": api, "page": page, "pages": pages}


def _check_readers(db: Path, run_id: str, expected: Counter) -> dict[str, Any]:
    got = _every_reader(db, run_id)
    assert _as_exchanges(_grouped(got["sql"])) == expected
    assert sorted(got["api"], key=str) == sorted(got["sql"], key=str)
    assert list(got["api"][0]) == list(message_texts.MESSAGE_COLUMNS)
    for item, rows in got["page"].items():
        assert rows == got["pages"][item]
        mine = [r for r in got["sql"] if r["item_id"] == item]
        assert sorted(tuple(r.values()) for r in rows) == sorted(
            (r["sample"], r["agent"], r["seq"], r["role"], r["content"]) for r in mine
        )
    return got


def _physical(db: Path, run_id: str) -> tuple[list[tuple], list[tuple]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT role, content IS NULL, text_id FROM message_rows WHERE run_id = ?", [run_id]
        ).fetchall()
        texts = con.execute(
            "SELECT text_id, content FROM message_texts WHERE run_id = ?", [run_id]
        ).fetchall()
    finally:
        con.close()
    return rows, texts


def _system_texts(recorder: Recorder) -> set[str]:
    return {turns[0][1] for _, turns in recorder.exchanges if turns[0][0] == "system"}


def _to_old_layout(src: Path, dst: Path) -> None:
    """A copy of ``src`` as a schema-version-5 store: ``messages`` one table, texts inline, in
    the order the rows were written."""
    shutil.copyfile(src, dst)
    con = duckdb.connect(str(dst))
    try:
        con.execute(OLD_MESSAGES_DDL.replace("TABLE messages", "TABLE old_messages"))
        con.execute(
            "INSERT INTO old_messages SELECT m.run_id, m.item_id, m.sample, m.agent, m.seq, "
            "m.role, coalesce(m.content, t.content) FROM message_rows m LEFT JOIN message_texts t "
            "ON t.run_id = m.run_id AND t.text_id = m.text_id ORDER BY m.rowid"
        )
        con.execute("DROP VIEW messages")
        con.execute("DROP TABLE message_rows")
        con.execute("DROP TABLE message_texts")
        con.execute("ALTER TABLE old_messages RENAME TO messages")
        con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
        assert con.execute(
            "SELECT table_type FROM information_schema.tables WHERE table_name = 'messages'"
        ).fetchone() == ("BASE TABLE",)
    finally:
        con.close()


def _export(db: Path, run_id: str, out: Path) -> bytes:
    with RunStore(db, read_only=True) as store:
        export_run(store, run_id, out, "csv", table="transcripts")
    return out.read_bytes()


def test_single_judge_stores_its_system_message_once(tmp_path: Path) -> None:
    db, run_id, recorder = _run(tmp_path, "single", items=3, samples=2)
    _check_readers(db, run_id, recorder.expected())
    rows, texts = _physical(db, run_id)
    (system,) = _system_texts(recorder)
    assert texts == [(message_texts.text_id(system), system)]
    assert len(rows) == 3 * 2 * 3
    for role, content_null, text_id in rows:
        # Only system messages are shared; every other text stays in its row.
        assert (role == "system") == content_null == (text_id is not None)


def test_panel_stores_each_persona_system_message_once(tmp_path: Path) -> None:
    db, run_id, recorder = _run(tmp_path, "panel", items=2, panel=True)
    assert {agent for agent, _ in recorder.exchanges} == {
        "high_scorer",
        "low_scorer",
        "middle_scorer",
    }
    _check_readers(db, run_id, recorder.expected())
    _, texts = _physical(db, run_id)
    systems = _system_texts(recorder)
    assert len(systems) == 3
    assert sorted(texts) == sorted((message_texts.text_id(s), s) for s in systems)


def test_old_layout_reads_the_same_and_exports_the_same(tmp_path: Path) -> None:
    db, run_id, recorder = _run(tmp_path, "single", items=3, samples=2)
    old = tmp_path / "old.duckdb"
    _to_old_layout(db, old)
    new_view = _check_readers(db, run_id, recorder.expected())
    old_view = _check_readers(old, run_id, recorder.expected())  # read-only: not migrated
    assert old_view == new_view  # same rows, same order, every reader
    assert _export(old, run_id, tmp_path / "old.csv") == _export(db, run_id, tmp_path / "new.csv")
    with RunStore(old, read_only=True) as store:
        assert not store.has_table("message_rows")


def test_old_layout_is_migrated_read_unchanged_and_resumed(tmp_path: Path) -> None:
    db, run_id, recorder = _run(tmp_path, "single", items=4, samples=2)
    old = tmp_path / "old.duckdb"
    _to_old_layout(db, old)
    # A run killed before its last item was judged.
    con = duckdb.connect(str(old))
    for table in ("messages", "samples", "judgments", "calls"):
        con.execute(f"DELETE FROM {table} WHERE item_id = 'item-0003'")
    con.execute("DELETE FROM judgments WHERE sample = 0")
    con.execute("UPDATE runs SET status = 'interrupted', finished_at = NULL")
    con.close()
    before = _every_reader(old, run_id)
    with RunStore(old) as store:  # opened for writing: migrated
        assert store.query("SELECT value FROM meta WHERE key = 'schema_version'") == [
            {"value": str(SCHEMA_VERSION)}
        ]
        assert store.has_column("message_rows", "text_id") and store.has_table("message_texts")
    assert _every_reader(old, run_id) == before
    rows, texts = _physical(old, run_id)
    assert texts == [] and all(text_id is None for _, _, text_id in rows)  # rows kept inline

    resumed = Recorder()
    with FakeOpenAIServer(resumed) as server:
        _judge(_config(tmp_path / "single.jsonl", old, server.base_url, samples=2), run_id)
    assert len(resumed.exchanges) == 2  # only the missing item, two samples
    _check_readers(old, run_id, recorder.expected())
    rows, texts = _physical(old, run_id)
    (system,) = _system_texts(recorder)
    assert texts == [(message_texts.text_id(system), system)]
    assert sum(1 for role, _, text_id in rows if text_id is not None) == 2  # the new samples'
    assert _export(old, run_id, tmp_path / "old.csv") == _export(db, run_id, tmp_path / "new.csv")


def test_merge_of_shards_new_and_old_shares_system_messages(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(6))
    recorder = Recorder()
    shards = [tmp_path / "shard_1.duckdb", tmp_path / "shard_2.duckdb"]
    with FakeOpenAIServer(recorder) as server:
        ids = {
            _judge(_config(data, path, server.base_url, shard=f"{i}/2"))
            for i, path in enumerate(shards, start=1)
        }
    (run_id,) = ids
    old_shard = tmp_path / "shard_2_old.duckdb"
    _to_old_layout(shards[1], old_shard)
    merged = tmp_path / "merged.duckdb"
    summary = merge_databases([shards[0], old_shard], merged)
    assert summary.conflicts == 0
    assert summary.tables["messages"].added == 6 * 3
    _check_readers(merged, run_id, recorder.expected())
    rows, texts = _physical(merged, run_id)
    (system,) = _system_texts(recorder)
    # One text for the run whichever layout each shard had, keyed as the writer keys it.
    assert texts == [(message_texts.text_id(system), system)]
    assert all((role == "system") == (text_id is not None) for role, _, text_id in rows)
    again = merge_databases([old_shard, shards[0], shards[1]], merged)
    assert again.conflicts == 0 and again.tables["messages"].added == 0
    assert _physical(merged, run_id) == (rows, texts)


def test_merge_reports_a_changed_system_message_as_a_conflict(tmp_path: Path) -> None:
    db, run_id, _ = _run(tmp_path, "single", items=2)
    changed = tmp_path / "changed.duckdb"
    _to_old_layout(db, changed)
    con = duckdb.connect(str(changed))
    con.execute(
        "UPDATE messages SET content = content || ' (edited)' WHERE item_id = 'item-0001'"
        " AND role = 'system'"
    )
    con.close()
    merged = tmp_path / "merged.duckdb"
    merge_databases([db], merged)
    summary = merge_databases([changed], merged)
    assert summary.tables["messages"].conflicts == 1
    assert summary.tables["messages"].added == 0
    _, texts = _physical(merged, run_id)
    assert len(texts) == 1  # the conflicting row's text was not added


def test_delete_leaves_no_orphan_texts_and_other_runs_intact(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    recorder = Recorder()
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer(recorder) as server:
        first = _judge(_config(data, db, server.base_url, name="first"))
        second = _judge(_config(data, db, server.base_url, name="second", samples=2))
    kept_before = _every_reader(db, second)
    with RunStore(db) as store:
        removed = delete_run(store, first)
    assert removed["messages"] == 2 * 3
    assert "message_rows" not in removed and "message_texts" not in removed
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute(
            "SELECT count(*) FROM message_texts WHERE run_id = ?", [first]
        ).fetchone() == (0,)
        assert con.execute(
            "SELECT count(*) FROM message_rows WHERE run_id = ?", [first]
        ).fetchone() == (0,)
        # Every text is named by a row, every named text exists.
        orphans = con.execute(
            "SELECT count(*) FROM message_texts t WHERE NOT EXISTS (SELECT 1 FROM message_rows m "
            "WHERE m.run_id = t.run_id AND m.text_id = t.text_id)"
        ).fetchone()
        dangling = con.execute(
            "SELECT count(*) FROM message_rows m WHERE text_id IS NOT NULL AND NOT EXISTS "
            "(SELECT 1 FROM message_texts t WHERE m.run_id = t.run_id AND m.text_id = t.text_id)"
        ).fetchone()
    finally:
        con.close()
    assert orphans == (0,) and dangling == (0,)
    assert _every_reader(db, second) == kept_before


def message_rows(
    run_id: str, system: str, items: range, role: str = "system"
) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run_id,
            "item_id": f"i{n}",
            "sample": 1,
            "agent": "judge",
            "seq": seq,
            "role": r,
            "content": text,
        }
        for n in items
        for seq, (r, text) in enumerate(
            [(role, system), ("user", f"item {n}"), ("assistant", "{}")]
        )
    ]


def test_writes_are_idempotent_and_atomic(tmp_path: Path) -> None:
    system = "rubric " * 2000
    with RunStore(tmp_path / "runs.duckdb") as store:
        store.write_batch({"messages": message_rows("r", system, range(3))})
        store.write_batch(
            {"messages": message_rows("r", system, range(3))}
        )  # a batch written again
        store.write_batch({"messages": message_rows("r", system, range(2, 5))})  # partly stored
        assert store.query("SELECT count(*) AS n FROM message_rows") == [{"n": 15}]
        assert store.query("SELECT run_id, content FROM message_texts") == [
            {"run_id": "r", "content": system}
        ]
        # A batch that fails half-way leaves neither its rows nor its texts.
        bad = {
            "run_id": "r",
            "item_id": "x",
            "sample": "not a number",
            "agent": "a",
            "attribute": "k",
        }
        with pytest.raises(Exception):  # noqa: B017 - DuckDB's conversion error
            store.write_batch(
                {"messages": message_rows("r2", "other " * 300, range(1)), "judgments": [bad]}
            )
        assert store.query("SELECT count(*) AS n FROM message_texts") == [{"n": 1}]
        assert store.query("SELECT count(*) AS n FROM message_rows WHERE run_id = 'r2'") == [
            {"n": 0}
        ]
        # The same text in another run is that run's own.
        store.write_batch({"messages": message_rows("r2", system, range(1))})
        assert store.query("SELECT count(*) AS n FROM message_texts") == [{"n": 2}]
    with RunStore(tmp_path / "runs.duckdb") as store:  # a new process resuming: same keys
        store.write_batch({"messages": message_rows("r", system, range(5, 6))})
        assert store.query("SELECT count(*) AS n FROM message_texts WHERE run_id = 'r'") == [
            {"n": 1}
        ]
        got = store.query("SELECT * FROM messages WHERE run_id = 'r' ORDER BY item_id, seq")
    assert [(r["item_id"], r["role"], r["content"]) for r in got] == [
        (f"i{n}", role, text)
        for n in range(6)
        for role, text in (("system", system), ("user", f"item {n}"), ("assistant", "{}"))
    ]


def test_each_distinct_system_message_is_hashed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed: list[int] = []
    real = message_texts.text_id

    def counting(text: str) -> str:
        hashed.append(len(text))
        return real(text)

    monkeypatch.setattr(message_texts, "text_id", counting)
    system = "rubric " * 1500
    with RunStore(tmp_path / "runs.duckdb") as store:
        for start in range(0, 40, 4):
            store.write_batch({"messages": message_rows("r", system, range(start, start + 4))})
        assert hashed == [len(system)]
        # An equal text in another object (a persona's prompt rendered again): same key, no
        # second SHA-256, no second text.
        equal = "".join(["rubric "] * 1500)
        assert equal is not system
        store.write_batch({"messages": message_rows("r", equal, range(40, 41))})
        assert hashed == [len(system)]
        other = "another rubric " * 800
        store.write_batch({"messages": message_rows("r", other, range(41, 42))})
        assert hashed == [len(system), len(other)]
        assert store.query("SELECT count(*) AS n FROM message_texts") == [{"n": 2}]


def test_text_key_is_duckdbs_sha256() -> None:
    con = duckdb.connect()
    for text in ("", "plain", "é and 😀 and \u200b", "x" * 10_000):
        (key,) = con.execute("SELECT sha256(?)", [text]).fetchone()
        assert message_texts.text_id(text) == key


def test_magentic_discussion_reads_the_same_in_both_layouts(tmp_path: Path) -> None:
    from tests.magentic_fake import PanelFake

    fake = PanelFake()
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "magentic.duckdb"
    with FakeOpenAIServer(responder=fake) as server:
        config = _config(data, db, server.base_url, mode="magentic", personas=fake.personas)
        run_id = _judge(config)
    old = tmp_path / "old.duckdb"
    _to_old_layout(db, old)
    new_view, old_view = _every_reader(db, run_id), _every_reader(old, run_id)
    assert new_view == old_view
    turns = [r["content"] for r in new_view["sql"]]
    assert len(turns) >= 2 * 4 and all(isinstance(t, str) and t for t in turns)
    rows, texts = _physical(db, run_id)
    # A discussion's turns hold no system message (the agents' own prompts are not turns).
    assert texts == [] and all(text_id is None for _, _, text_id in rows)
    assert _export(old, run_id, tmp_path / "old.csv") == _export(db, run_id, tmp_path / "new.csv")
