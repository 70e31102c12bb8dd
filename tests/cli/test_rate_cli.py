"""`judge rate plan|serve|link|revoke` as a team uses them: a seeded plan, the server killed
mid-session (SIGKILL) and restarted, and other commands refused while it holds the database."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli._helpers import JUDGE, invoke, query, scalar
from tests.reports._rating_support import VALID, judged_run


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return judged_run(tmp_path_factory.mktemp("ratecli"), 12)


@pytest.fixture
def store(judged: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "rate.duckdb"
    db.write_bytes(judged[0].read_bytes())
    return db, judged[1]


def _assignments(db: Path) -> list[tuple]:
    return query(db, "SELECT rater_id, item_id, position FROM rating_assignments ORDER BY ALL")


def test_plan_is_seeded_and_stored(store: tuple[Path, str]) -> None:
    db, run_id = store
    args = ("rate", "plan", "--run", run_id, "--raters", "alice,bob,carol", "--size", "8",
            "--seed", "4", "--db", str(db))  # fmt: skip
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    assert "8 item(s), overlap 2, seed 4" in first.stderr
    plan1 = _assignments(db)
    assert len(plan1) == 16  # 8 items x 2 raters
    per_item: dict[str, int] = {}
    for _, item, _ in plan1:
        per_item[item] = per_item.get(item, 0) + 1
    assert set(per_item.values()) == {2}
    again = invoke(*args)
    assert again.exit_code == 2 and "--replace" in again.stderr
    assert invoke(*args, "--replace").exit_code == 0
    assert _assignments(db) == plan1  # the same seed, the same plan
    assert scalar(db, "SELECT seed FROM rating_plans") == 4
    shared = invoke(*args[:-2], "--overlap", "25%", "--strata", "score", "--replace",
                    "--db", str(db))  # fmt: skip
    assert shared.exit_code == 0, shared.output
    rows = _assignments(db)
    by_all = [i for i in {r[1] for r in rows} if sum(r[1] == i for r in rows) == 3]
    assert len(by_all) == 2  # 25% of 8 items rated by all three
    bad = invoke(*args[:-2], "--overlap", "4", "--replace", "--db", str(db))
    assert bad.exit_code == 2 and "raters per item must be 1 to 3" in bad.stderr


def test_plan_takes_the_items_an_audit_plan_chose(store: tuple[Path, str], tmp_path: Path) -> None:
    db, run_id = store
    chosen = tmp_path / "sample.jsonl"
    chosen.write_text('{"item_id": "item-0003"}\n{"item_id": "item-0007"}\n')
    result = invoke("rate", "plan", "--run", run_id, "--raters", "alice", "--items", str(chosen),
                    "--db", str(db))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert {r[1] for r in _assignments(db)} == {"item-0003", "item-0007"}


class _Serve:
    """`judge rate serve` in a subprocess, with the links it printed."""

    def __init__(self, db: Path, run_id: str, port: int = 0):
        env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
        self.proc = subprocess.Popen(
            [JUDGE, "rate", "serve", "--run", run_id, "--db", str(db), "--port", str(port)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        self.links: dict[str, str] = {}
        deadline = time.monotonic() + 60
        assert self.proc.stdout is not None
        while "(study lead)" not in self.links:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"server ended: {self.proc.stderr.read()}")  # type: ignore[union-attr]
            name, _, link = line.strip().partition("\t")
            self.links[name] = link
            assert time.monotonic() < deadline
        self.base = re.match(r"(http://[^/]+)", self.links["(study lead)"]).group(1)  # type: ignore[union-attr]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


@pytest.fixture
def planned(store: tuple[Path, str]) -> Iterator[tuple[Path, str]]:
    db, run_id = store
    result = invoke("rate", "plan", "--run", run_id, "--raters", "alice,bob", "--overlap", "2",
                    "--db", str(db))  # fmt: skip
    assert result.exit_code == 0, result.output
    yield db, run_id


def _page(client: httpx.Client, n: int) -> tuple[str, str]:
    html = client.get(f"/rate/items/{n}").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', html)
    save_id = re.search(r'name="save_id" value="([^"]+)"', html)
    assert csrf and save_id, html[:300]
    return csrf.group(1), save_id.group(1)


def _post(client: httpx.Client, n: int, csrf: str, save_id: str) -> httpx.Response:
    body = {"save_id": save_id, **{f"score.{k}": v for k, v in VALID.items()}}
    headers = {"x-csrf-token": csrf, "accept": "application/json"}
    return client.post(f"/rate/items/{n}", data=body, headers=headers, timeout=10)


def test_sigkill_mid_session_loses_nothing_acknowledged(planned: tuple[Path, str]) -> None:
    db, run_id = planned
    server = _Serve(db, run_id)
    port = int(server.base.rsplit(":", 1)[1])
    acked: list[tuple[int, str]] = []
    unacked: list[tuple[int, str, str]] = []
    client = httpx.Client(base_url=server.base)
    try:
        client.get(f"/rate?token={server.links['alice'].split('token=')[1]}")
        stop = threading.Event()

        def rate() -> None:
            n = 1
            while not stop.is_set() and n <= 12:
                try:
                    csrf, save_id = _page(client, n)
                except (httpx.HTTPError, AssertionError):
                    return
                try:
                    answer = _post(client, n, csrf, save_id)
                except httpx.HTTPError:
                    unacked.append((n, csrf, save_id))  # never acknowledged: not saved
                    return
                assert answer.status_code == 201
                acked.append((n, save_id))
                n += 1

        worker = threading.Thread(target=rate)
        worker.start()
        while len(acked) < 3:
            time.sleep(0.01)
        server.kill()  # in the middle of the session
        stop.set()
        worker.join(timeout=30)
        assert server.proc.returncode == -signal.SIGKILL
        # The database was not closed: DuckDB replays its log on the next open.
        restarted = _Serve(db, run_id, port=port)
        try:
            # The same browser session goes on (sessions are stored); a save that was lost
            # in flight is sent again with its save id, and is stored once.
            for n, csrf, save_id in unacked:
                assert _post(client, n, csrf, save_id).status_code == 201
                assert _post(client, n, csrf, save_id).status_code == 201
            for n, save_id in acked[:1]:  # a repeat of an acknowledged save changes nothing
                csrf, _ = _page(client, n)
                assert _post(client, n, csrf, save_id).status_code == 201
        finally:
            restarted.stop()
    finally:
        client.close()
        if server.proc.poll() is None:
            server.kill()
    saves = query(db, "SELECT save_id FROM rating_saves WHERE rater_id = 'alice'")
    stored = [s[0] for s in saves]
    assert len(stored) == len(set(stored))
    for _, save_id in acked:
        assert f"alice:{save_id}" in stored
    assert len(stored) == len(acked) + len(unacked)
    assert scalar(db, "SELECT count(*) FROM human_ratings WHERE rater_id = 'alice'") == len(
        stored
    ) * len(VALID)
    assert not Path(f"{db}.rating-server").exists()  # removed on the clean stop


def test_other_commands_are_refused_while_the_server_holds_the_store(
    planned: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = planned
    server = _Serve(db, run_id)
    try:
        note = json.loads(Path(f"{db}.rating-server").read_text())
        assert note["pid"] == server.proc.pid
        assert oct(Path(f"{db}.rating-server").stat().st_mode & 0o777) == "0o600"
        data = tmp_path / "more.jsonl"
        data.write_text(json.dumps({"id": "x1", "notes": ["n"], "summary": "s",
                                    "specialty": "Primary Care"}) + "\n")  # fmt: skip
        for args in (
            ["run", "--data", str(data), "--model", "mock/judge", "--db", str(db)],
            ["ratings", "list", "--db", str(db)],
            ["rate", "link", "--run", run_id, "--rater", "alice", "--db", str(db)],
        ):
            refused = subprocess.run(
                [JUDGE, *args], capture_output=True, text=True, timeout=120,
                env={**os.environ, "COLUMNS": "250", "NO_COLOR": "1"},
            )  # fmt: skip
            assert refused.returncode != 0, args
            assert "rating server" in refused.stderr and "judge rate serve" in refused.stderr
            assert "Traceback" not in refused.stderr
    finally:
        server.stop()
    # Stopped, the store is free again: links are made and revoked offline.
    link = invoke("rate", "link", "--run", run_id, "--rater", "bob", "--db", str(db))
    assert link.exit_code == 0 and "/rate?token=" in link.stdout
    revoked = invoke("rate", "revoke", "--run", run_id, "--rater", "bob", "--db", str(db))
    assert revoked.exit_code == 0 and "revoked" in revoked.stderr
    unknown = invoke("rate", "link", "--run", run_id, "--rater", "zed", "--db", str(db))
    assert unknown.exit_code == 2 and "not a rater of the plan" in unknown.stderr


def test_an_audit_study_from_plan_to_corrected_audit(tmp_path: Path) -> None:
    from clinjudge.reports import RatingDesk
    from tests.cli.test_audit_cli import _data_flags

    db = tmp_path / "audit.duckdb"
    made = invoke(
        "audit", *_data_flags(), "--rubric", "pdsqi9", "--model", "mock/judge", "--samples", "1",
        "--boot", "20", "--db", str(db), "--no-progress", "--json",
    )  # fmt: skip
    assert made.exit_code == 0, made.stderr
    run_id = json.loads(made.stdout)["run_id"]
    sample = tmp_path / "to_rate.jsonl"
    chosen = invoke("audit", "plan", "--run", run_id, "--size", "3", "--out", str(sample),
                    "--db", str(db))  # fmt: skip
    assert chosen.exit_code == 0, chosen.stderr
    planned = invoke("rate", "plan", "--run", run_id, "--raters", "alice", "--items",
                     str(sample), "--db", str(db))  # fmt: skip
    assert planned.exit_code == 0, planned.stderr
    desk = RatingDesk(db, run_id)
    try:
        for k, a in enumerate(desk.assignments("alice")):
            scores = {**VALID, "accurate": str(1 + k % 5), "useful": str(1 + (k * 2) % 5)}
            desk.save("alice", a["item_id"], scores, save_id=f"s{k}")
    finally:
        desk.close()
    # No ratings file: the audit reads what was rated.
    audit = invoke("audit", "--run", run_id, "--json", "--boot", "20", "--db", str(db))
    assert audit.exit_code == 0, audit.stderr
    ppi = json.loads(audit.stdout)["ppi"]
    assert {r["n"] for r in ppi if r["attribute"] == "accurate"} == {3}
    out = tmp_path / "ratings.jsonl"
    exported = invoke("ratings", "export", str(out), "--db", str(db))
    assert exported.exit_code == 0, exported.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 9 * len(VALID) and set(rows[0]) == {"item_id", "rater_id", "attribute",
                                                           "score"}  # fmt: skip
    assert invoke("ratings", "import", str(out), "--db", str(db)).exit_code == 0
