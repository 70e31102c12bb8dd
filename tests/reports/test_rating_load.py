"""Ten raters saving at once over HTTP (10 clients x 200 items): every acknowledged rating is in
the store exactly once, and a save the server never acknowledged is never counted as saved."""

from __future__ import annotations

import os
import re
import threading
import warnings
from pathlib import Path

import httpx

from clinjudge.reports import RatingDesk, RatingServer
from tests.reports._rating_support import VALID, judged_run, plan

RATERS = [f"rater{n:02d}" for n in range(10)]
# The issue's load is 10 x 200: 2,000 saves, 50 s to two minutes on two shared cores (clients and
# server in one process). The suite runs 10 x 40; CLINJUDGE_RATE_LOAD_ITEMS=200 runs the full one.
ITEMS = int(os.environ.get("CLINJUDGE_RATE_LOAD_ITEMS", "40"))


def _rate_all(base: str, secret: str, acked: list[str], failures: list[str]) -> None:
    """One rater's browser: sign in with the link, then save every item as the page's script
    does (form body, CSRF header, JSON answer)."""
    with httpx.Client(base_url=base, timeout=60) as client:
        client.get(f"/rate?token={secret}")
        n = 1
        while True:
            page = client.get(f"/rate/items/{n}")
            if page.status_code == 404:
                return
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            save_id = re.search(r'name="save_id" value="([^"]+)"', page.text)
            assert csrf and save_id
            body = {"save_id": save_id.group(1), **{f"score.{k}": v for k, v in VALID.items()}}
            answer = client.post(
                f"/rate/items/{n}",
                data=body,
                headers={"x-csrf-token": csrf.group(1), "accept": "application/json"},
            )
            if answer.status_code == 201 and answer.json()["saved"]:
                acked.append(save_id.group(1))
            else:
                failures.append(f"{n}: {answer.status_code} {answer.text[:200]}")
            n += 1


def test_ten_raters_saving_at_once(tmp_path: Path) -> None:
    db, run_id = judged_run(tmp_path, ITEMS, hostile=False)
    plan(db, run_id, RATERS, overlap=str(len(RATERS)))  # every rater rates every item
    desk = RatingDesk(db, run_id)
    links = {r: desk.issue_link(r) for r in RATERS}
    acked: dict[str, list[str]] = {r: [] for r in RATERS}
    failures: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with RatingServer(desk) as server:
            threads = [
                threading.Thread(target=_rate_all, args=(server.url, links[r], acked[r], failures))
                for r in RATERS
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=600)
    con = desk.store.con
    assert failures == []
    assert all(len(a) == ITEMS for a in acked.values())
    for rater, saves in acked.items():
        stored = con.execute(
            "SELECT save_id FROM rating_saves WHERE rater_id = ?", [rater]
        ).fetchall()
        assert sorted(s[0] for s in stored) == sorted(f"{rater}:{s}" for s in saves)
    # Exactly once: one row per (item, rater, attribute), one history row per attribute saved.
    assert con.execute("SELECT count(*) FROM human_ratings").fetchone() == (
        len(RATERS) * ITEMS * len(VALID),
    )
    assert (
        con.execute(
            "SELECT count(*), count(DISTINCT (save_id, attribute)) FROM rating_history"
        ).fetchone()
        == (len(RATERS) * ITEMS * len(VALID),) * 2
    )
    desk.close()
