"""Batch input files within the providers' limits (200 MB, 50,000 requests per file): a long
queue goes out in several batches, each file under both limits, every request exactly once; the
queue is written and read a part at a time, the system prompt stored once per run; ``max_cost``
holds back the requests it cannot pay for; a batch refused for the enqueued-token limit goes
again in smaller batches."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken

from clinjudge.judges import ModelSettings
from clinjudge.judges.clients import (
    BatchFileError,
    BatchLineTooLarge,
    _batch_api,
    batch_price_per_token,
    pack_batch_file,
    request_line,
)
from clinjudge.orchestration import RunConfig, _batch_run, create_run, prepare_run
from clinjudge.orchestration._batch_run import (
    BatchProviderError,
    estimate_batch_run,
    execute_batch_run,
)
from clinjudge.rubrics import render_messages
from clinjudge.runs import RunStore, StoreError, _provider_batches, ensure_batch_tables
from clinjudge.runs.orchestration_reads import iter_batch_requests
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

N_ITEMS = 5
SAMPLES = 2


def _start(tmp_path: Path, server: FakeOpenAIServer) -> tuple[RunStore, str, Any]:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(N_ITEMS))
    settings = ModelSettings(model="openai/gpt-4o-mini", base_url=server.base_url)
    config = RunConfig(
        data=str(data), judge=settings, db=str(tmp_path / "runs.duckdb"), samples=SAMPLES
    )
    prepared = prepare_run(config)
    store = RunStore(config.db)
    return store, create_run(store, prepared), prepared


def _execute(store: RunStore, run_id: str, prepared: Any) -> Any:
    return execute_batch_run(store, run_id, prepared, show_progress=False, poll_interval=0)


def _line_bytes(line: dict[str, Any]) -> int:
    """Bytes of one JSONL line as a provider counts them (UTF-8, newline included)."""
    return len(json.dumps(line, ensure_ascii=False).encode("utf-8")) + 1


def _largest_line(prepared: Any) -> int:
    settings = prepared.config.judge
    return max(
        _line_bytes(
            request_line(settings, "s1-c0-" + "0" * 16, render_messages(item, prepared.rubric))
        )
        for item in prepared.items
    )


def _uploaded_files(server: FakeOpenAIServer) -> list[bytes]:
    api = server.batch_api
    return [api.files[file_id]["data"] for file_id in api.uploads]


def _assert_each_request_once(store: RunStore, run_id: str, server: FakeOpenAIServer) -> None:
    ids = [
        json.loads(raw)["custom_id"]
        for data in _uploaded_files(server)
        for raw in data.splitlines()
    ]
    assert len(ids) == len(set(ids)) == N_ITEMS * SAMPLES
    samples = store.query(
        "SELECT count(*) AS n, count(DISTINCT (item_id, sample)) AS d FROM samples "
        "WHERE run_id = ? AND status = 'ok'",
        [run_id],
    )
    assert samples == [{"n": N_ITEMS * SAMPLES, "d": N_ITEMS * SAMPLES}]
    assert store.get_run(run_id)["status"] == "completed"


def test_a_queue_over_the_file_size_limit_goes_out_in_batches_within_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        # Room for two to three lines: the provider refuses a larger file.
        limit = int(_largest_line(prepared) * 2.5)
        server.batch_api.max_file_bytes = limit
        monkeypatch.setattr(_batch_api, "MAX_BATCH_FILE_BYTES", limit)
        with store:
            tally = _execute(store, run_id, prepared)
            files = _uploaded_files(server)
            assert len(files) >= 4  # 10 requests, at most 2 or 3 a file
            assert all(len(data) <= limit for data in files)
            assert (tally.ok, tally.failed) == (N_ITEMS * SAMPLES, 0)
            _assert_each_request_once(store, run_id, server)
            counts = store.query(
                "SELECT request_count FROM provider_batches WHERE run_id = ? ORDER BY attempt",
                [run_id],
            )
            lines = [len(data.splitlines()) for data in files]
            assert [c["request_count"] for c in counts] == lines


def test_a_queue_over_the_request_limit_goes_out_in_batches_within_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        server.batch_api.max_requests = 3
        monkeypatch.setattr(_batch_api, "MAX_BATCH_REQUESTS", 3)
        with store:
            _execute(store, run_id, prepared)
            assert [len(data.splitlines()) for data in _uploaded_files(server)] == [3, 3, 3, 1]
            _assert_each_request_once(store, run_id, server)


def test_a_request_larger_than_a_file_may_be_is_refused_before_any_upload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        monkeypatch.setattr(_batch_api, "MAX_BATCH_FILE_BYTES", 1000)
        with (
            store,
            pytest.raises(BatchLineTooLarge, match=r"request s1-c0-\S+ is [\d,]+ bytes.*1,000"),
        ):
            _execute(store, run_id, prepared)
        assert server.batch_api.uploads == [] and server.batch_api.batches == {}


def test_the_file_limit_counts_utf8_bytes_and_lines_that_fit_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = [{"custom_id": f"c{n}", "body": {"text": "é" * 40 + "x" * n}} for n in range(4)]
    sizes = [_line_bytes(line) for line in lines]
    assert sizes[0] == len(json.dumps(lines[0], ensure_ascii=False)) + 1 + 40  # é is 2 bytes

    monkeypatch.setattr(_batch_api, "MAX_BATCH_FILE_BYTES", sum(sizes[:3]))
    with pack_batch_file(iter(lines)) as packed:
        assert packed.custom_ids == ["c0", "c1", "c2"]
        expected = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines[:3]).encode()
        assert packed.read() == expected and packed.size == len(expected)

    monkeypatch.setattr(_batch_api, "MAX_BATCH_FILE_BYTES", sum(sizes[:3]) - 1)
    with pack_batch_file(iter(lines)) as packed:
        assert packed.custom_ids == ["c0", "c1"]


def test_lines_past_a_full_file_are_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[int] = []

    def lines() -> Iterator[dict[str, Any]]:
        for n in range(10):
            taken.append(n)
            yield {"custom_id": f"c{n}"}

    monkeypatch.setattr(_batch_api, "MAX_BATCH_REQUESTS", 4)
    with pack_batch_file(lines()) as packed:
        assert packed.custom_ids == ["c0", "c1", "c2", "c3"]
    assert taken == [0, 1, 2, 3]


def test_the_queue_is_written_a_chunk_at_a_time_and_a_kill_between_chunks_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[int] = []
    real_queue = _batch_run.queue_requests

    def queue_then_die(store: RunStore, rows: list[dict[str, Any]]) -> None:
        written.append(len(rows))
        real_queue(store, rows)
        if len(written) == 2:
            raise KeyboardInterrupt  # killed after the second chunk was committed

    monkeypatch.setattr(_batch_run, "QUEUE_CHUNK", 3)
    monkeypatch.setattr(_batch_run, "queue_requests", queue_then_die)
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        with store:
            with pytest.raises(KeyboardInterrupt):
                _execute(store, run_id, prepared)
            assert written == [3, 3] and server.batch_api.uploads == []
            monkeypatch.setattr(_batch_run, "queue_requests", real_queue)
            tally = _execute(store, run_id, prepared)
            assert (tally.ok, tally.failed) == (N_ITEMS * SAMPLES, 0)
            _assert_each_request_once(store, run_id, server)


def test_the_queue_stores_the_system_prompt_once_and_uploads_it_whole(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        with store:
            _execute(store, run_id, prepared)
            uploaded = server.batch_api.uploaded_lines()
            systems = {
                m["content"] for line in uploaded for m in line["body"]["messages"]
                if m["role"] == "system"
            }  # fmt: skip
            assert len(systems) == 1
            system = systems.pop()
            texts = store.query(
                "SELECT text_id, content FROM provider_batch_texts WHERE run_id = ?", [run_id]
            )
            key = hashlib.sha256(system.encode("utf-8")).hexdigest()
            assert texts == [{"text_id": key, "content": system}]
            rows = store.query(
                "SELECT messages::VARCHAR AS m FROM provider_batch_requests WHERE run_id = ?",
                [run_id],
            )
            assert len(rows) == N_ITEMS * SAMPLES
            assert all(system not in row["m"] and key in row["m"] for row in rows)


def test_request_rows_stored_with_inline_texts_still_read(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        with store:
            ensure_batch_tables(store)
            turns = render_messages(prepared.items[0], prepared.rubric)
            inline = [{"role": t.role, "content": t.content} for t in turns]
            # A row as a store written before texts were kept once holds: every text inline.
            store.con.execute(
                "INSERT INTO provider_batch_requests VALUES "
                "(?, 'old-1', ?, 1, 0, 1, 0, ?, NULL, 'queued')",
                [run_id, prepared.items[0].id, json.dumps(inline)],
            )
            pages = list(iter_batch_requests(store, run_id, "queued"))
            assert [[r["messages"] for r in page] for page in pages] == [[inline]]
            _execute(store, run_id, prepared)
            sent = [
                line for line in server.batch_api.uploaded_lines() if line["custom_id"] == "old-1"
            ]
            assert [line["body"]["messages"] for line in sent] == [inline]


def test_results_settled_a_page_at_a_time_go_in_together_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_provider_batches, "REQUEST_PAGE", 3)
    pages: list[int] = []
    real_settle = _batch_run.BatchRun._settle_all

    def settle_then_die(self: Any, requests: list[Any], *args: Any) -> Any:
        pages.append(len(requests))
        if len(pages) == 3:
            raise KeyboardInterrupt  # killed while the third page is settled
        return real_settle(self, requests, *args)

    monkeypatch.setattr(_batch_run.BatchRun, "_settle_all", settle_then_die)
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        with store:
            with pytest.raises(KeyboardInterrupt):
                _execute(store, run_id, prepared)
            assert pages == [3, 3, 3]
            for table in ("samples", "calls", "judgments"):
                count = store.query(f"SELECT count(*) AS n FROM {table} WHERE run_id = ?", [run_id])
                assert count == [{"n": 0}], table
            assert store.query("SELECT ingested FROM provider_batches") == [{"ingested": False}]

            monkeypatch.setattr(_batch_run.BatchRun, "_settle_all", real_settle)
            tally = _execute(store, run_id, prepared)
            assert (tally.ok, tally.failed) == (N_ITEMS * SAMPLES, 0)
            assert len(server.batch_api.uploads) == 1  # the batch was read again, not resent
            assert server.request_count == N_ITEMS * SAMPLES
            _assert_each_request_once(store, run_id, server)


def test_max_cost_holds_back_requests_it_cannot_pay_for_and_resume_sends_the_rest(
    tmp_path: Path,
) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        settings = prepared.config.judge
        price = batch_price_per_token(settings)
        assert price is not None
        # The most a request can cost: its prompt and 400 reply tokens (no max_tokens set).
        encoding = tiktoken.get_encoding("o200k_base")
        turns = render_messages(prepared.items[0], prepared.rubric)
        prompt = sum(len(encoding.encode(t.content)) for t in turns)
        bound = prompt * price[0] + 400 * price[1]
        budget = 3.5 * bound  # room for three requests at most, then what they left
        prepared.config = prepared.config.model_copy(update={"max_cost": budget})
        with store:
            tally = _execute(store, run_id, prepared)
            assert tally.budget_exhausted
            assert store.get_run(run_id)["status"] == "budget_exhausted"
            files = _uploaded_files(server)
            assert len(files[0].splitlines()) == 3
            sent = sum(len(data.splitlines()) for data in files)
            assert 3 <= sent < N_ITEMS * SAMPLES
            assert tally.not_started == N_ITEMS * SAMPLES - sent
            spent = store.query("SELECT sum(cost_usd) AS c FROM calls WHERE run_id = ?", [run_id])
            assert 0 < spent[0]["c"] <= budget

            prepared.config = prepared.config.model_copy(update={"max_cost": None})
            again = _execute(store, run_id, prepared)
            assert again.ok == N_ITEMS * SAMPLES - sent
            _assert_each_request_once(store, run_id, server)


@pytest.mark.parametrize("limit", ["bytes", "requests"])
def test_the_dry_run_counts_the_files_the_run_then_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str
) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        if limit == "bytes":
            cap = int(_largest_line(prepared) * 2.5)
            server.batch_api.max_file_bytes = cap
            monkeypatch.setattr(_batch_api, "MAX_BATCH_FILE_BYTES", cap)
        else:
            server.batch_api.max_requests = 4
            monkeypatch.setattr(_batch_api, "MAX_BATCH_REQUESTS", 4)
        note = estimate_batch_run(prepared).note
        predicted = int(re.search(r"fill (\d+) batch input file", note).group(1))  # type: ignore[union-attr]
        with store:
            _execute(store, run_id, prepared)
        assert predicted == len(server.batch_api.uploads) >= 3


def test_a_request_naming_a_missing_text_is_a_clear_store_error(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        with store:
            ensure_batch_tables(store)
            _batch_run.BatchRun(store, run_id, prepared, show_progress=False).seed_queue()
            store.con.execute("DELETE FROM provider_batch_texts")
            with pytest.raises(StoreError, match="names stored text .* which the database lacks"):
                next(iter_batch_requests(store, run_id, "queued"))


def _words(prepared: Any) -> int:
    """The most prompt tokens one request has as the fake server counts them (words)."""
    return max(
        sum(len(t.content.split()) for t in render_messages(item, prepared.rubric))
        for item in prepared.items
    )


def _batch_words(data: bytes) -> int:
    return sum(
        len(m["content"].split())
        for raw in data.splitlines()
        for m in json.loads(raw)["body"]["messages"]
    )


def _start_under_token_limit(
    tmp_path: Path, server: FakeOpenAIServer
) -> tuple[RunStore, str, Any, int]:
    """A run whose ten requests pass an enqueued-token limit of three and a half requests."""
    store, run_id, prepared = _start(tmp_path, server)
    limit = int(_words(prepared) * 3.5)
    server.batch_api.enqueued_token_limit = limit
    return store, run_id, prepared, limit


def test_a_batch_over_the_enqueued_token_limit_goes_again_in_smaller_batches(
    tmp_path: Path,
) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared, limit = _start_under_token_limit(tmp_path, server)
        with store:
            tally = _execute(store, run_id, prepared)
            batches = store.query(
                "SELECT status, ingested, errors::VARCHAR AS errors FROM provider_batches "
                "WHERE run_id = ? ORDER BY attempt",
                [run_id],
            )
            # The whole queue was refused once; then every batch stayed under the limit.
            assert (
                batches[0]["status"] == "failed" and "token_limit_exceeded" in batches[0]["errors"]
            )
            assert {b["status"] for b in batches[1:]} == {"completed"}
            files = _uploaded_files(server)
            assert len(files[0].splitlines()) == N_ITEMS * SAMPLES
            assert all(_batch_words(data) <= limit for data in files[1:])
            sent = [json.loads(raw)["custom_id"] for data in files[1:] for raw in data.splitlines()]
            assert len(sent) == len(set(sent)) == N_ITEMS * SAMPLES
            # The refused requests never ran: no call of theirs, no attempt spent.
            assert (tally.ok, tally.failed) == (N_ITEMS * SAMPLES, 0)
            calls = store.query("SELECT count(*) AS n FROM calls WHERE run_id = ?", [run_id])
            assert calls == [{"n": N_ITEMS * SAMPLES}]
            assert server.request_count == N_ITEMS * SAMPLES
            assert store.get_run(run_id)["status"] == "completed"


def test_a_limit_held_by_other_batches_stops_the_run_for_a_later_resume(
    tmp_path: Path,
) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared, limit = _start_under_token_limit(tmp_path, server)
        server.batch_api.enqueued_by_others = limit  # nothing of ours fits meanwhile
        with store:
            with pytest.raises(BatchProviderError, match="Other batches of the organization"):
                _execute(store, run_id, prepared)
            assert len(server.batch_api.uploads) == 2 and server.request_count == 0
            assert store.get_run(run_id)["status"] == "failed"

            server.batch_api.enqueued_by_others = 0  # their batches finished
            tally = _execute(store, run_id, prepared)
            assert (tally.ok, tally.failed) == (N_ITEMS * SAMPLES, 0)
            assert server.request_count == N_ITEMS * SAMPLES
            # The resumed run kept to the size the refusals taught: none of its batches was
            # refused or went over the limit.
            resumed = _uploaded_files(server)[2:]
            assert resumed and all(_batch_words(data) <= limit for data in resumed)
            statuses = store.query(
                "SELECT status FROM provider_batches WHERE run_id = ? ORDER BY attempt", [run_id]
            )
            assert [r["status"] for r in statuses[2:]] == ["completed"] * len(resumed)


def test_a_request_alone_over_the_enqueued_token_limit_stops_the_run(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        server.batch_api.enqueued_token_limit = _words(prepared) // 2
        with store, pytest.raises(BatchProviderError, match=r"request \S+ alone has [\d,]+ prompt"):
            _execute(store, run_id, prepared)
        assert len(server.batch_api.uploads) == 1 and server.request_count == 0


class _FullDisk(io.BytesIO):
    """A temporary file on a full disk: every write fails as the kernel's would."""

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_writing_the_batch_file_stops_the_run_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAIServer() as server:
        store, run_id, prepared = _start(tmp_path, server)
        with store:
            monkeypatch.setattr(_batch_api.tempfile, "TemporaryFile", lambda **_: _FullDisk())
            with pytest.raises(BatchFileError, match="No space left on device; free space"):
                _execute(store, run_id, prepared)
            assert server.batch_api.uploads == [] and store.get_run(run_id)["status"] == "failed"
            monkeypatch.undo()
            tally = _execute(store, run_id, prepared)  # the queue is intact: a resume finishes
            assert (tally.ok, tally.failed) == (N_ITEMS * SAMPLES, 0)
            _assert_each_request_once(store, run_id, server)


def test_the_batch_file_has_no_name_on_disk() -> None:
    with pack_batch_file(iter([{"custom_id": "c0", "body": {}}])) as packed:
        name = packed.file.name
        # An unnamed file (O_TMPFILE: its name is the descriptor), or one already unlinked.
        assert isinstance(name, int) or not Path(name).exists()
        assert packed.read() == b'{"custom_id": "c0", "body": {}}\n'
