"""Hardening round 4, part 7: a batch base URL with a query string, a base URL with userinfo
beside a key in the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli._helpers import batch_run, invoke, scalar
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer


def test_a_batch_base_url_keeps_its_query_string_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer() as server:
        url = f"{server.base_url}?api-key=query-secret-0123456789&tenant=a"
        result = batch_run(data, db, url)
        assert result.exit_code == 0, result.stderr
        paths = server.batch_api.paths
    # Every Files and Batches request went to its own path, the query at the end.
    assert paths and all(p.split("?")[0].startswith(("/v1/files", "/v1/batches")) for p in paths), (
        paths
    )
    assert all("tenant=a" in p and "api-key=query-secret-0123456789" in p for p in paths)
    assert scalar(db, "SELECT count(*) FROM samples WHERE status = 'ok'") == 2
    assert "query-secret-0123456789" not in db.read_bytes().decode("latin-1")


def test_userinfo_and_a_key_in_the_environment_is_one_error_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key-0123456789abcdef")
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "none" / "runs.duckdb"
    with FakeOpenAIServer() as server:
        url = server.base_url.replace("http://", "http://judge:pw-0123456789abcdef@")
        result = invoke(
            "run", "--data", str(data), "--model", "openai/gpt-4o-mini", "--base-url", url,
            "--db", str(db),
        )  # fmt: skip
        assert server.request_count == 0
    assert result.exit_code == 2, result.stderr
    message = " ".join(result.stderr.split())
    assert "base_url carries credentials (user:password@) and OPENAI_API_KEY is set too" in message
    assert "pw-0123456789abcdef" not in result.stderr and "env-key" not in result.stderr
    assert not db.exists()


def test_items_named_dot_and_dot_dot_open_in_the_live_viewer(tmp_path: Path) -> None:
    import re
    import warnings

    from clinjudge.reports import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    items = make_items(3)
    items[0] = items[0].model_copy(update={"id": "."})
    items[1] = items[1].model_copy(update={"id": ".."})
    data = write_jsonl(tmp_path / "items.jsonl", items)
    db = tmp_path / "runs.duckdb"
    made = invoke("run", "--data", str(data), "--model", "mock/judge", "--db", str(db))
    assert made.exit_code == 0, made.stderr
    run_id = made.stdout.split()[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(create_app(db, n_boot=20))
    listing = client.get(f"/runs/{run_id}/")
    assert listing.status_code == 200
    hrefs = re.findall(r'href="([^"]*/item[^"]*)"', listing.text)
    opened = set()
    for href in {h.replace("&amp;", "&") for h in hrefs}:
        page = client.get(href)
        assert page.status_code == 200, (href, page.text[:300])
        opened.add(re.search(r"<h1[^>]*>(.*?)</h1>", page.text, re.DOTALL).group(1))  # type: ignore[union-attr]
    # Each of the three items opened on its own page (the dot ids not folded into the run's).
    assert opened == {"Item .", "Item ..", "Item item-0002"}
