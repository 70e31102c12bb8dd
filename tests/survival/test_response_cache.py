"""The response cache (`judge run --cache`) answers only for the same endpoint and settings,
survives corrupted rows, is written with the samples, and goes with its run when deleted.

Providers are fake OpenAI servers on 127.0.0.1; runs go through the CLI (in process, or as a
`judge` process killed by the server at a chosen request).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pydantic import BaseModel

from clinjudge.judges import ModelSettings, ResponseCache
from clinjudge.judges.clients import ChatMessage
from clinjudge.judges.clients._cache import (
    KEY_VERSION,
    NOT_IN_KEY,
    CacheEntry,
    cache_key,
    cache_payload,
)
from clinjudge.orchestration import _execute as execute
from clinjudge.runs import RunStore
from clinjudge.runs._store import SCHEMA_VERSION
from tests.cli._helpers import JUDGE, invoke, query, scalar
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer, Fault, _last_user_text, pdsqi9_scores
from tests.magentic_fake import PanelFake
from tests.survival.factories import make_config, run_in_process

REPO = Path(__file__).resolve().parents[2]
MESSAGES = [ChatMessage("system", "grade"), ChatMessage("user", "note", "user")]


def _cached_run(data: Path, db: Path, server: FakeOpenAIServer, *extra: str) -> str:
    result = invoke(
        "run", "--data", str(data), "--model", "openai/judge", "--base-url", server.base_url,
        "--db", str(db), "--no-progress", "--cache", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return str(result.stdout.strip())


def _key(settings: ModelSettings, json_output: Any = None) -> str:
    return cache_key(settings, MESSAGES, [], json_output, "0|1")


# -- 1. the key holds the endpoint and every setting that can change a reply ----------------------


def _server_b(body: dict[str, Any]) -> dict[str, Any]:
    return {**pdsqi9_scores(_last_user_text(body)), "rationale": "Rated by server B."}


def test_cache_never_answers_for_another_server(items_file: Path, db_path: Path) -> None:
    with FakeOpenAIServer() as server_a, FakeOpenAIServer(responder=_server_b) as server_b:
        run_a = _cached_run(items_file, db_path, server_a)
        assert server_a.request_count == 6
        run_b = _cached_run(items_file, db_path, server_b)
        # Same model name, same prompts, another endpoint: every request goes to server B.
        assert server_b.request_count == 6
        assert server_a.request_count == 6
        again = _cached_run(items_file, db_path, server_a)
        assert server_a.request_count == 6  # the cache still answers for server A
    rationales = "SELECT DISTINCT rationale FROM samples WHERE run_id = ?"
    assert query(db_path, rationales, [run_b]) == [("Rated by server B.",)]
    assert "server B" not in str(query(db_path, rationales, [run_a]))
    assert "server B" not in str(query(db_path, rationales, [again]))
    # Run B stored B's replies, under its own keys, next to A's.
    stored = query(db_path, "SELECT run_id, response FROM response_cache")
    assert len(stored) == 12
    for run_id, response in stored:
        from_b = "server B" in json.loads(response)["text"]
        assert from_b == (run_id == run_b)


# A value differing from the default for every field of ModelSettings that can change a reply.
_OTHER_VALUES: dict[str, Any] = {
    "model": "openai/other-judge",
    "base_url": "http://127.0.0.1:9/v1",
    "api_version": "2025-01-01",
    "temperature": 0.7,
    "top_p": 0.5,
    "max_tokens": 64,
    "seed": 3,
    "reasoning_effort": "high",
    "json_mode": True,
    "structured_output": "off",
    "client": "direct",
    "price_as": "gpt-4o",
}
_IGNORED_VALUES: dict[str, Any] = {
    "api_key_env": "OTHER_KEY",
    "timeout": 5.0,
    "max_reply_bytes": 1024,
    "rpm": 10,
    "tpm": 1000,
    "max_connections": 2,
    "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
    "ray": "local",
    "ray_replicas": 2,
    "engine": "paged",
}


def test_key_holds_every_setting_but_the_listed_few() -> None:
    # A field added to ModelSettings joins the key unless listed in NOT_IN_KEY: this test then
    # asks for a value of it (a field no table names fails here).
    fields = set(ModelSettings.model_fields)
    assert set(_OTHER_VALUES) == fields - NOT_IN_KEY
    assert set(_IGNORED_VALUES) == set(NOT_IN_KEY)
    base = ModelSettings(model="openai/judge", base_url="http://127.0.0.1:8/v1")
    keys = {_key(base)}
    for name, value in _OTHER_VALUES.items():
        key = _key(ModelSettings(**{**base.model_dump(), name: value}))
        assert key not in keys, f"{name} does not change the key"
        keys.add(key)
    for name, value in _IGNORED_VALUES.items():
        changed = ModelSettings(**{**base.model_dump(), name: value})
        assert _key(changed) == _key(base), f"{name} changes the key"


def test_key_holds_the_provider_the_output_mode_and_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Verdict(BaseModel):
        score: int

    class Other(BaseModel):
        score: str

    openai = ModelSettings(model="openai/judge")
    assert _key(openai) != _key(ModelSettings(model="azure/judge"))
    assert len({_key(openai), _key(openai, True), _key(openai, Verdict), _key(openai, Other)}) == 4
    # Endpoint and API version the clients read from the environment when the settings give
    # none (an Azure deployment's endpoint usually comes from AZURE_OPENAI_ENDPOINT).
    unset = _key(openai)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:7/v1")
    assert _key(openai) != unset
    azure = ModelSettings(model="azure/my-deployment")
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://one.openai.azure.com")
    first = _key(azure)
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://two.openai.azure.com")
    assert _key(azure) != first
    with_version = _key(azure)
    monkeypatch.setenv("OPENAI_API_VERSION", "2024-06-01")
    assert _key(azure) != with_version
    # Whatever else a request carries (extra body fields or headers) is part of it.
    assert _key(openai) != cache_key(openai, MESSAGES, [], None, "0|1", {"max_tokens": 9})
    assert _key(openai) == cache_key(openai, MESSAGES, [], None, "0|1", {})
    # Given in the settings, they win: the environment no longer matters.
    pinned = ModelSettings(model="azure/d", base_url="https://x.azure.com", api_version="v1")
    before = _key(pinned)
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://three.openai.azure.com")
    assert _key(pinned) == before


def test_key_payload_is_versioned_and_holds_no_credentials() -> None:
    secret = "sk-verysecret-0123456789"
    plain = ModelSettings(model="openai/judge", base_url="http://127.0.0.1:8/v1?tenant=a")
    with_secrets = ModelSettings(
        model="openai/judge",
        base_url=f"http://user:{secret}@127.0.0.1:8/v1/?tenant=a&api-key={secret}",
    )
    payload = cache_payload(with_secrets, MESSAGES, [], None, "0|1")
    assert payload["v"] == KEY_VERSION == 2
    text = json.dumps(payload)
    assert secret not in text and "user" not in payload["settings"]["base_url"]
    assert "127.0.0.1:8/v1" in payload["settings"]["base_url"]
    # Credentials do not change what the server answers; the rest of the query may.
    other_query = plain.model_copy(update={"base_url": "http://127.0.0.1:8/v1?tenant=b"})
    assert _key(plain) != _key(other_query)
    assert _key(with_secrets) != _key(plain)  # the api-key parameter's presence is kept
    rotated = with_secrets.model_copy(
        update={"base_url": with_secrets.base_url.replace(secret, "sk-another-secret-99999")}  # type: ignore[union-attr]
    )
    assert _key(rotated) == _key(with_secrets)


# -- 7. a corrupted row is a miss, replaced by the provider's reply --------------------------------

_CORRUPTIONS: list[Any] = [
    {"text": 5},
    "a bare string",
    {"completion_tokens": "x"},
    {"prompt_tokens": -30_000},
    {"completion_tokens": 60_000_000},
    {"finish_reason": "exploded"},
    None,  # a key missing
]


def _corrupt(entry: dict[str, Any], how: Any) -> Any:
    if isinstance(how, str):
        return how
    if how is None:
        return {k: v for k, v in entry.items() if k != "tokens_estimated"}
    return {**entry, **how}


def test_corrupted_cache_rows_are_misses_replaced_by_fresh_replies(
    tmp_path: Path, db_path: Path
) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(len(_CORRUPTIONS)))
    with FakeOpenAIServer() as server:
        first = _cached_run(data, db_path, server)
        rows = query(db_path, "SELECT key, response FROM response_cache ORDER BY key")
        assert len(rows) == len(_CORRUPTIONS)
        con = duckdb.connect(str(db_path))
        for (key, response), how in zip(rows, _CORRUPTIONS, strict=True):
            bad = json.dumps(_corrupt(json.loads(response), how))
            con.execute("UPDATE response_cache SET response = ? WHERE key = ?", [bad, key])
        con.close()
        result = invoke(
            "run", "--data", str(data), "--model", "openai/judge", "--base-url",
            server.base_url, "--db", str(db_path), "--no-progress", "--cache",
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        second = result.stdout.strip()
        # Every bad entry was a miss: the requests went to the server.
        assert server.request_count == 2 * len(_CORRUPTIONS)
    assert result.stderr.count("response cache") == 1, result.stderr  # one warning per run
    assert f"{len(_CORRUPTIONS)} unreadable entries" in result.stderr
    calls = query(
        db_path,
        "SELECT cached, status, prompt_tokens, completion_tokens FROM calls WHERE run_id = ?",
        [second],
    )
    assert len(calls) == len(_CORRUPTIONS)
    for cached, status, prompt_tokens, completion_tokens in calls:
        assert (cached, status) == (False, "ok")
        assert 0 < prompt_tokens < 50_000_000 and 0 < completion_tokens < 50_000_000
    scores = "SELECT item_id, attribute, value FROM judgments WHERE run_id = ? ORDER BY ALL"
    assert query(db_path, scores, [first]) == query(db_path, scores, [second])
    # The fresh replies took the bad entries' keys.
    fresh = query(db_path, "SELECT key, response, run_id FROM response_cache ORDER BY key")
    assert [k for k, _, _ in fresh] == [k for k, _ in rows]
    for _, response, run_id in fresh:
        CacheEntry.model_validate_json(response)
        assert run_id == second


def test_bad_entries_are_refused_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    good = {
        "text": "{}", "finish_reason": "stop", "prompt_tokens": 10, "completion_tokens": 2,
        "tokens_estimated": False,
    }  # fmt: skip
    entries: dict[str, Any] = {f"k{i}": _corrupt(good, how) for i, how in enumerate(_CORRUPTIONS)}
    entries.update({"json-null": None, "list": [good], "ok": good})
    with caplog.at_level(logging.WARNING, logger="clinjudge"):
        cache = ResponseCache(entries)
    assert len(caplog.records) == 1
    assert "sk-" not in caplog.text and "a bare string" not in caplog.text  # no content shown
    assert sorted(cache.rejected) == sorted(set(entries) - {"ok"})
    assert all(cache.get(key) is None for key in cache.rejected)
    assert cache.get("ok") == good
    # A reply that would be refused on read is not cached either.
    cache.put("new", "openai/judge", {**good, "completion_tokens": -1})
    assert cache.get("new") is None and cache.take_new() == []


# -- 8. cache rows are written with the samples that received them --------------------------------


class _Killer:
    """Fault plan that SIGKILLs the judge process when request number ``after`` arrives."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.countdown = 0

    def arm(self, pid: int, after: int) -> None:
        with self.lock:
            self.pid, self.countdown = pid, after

    def __call__(self, index: int, body: dict[str, Any]) -> Fault | None:
        with self.lock:
            if self.pid is not None:
                self.countdown -= 1
                if self.countdown <= 0:
                    os.kill(self.pid, signal.SIGKILL)
                    self.pid = None
        return None


def _judge(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"CLINJUDGE_MODEL", "COLUMNS"}}
    env.update(NO_COLOR="1", PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [JUDGE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        cwd=REPO,
    )  # fmt: skip


def _cache_matches_stored_samples(db: Path, run_id: str) -> int:
    """The run's cache rows hold exactly the replies of its stored samples; returns how many."""
    # Messages rows exist for stored samples only; each reply is an assistant turn.
    replies = sorted(
        r[0]
        for r in query(
            db, "SELECT content FROM messages WHERE run_id = ? AND role = 'assistant'", [run_id]
        )
    )
    answered = "SELECT count(*) FROM calls WHERE run_id = ? AND status = 'ok' AND NOT cached"
    assert scalar(db, answered, [run_id]) == len(replies)
    cached = sorted(
        json.loads(r[0])["text"]
        for r in query(db, "SELECT response FROM response_cache WHERE run_id = ?", [run_id])
    )
    assert cached == replies
    return len(cached)


@pytest.mark.needs_judge_script
def test_killed_run_keeps_the_cache_entries_of_its_stored_samples(tmp_path: Path) -> None:
    n_items, n_samples = 40, 2
    total = n_items * n_samples
    data = write_jsonl(tmp_path / "items.jsonl", make_items(n_items))
    db = tmp_path / "killed.duckdb"
    killer = _Killer()
    # 0.08 s per reply at concurrency 2: the runner's 1 s timed flush commits batches mid-run.
    with FakeOpenAIServer(latency=0.08, faults=killer) as server:
        proc = _judge(
            "run", "--data", str(data), "--model", "openai/judge", "--base-url",
            server.base_url, "--samples", str(n_samples), "--concurrency", "2", "--cache",
            "--db", str(db), "--no-progress",
        )  # fmt: skip
        killer.arm(proc.pid, 60)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, err[-2000:]
        run_id = out.strip()
        stored = scalar(db, "SELECT count(*) FROM samples WHERE run_id = ?", [run_id])
        assert 0 < stored < total
        assert _cache_matches_stored_samples(db, run_id) == stored
        resumed = _judge("run", "--resume", run_id, "--db", str(db), "--no-progress")
        out, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0, err[-2000:]
    assert scalar(db, "SELECT count(*) FROM samples WHERE run_id = ?", [run_id]) == total
    assert _cache_matches_stored_samples(db, run_id) == total


# -- 10a. runs delete removes the run's cache rows ------------------------------------------------


def test_runs_delete_removes_the_runs_cache_rows(items_file: Path, db_path: Path) -> None:
    with FakeOpenAIServer() as server:
        first = _cached_run(items_file, db_path, server)
        # Sample 1 comes from the cache; sample 2 is new and cached by the second run.
        second = _cached_run(items_file, db_path, server, "--samples", "2")
        assert server.request_count == 12
    con = duckdb.connect(str(db_path))
    con.execute(
        "INSERT INTO response_cache (key, model, created_at, response) "
        "VALUES ('old', 'openai/judge', now(), '{}')"
    )
    con.close()
    owners = "SELECT run_id, count(*) FROM response_cache GROUP BY ALL ORDER BY ALL"
    assert query(db_path, owners) == sorted([(first, 6), (second, 6), (None, 1)], key=str)
    result = invoke("runs", "delete", first, "--db", str(db_path), "--yes")
    assert result.exit_code == 0, result.stderr
    # The other run's rows and the row no run owns (cached before run_id existed) stay.
    assert sorted(query(db_path, owners), key=str) == sorted([(second, 6), (None, 1)], key=str)


def test_store_without_cache_owner_is_migrated(db_path: Path) -> None:
    RunStore(db_path).close()
    con = duckdb.connect(str(db_path))
    con.execute("ALTER TABLE response_cache DROP COLUMN run_id")
    con.execute("INSERT INTO response_cache VALUES ('old', 'openai/judge', now(), '{}')")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    with RunStore(db_path) as store:
        assert store.has_column("response_cache", "run_id")
        assert store.query("SELECT key, run_id FROM response_cache") == [
            {"key": "old", "run_id": None}
        ]
    assert scalar(db_path, "SELECT value FROM meta WHERE key = 'schema_version'") == str(
        SCHEMA_VERSION
    )


def test_panel_replies_are_written_with_their_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A MagenticOne discussion calls models from AutoGen's own tasks: its replies still reach
    # the sample's batch, leaving nothing for the end of the run.
    left: list[int] = []
    real_save = execute.save_response_cache

    def save(store: RunStore, cache: ResponseCache | None) -> int:
        written = real_save(store, cache)
        left.append(written)
        return written

    monkeypatch.setattr(execute, "save_response_cache", save)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    fake = PanelFake(personas="high_scorer,low_scorer")
    with FakeOpenAIServer(responder=fake) as server:
        config = make_config(
            data, server, tmp_path / "panel.duckdb", mode="magentic", personas=fake.personas,
            concurrency=3, cache=True,
        )  # fmt: skip
        store, run_id, tally = run_in_process(config)
        store.close()
    assert tally.ok == 3
    assert left == [0]
    db = tmp_path / "panel.duckdb"
    answered = "SELECT count(*) FROM calls WHERE run_id = ? AND status = 'ok' AND NOT cached"
    owned = "SELECT count(*) FROM response_cache WHERE run_id = ?"
    assert scalar(db, owned, [run_id]) == scalar(db, answered, [run_id]) > 3
