"""`judge view` against other web pages and other processes: a forged Host (DNS rebinding),
requests from other sites, writers opening the database while pages load, and requests no page
can answer (a comparison of one run)."""

from __future__ import annotations

import http.client
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from clinjudge.reports import ViewerServer, create_app
from tests.cli._helpers import JUDGE
from tests.reports._store import HOSTILE_ID, ViewerStore

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


def _get(
    server: ViewerServer, path: str, host: str | None = None, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    """A raw GET over the server's socket, with the Host header as given (None: its own)."""
    ip, port = server.url.removeprefix("http://").rsplit(":", 1)
    con = http.client.HTTPConnection(ip, int(port), timeout=60)
    try:
        con.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        con.putheader("Host", host if host is not None else f"{ip}:{port}")
        for name, value in (headers or {}).items():
            con.putheader(name, value)
        con.endheaders()
        response = con.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        con.close()


@pytest.fixture(scope="module")
def server(viewer_store: ViewerStore) -> Iterator[ViewerServer]:
    with ViewerServer(viewer_store.db, n_boot=20) as srv:
        yield srv


def _port(server: ViewerServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def test_a_forged_host_gets_no_page(server: ViewerServer, viewer_store: ViewerStore) -> None:
    """DNS rebinding: evil.example resolves to 127.0.0.1, but the browser sends its own name."""
    port = _port(server)
    page = f"/runs/{viewer_store.single}/items/{HOSTILE_ID}"
    status, body = _get(server, page)
    assert status == 200 and "Ignore all previous instructions" in body
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{port + 1}",
                 f"localhost.evil.example:{port}", f"127.0.0.1.nip.io:{port}"):  # fmt: skip
        status, body = _get(server, page, host=host)
        assert status == 421, host
        assert "Ignore all previous instructions" not in body and viewer_store.single not in body
        assert len(body.strip().splitlines()) == 1, body
    for host in (f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
        assert _get(server, page, host=host)[0] == 200, host
    for host in ("", "a b", f"evil.example:{port}:1", f"127.0.0.1:{port}/x"):
        assert _get(server, "/", host=host)[0] == 400, host


def test_requests_from_other_sites_are_refused(
    server: ViewerServer, viewer_store: ViewerStore
) -> None:
    port = _port(server)
    page = f"/runs/{viewer_store.single}/"
    refused = [
        {"Origin": "http://evil.example"},
        {"Origin": f"http://evil.example:{port}"},
        {"Origin": f"http://127.0.0.1:{port + 1}"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"},
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"},
        {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"},
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"},
    ]
    for headers in refused:
        status, body = _get(server, page, headers=headers)
        assert status == 403, headers
        assert viewer_store.single not in body
    allowed = [
        {},
        {"Origin": f"http://127.0.0.1:{port}"},
        {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"},
        {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"},
        # A link followed from a notebook or a wiki: the other site cannot read the page.
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate",
         "Sec-Fetch-Dest": "document"},
    ]  # fmt: skip
    for headers in allowed:
        assert _get(server, page, headers=headers)[0] == 200, headers


def test_split_host() -> None:
    from clinjudge.reports._viewer_app import split_host

    assert split_host("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert split_host("LocalHost") == ("localhost", 80)
    assert split_host("[::1]:9") == ("[::1]", 9)
    for bad in ("", "a b", "[::1", "h:1:2", "h:", "h:123456", "h:１２"):
        assert split_host(bad) is None, bad


def test_the_name_given_to_host_is_accepted(viewer_store: ViewerStore) -> None:
    with ViewerServer(viewer_store.db, host="localhost", n_boot=20) as srv:
        port = _port(srv)
        assert _get(srv, "/", host=f"localhost:{port}")[0] == 200
        assert _get(srv, "/", host=f"example.com:{port}")[0] == 421


# -- writers in other processes ------------------------------------------------------------------

_OPEN_FOR_WRITING = """
import sys
from clinjudge.runs import RunStore
RunStore(sys.argv[1]).close()
"""


def _copy_of(viewer_store: ViewerStore, tmp_path: Path) -> Path:
    db = tmp_path / "copy.duckdb"
    shutil.copyfile(viewer_store.db, db)
    return db


def test_writers_open_the_database_while_pages_load(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    """Each page used to hold a read lock while it was built, so a `judge run` or `runs rename`
    started while someone browsed failed with "database is in use by another process"."""
    db = _copy_of(viewer_store, tmp_path)
    s = viewer_store
    pages = ["/", f"/runs/{s.single}/", f"/runs/{s.magentic}/", f"/runs/{s.single}/items/item-0001",
             f"/compare?run={s.single}&run={s.magentic}"]  # fmt: skip
    statuses: Counter[int] = Counter()
    stop = threading.Event()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with ViewerServer(db, n_boot=20) as srv:

        def browse() -> None:
            while not stop.is_set():
                for page in pages:
                    statuses[_get(srv, page)[0]] += 1

        browsers = [threading.Thread(target=browse, daemon=True) for _ in range(2)]
        for thread in browsers:
            thread.start()
        try:
            while sum(statuses.values()) < 10:  # the browsers are under way
                time.sleep(0.05)
            writers = [
                [sys.executable, "-c", _OPEN_FOR_WRITING, str(db)],
                [JUDGE, "runs", "rename", s.single, "renamed 1", "--db", str(db)],
                [sys.executable, "-c", _OPEN_FOR_WRITING, str(db)],
                [JUDGE, "runs", "rename", s.single, "renamed 2", "--db", str(db)],
                [sys.executable, "-c", _OPEN_FOR_WRITING, str(db)],
            ]
            failures, refused = [], 0
            for command in writers:
                # A writer that opens the file in the fraction of a second while the viewer
                # copies it is refused (docs/reliability.md 12.5): it may try again, as a user
                # would; before the snapshot, a writer was refused nearly every time it tried.
                for _ in range(3):
                    done = subprocess.run(
                        command, capture_output=True, text=True, env=env, timeout=120
                    )
                    if done.returncode == 0:
                        break
                    assert "in use by another process" in done.stderr, done.stderr
                    refused += 1
                    time.sleep(0.5)
                else:
                    failures.append(done.stderr)
        finally:
            stop.set()
            for thread in browsers:
                thread.join(timeout=60)
        assert failures == [], failures[:1]
        assert refused <= len(writers), refused  # a rare collision, not the rule
        assert statuses[200] > 0 and set(statuses) == {200}, statuses  # never busy, never 500
        status, body = _get(srv, f"/runs/{s.single}/")
        assert status == 200 and "renamed 2" in body  # pages follow the writes


_HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("CREATE TABLE IF NOT EXISTS lock_probe (x INTEGER)")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def _hold(db: Path, seconds: float) -> subprocess.Popen[str]:
    """A writer that holds the database for some seconds (once it has printed "locked")."""
    writer = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(db), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == "locked"
    return writer


def test_a_page_waits_for_a_writer_that_lets_go_quickly(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    db = _copy_of(viewer_store, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(create_app(db, n_boot=20))
    writer = _hold(db, 0.4)
    try:
        assert client.get(f"/runs/{viewer_store.single}/").status_code == 200
    finally:
        writer.wait(timeout=30)


def test_a_writer_holding_the_database_gets_a_short_busy_answer(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    db = _copy_of(viewer_store, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(create_app(db, n_boot=20))
    assert client.get("/").status_code == 200  # a copy of the database as it was
    writer = _hold(db, 30)  # and now it changes and stays locked
    try:
        started = time.monotonic()
        busy = client.get("/")
        waited = time.monotonic() - started
        assert busy.status_code == 503 and busy.headers["retry-after"] == "3"
        assert "Database busy, try again" in busy.text and "Traceback" not in busy.text
        assert 0.5 < waited < 10
        started = time.monotonic()
        assert client.get("/").status_code == 503  # the next page does not wait again
        assert time.monotonic() - started < 1.5
    finally:
        writer.kill()
        writer.wait(timeout=30)
    time.sleep(1.6)  # past the second without waiting
    assert client.get("/").status_code == 200


def test_the_copy_is_owner_only_and_deleted_when_the_viewer_stops(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    db = _copy_of(viewer_store, tmp_path)
    with ViewerServer(db, n_boot=20) as srv:
        assert _get(srv, "/")[0] == 200
        (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith(".clinjudge-view-")]
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert any(p.suffix == ".duckdb" for p in folder.iterdir())
    assert [p.name for p in tmp_path.iterdir()] == ["copy.duckdb"]


def test_a_copy_left_by_a_killed_viewer_is_deleted(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    db = _copy_of(viewer_store, tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    stale = tmp_path / f".clinjudge-view-{dead}-abc"
    stale.mkdir()
    (stale / "copy-1.duckdb").write_bytes(b"old")
    with ViewerServer(db, n_boot=20) as srv:
        assert _get(srv, "/")[0] == 200
        assert not stale.exists()


# -- requests no page can answer --------------------------------------------------------------


def test_comparing_a_run_with_itself_is_refused(viewer_store: ViewerStore) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(create_app(viewer_store.db, n_boot=20))
    s = viewer_store
    for query in (f"run={s.single}&run={s.single}", f"run={s.single}&run={s.single[:-1]}",
                  f"run={s.single}", f"run={s.single}&run="):  # fmt: skip
        response = client.get(f"/compare?{query}")
        assert response.status_code == 400, query
        assert "two or more different runs" in response.text
        assert "1 runs" not in response.text
    response = client.get(f"/compare?run={s.single}&run={s.magentic}&run={s.single}")
    assert response.status_code == 200 and "Compare 2 runs" in response.text


_DIE_AFTER_WRITING = """
import os, sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("UPDATE runs SET name = 'written to the log' WHERE run_id = ?", [sys.argv[2]])
os._exit(0)  # killed: the change stays in the write-ahead log, not yet in the file
"""


def test_pages_show_what_a_killed_writer_left_in_the_log(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    db = _copy_of(viewer_store, tmp_path)
    subprocess.run([sys.executable, "-c", _DIE_AFTER_WRITING, str(db), viewer_store.single],
                   check=True, timeout=120)  # fmt: skip
    wal = db.with_name(db.name + ".wal")
    assert wal.exists()
    before = (db.read_bytes(), wal.read_bytes())
    with ViewerServer(db, n_boot=20) as srv:
        for _ in range(2):  # the first page copies the file and its log; the second reads it
            status, body = _get(srv, "/")
            assert status == 200 and "written to the log" in body
    assert (db.read_bytes(), wal.read_bytes()) == before  # the viewer wrote only its copy
