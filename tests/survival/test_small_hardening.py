"""The smaller findings of the adversarial probe (issue 16, part 9), one test each.

* an unparseable ``Retry-After`` means "no advice": the runner backs off and retries instead of
  ending the sample;
* a key in URL userinfo (``http://u:sk-...@host``) or a secret-named query value never reaches
  the stored run config, and a resume of such a run says what to do instead of calling with
  the redacted URL;
* ``--timeout inf``, ``nan``, ``0`` and negative values are refused with the field named;
* ``--resume %`` or ``_`` does not match a run the way SQL LIKE would;
* ``--out`` writes regular files only (no FIFO, symlink, folder, or path under a file), and
  exports get the store's owner-only mode; so do the files of ``judge report``;
* ``judge run`` keeps the store open (and DuckDB's lock held) from creating the run to
  judging it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clinjudge.cli import app
from clinjudge.judges import ModelSettings
from clinjudge.judges.clients._faults import classify_fault
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer, Fault
from tests.survival.factories import make_config, run_in_process

CANARY = "sk-userinfo-" + "Zq9" * 8


def _mock_run(tmp_path: Path, *extra: str) -> tuple[str, str]:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = str(tmp_path / "runs.duckdb")
    result = CliRunner().invoke(
        app, ["run", "--data", str(data), "--model", "mock/judge", "--db", db, *extra]
    )
    assert result.exit_code == 0, result.output
    return db, result.stdout.strip().splitlines()[0]


@pytest.mark.parametrize("value", ["soon", "Mon, 99 Foo 2020 99:99:99 GMT", "inf", "nan", "1e999"])
def test_unparseable_retry_after_is_ignored(value: str) -> None:
    import openai

    class Error(openai.APIStatusError):
        def __init__(self) -> None:
            import httpx

            request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
            response = httpx.Response(429, headers={"retry-after": value}, request=request)
            super().__init__("rate limited", response=response, body=None)

    fault = classify_fault(Error())
    assert fault.retryable and fault.retry_after is None


def test_sample_with_unparseable_retry_after_is_retried(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    with FakeOpenAIServer() as srv:
        srv.script([Fault("rate_limit", retry_after="whenever")])  # type: ignore[arg-type]
        store, run_id, tally = run_in_process(make_config(data, srv, tmp_path / "r.duckdb"))
        store.close()
        assert srv.request_count == 2
    assert (tally.ok, tally.failed) == (1, 0)


def test_key_in_url_userinfo_is_not_stored(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "runs.duckdb"
    with FakeOpenAIServer() as srv:
        url = srv.base_url.replace("http://", f"http://judge:{CANARY}@")
        config = make_config(data, srv, db, judge={"base_url": url})
        store, run_id, tally = run_in_process(config)
        stored = store.get_run(run_id)["config"]
        store.close()
    assert tally.ok == 2
    assert CANARY not in db.read_bytes().decode("latin-1")
    assert stored["judge"]["base_url"].startswith("http://[redacted]@127.0.0.1:")
    # A resume cannot call with the redacted URL: it stops with what to do instead.
    result = CliRunner().invoke(app, ["run", "--resume", run_id, "--db", str(db)])
    assert "already complete" in result.output or "never stored" in result.output


def test_resume_of_a_run_whose_url_held_a_key_says_what_to_do(tmp_path: Path) -> None:
    url = f"http://u:{CANARY}@127.0.0.1:9/v1?api-key={CANARY}&deployment=x"
    settings = ModelSettings(model="openai/x", base_url=url)
    dumped = settings.model_dump(mode="json")
    assert CANARY not in str(dumped) and "deployment=x" in dumped["base_url"]
    reloaded = ModelSettings.model_validate(dumped)
    from clinjudge.judges import ModelConfigError
    from clinjudge.judges.clients._model import build_client
    from clinjudge.rubrics import load_rubric

    with pytest.raises(ModelConfigError, match="never stored"):
        build_client(reloaded, load_rubric("pdsqi9"))


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "0", "-1"])
def test_timeout_must_be_finite_and_positive(tmp_path: Path, value: str) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(1))
    result = CliRunner().invoke(
        app,
        [
            "run", "--data", str(data), "--model", "mock/judge", "--db",
            str(tmp_path / "r.duckdb"), "--timeout", value,
        ],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "timeout" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "r.duckdb").exists()


@pytest.mark.parametrize("pattern", ["%", "_", "%%", "2%"])
def test_resume_pattern_is_not_like(tmp_path: Path, pattern: str) -> None:
    db, run_id = _mock_run(tmp_path)
    result = CliRunner().invoke(app, ["run", "--resume", pattern, "--db", db])
    assert result.exit_code != 0
    assert "no run" in result.output


@pytest.mark.parametrize("kind", ["fifo", "symlink", "dangling", "folder", "under_file"])
def test_out_must_be_a_regular_file(tmp_path: Path, kind: str) -> None:
    db, run_id = _mock_run(tmp_path)
    target = tmp_path / "elsewhere.jsonl"
    out = tmp_path / "out.jsonl"
    if kind == "fifo":
        os.mkfifo(out)
    elif kind == "symlink":
        target.write_text("keep\n")
        out.symlink_to(target)
    elif kind == "dangling":
        out.symlink_to(target)
    elif kind == "folder":
        out.mkdir()
    else:
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "out.jsonl"
    result = CliRunner().invoke(app, ["export", run_id, "--out", str(out), "--db", db, "--force"])
    assert result.exit_code != 0, result.output
    assert (
        "Traceback" not in result.output
        and result.exception is None
        or isinstance(result.exception, SystemExit)
    )
    assert str(out.name) in result.output
    if kind == "symlink":
        assert target.read_text() == "keep\n" and out.is_symlink()
    if kind == "dangling":
        assert not target.exists()
    if kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(out).st_mode)


def test_exports_are_owner_only(tmp_path: Path) -> None:
    db, run_id = _mock_run(tmp_path)
    old = os.umask(0o022)
    try:
        for name in ("out.jsonl", "out.csv", "out.parquet"):
            out = tmp_path / name
            result = CliRunner().invoke(app, ["export", run_id, "--out", str(out), "--db", db])
            assert result.exit_code == 0, result.output
            assert stat.S_IMODE(out.stat().st_mode) == 0o600, name
    finally:
        os.umask(old)


def _report(db: str, run_id: str, out: Path) -> object:
    return CliRunner().invoke(app, ["report", run_id, "--out", str(out), "--db", db])


def test_reports_are_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    db, run_id = _mock_run(tmp_path)
    old = os.umask(0o022)
    try:
        result = _report(db, run_id, tmp_path / "report")
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    for name in ("report.html", "report.md"):
        assert stat.S_IMODE((tmp_path / "report" / name).stat().st_mode) == 0o600, name
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["report.html", "report.md"]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "out_is_a_file"])
def test_report_files_are_never_written_through_a_link_or_into_a_fifo(
    tmp_path: Path, kind: str
) -> None:
    db, run_id = _mock_run(tmp_path)
    out = tmp_path / "report"
    target = tmp_path / "elsewhere.html"
    if kind == "out_is_a_file":
        out.write_text("keep\n")
    else:
        out.mkdir()
        if kind == "symlink":
            target.write_text("keep\n")
            (out / "report.html").symlink_to(target)
        else:
            os.mkfifo(out / "report.html")
    result = _report(db, run_id, out)
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert "Traceback" not in result.output  # type: ignore[attr-defined]
    if kind == "symlink":
        assert target.read_text() == "keep\n" and (out / "report.html").is_symlink()
    elif kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(out / "report.html").st_mode)
    else:
        assert out.read_text() == "keep\n"


def test_run_keeps_the_store_open_from_creation_to_judging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `judge run` calls the API (clinjudge.evaluate), which creates and judges the run.
    import clinjudge._api as api

    events: list[tuple[str, int]] = []
    real_create, real_execute, real_close = api.create_run, api.execute_run_async, RunStore.close

    def create(store: RunStore, prepared: object) -> str:
        events.append(("create", id(store)))
        return real_create(store, prepared)  # type: ignore[arg-type]

    async def execute(store: RunStore, *args: object, **kwargs: object) -> object:
        events.append(("execute", id(store)))
        return await real_execute(store, *args, **kwargs)  # type: ignore[arg-type]

    def close(store: RunStore) -> None:
        events.append(("close", id(store)))
        real_close(store)

    monkeypatch.setattr(api, "create_run", create)
    monkeypatch.setattr(api, "execute_run_async", execute)
    monkeypatch.setattr(RunStore, "close", close)
    _mock_run(tmp_path)
    start = next(i for i, e in enumerate(events) if e[0] == "create")
    judged = next(i for i, e in enumerate(events) if e[0] == "execute")
    assert events[start][1] == events[judged][1]  # the same open store
    assert not [e for e in events[start:judged] if e[0] == "close"]
