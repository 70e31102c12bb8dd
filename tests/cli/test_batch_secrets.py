"""A provider whose batch errors quote the request's key: the key reaches no table, no file
and no output of any command (issue: hardening round 4, part 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.cli._helpers import batch_run, invoke
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

# Not shaped like an sk- key: only knowing the key in use can catch it.
CANARY = "canary-7f3a9c21e5b04d68aa01"


def _batch_run(data: Path, db: Path, server: FakeOpenAIServer, *extra: str) -> Any:
    return batch_run(data, db, server.base_url, *extra)


def _quoting_the_key(number: int, record: dict[str, Any]) -> str | None:
    """Output lines that answer 401 quoting the key, or fail with it in the error object."""
    if number == 0:
        message = f"Incorrect API key provided: {CANARY}"
        record["response"] = {"status_code": 401, "body": {"error": {"message": message}}}
    elif number == 1:
        record["response"] = None
        record["error"] = {"code": "invalid_api_key", "message": f"Bearer {CANARY} refused"}
    else:
        return None
    return json.dumps(record)


def _text_columns_holding(db: Path, needle: str) -> list[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        columns = con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE data_type IN ('VARCHAR', 'JSON') OR data_type LIKE '%[]' "
            "OR data_type LIKE 'STRUCT%' OR data_type LIKE 'MAP%'"
        ).fetchall()
        assert len(columns) > 20  # every table of a run, not a few
        return [
            f"{table}.{column}"
            for table, column in columns
            if con.execute(
                f'SELECT count(*) FROM "{table}" WHERE CAST("{column}" AS VARCHAR) LIKE ?',
                [f"%{needle}%"],
            ).fetchone()[0]  # type: ignore[index]
        ]
    finally:
        con.close()


def test_a_key_quoted_by_the_provider_is_never_stored_or_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(3))
    db = tmp_path / "runs.duckdb"
    outputs: list[str] = []
    with FakeOpenAIServer() as server:
        # Every batch fails whole, the provider quoting the Authorization header it got.
        server.batch_api.fail_batches_with = (
            "Incorrect API key provided: {key}. You sent: Authorization: {authorization}"
        )
        failed = _batch_run(data, db, server)
        outputs += [failed.stdout, failed.stderr]
        assert failed.exit_code == 1 and "0 samples ok, 3 failed" in failed.stderr, failed.stderr
        # Then result lines that quote it, in a second run.
        server.batch_api.fail_batches_with = None
        server.batch_api.result_hook = _quoting_the_key
        lines = _batch_run(data, db, server)
        outputs += [lines.stdout, lines.stderr]
        assert lines.exit_code == 1, lines.stderr  # samples failed for the 401s
        assert "HTTP 401: Incorrect API key provided: [redacted]" in lines.stderr

    run_ids = [r.split()[0] for r in (failed.stdout.strip(), lines.stdout.strip())]
    for run_id in run_ids:
        for args in (["runs", "show", run_id], ["runs", "show", run_id, "--json"]):
            shown = invoke(*args, "--db", str(db))
            assert shown.exit_code == 0, shown.stderr
            outputs += [shown.stdout, shown.stderr]
        for table in ("judgments", "transcripts"):
            out = tmp_path / f"{run_id}-{table}.jsonl"
            exported = invoke(
                "export", run_id, "--db", str(db), "--table", table, "--out", str(out)
            )
            assert exported.exit_code == 0, exported.stderr
            outputs.append(out.read_text())
    listed = invoke("runs", "list", "--db", str(db))
    outputs += [listed.stdout, listed.stderr]
    pages = tmp_path / "pages"
    viewed = invoke("view", "--db", str(db), "--export", str(pages))
    assert viewed.exit_code == 0, viewed.stderr
    outputs += [p.read_text(errors="replace") for p in pages.rglob("*") if p.is_file()]

    # The provider's words are kept, the key in them is not.
    shown = json.loads(invoke("runs", "show", run_ids[0], "--db", str(db), "--json").stdout)
    errors = [e for b in shown["provider_batches"] for e in b["errors"]]
    assert errors and all("Incorrect API key provided: [redacted]" in e for e in errors)
    assert not [o for o in outputs if CANARY in o]
    assert _text_columns_holding(db, CANARY) == []
    assert _text_columns_holding(db, "[redacted]")  # the reasons are there, redacted
    for path in tmp_path.glob("runs.duckdb*"):
        assert CANARY.encode() not in path.read_bytes(), path
