"""`judge rate serve`'s app over a judged run: links, sessions, CSRF, Host/Origin checks,
body caps, rubric checks, history, blindness and the JSON API (SPEC §16)."""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from starlette.testclient import TestClient

from clinjudge.reports import RatingDesk, create_rating_app
from clinjudge.reports._rating_app import MAX_BODY, csrf_token
from tests.reports._rating_support import HOSTILE_NOTE, HOSTILE_SUMMARY, VALID, judged_run, plan


@pytest.fixture(scope="module")
def rated_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("rate")
    db, run_id = judged_run(tmp, 6)
    plan(db, run_id, ["alice", "bob", "carol"], overlap="2", seed=3)
    return db, run_id


@pytest.fixture
def desk(rated_store: tuple[Path, str], tmp_path: Path) -> Iterator[RatingDesk]:
    # Each test rates its own copy: saves of one test do not leak into another.
    db = tmp_path / "copy.duckdb"
    db.write_bytes(rated_store[0].read_bytes())
    desk = RatingDesk(db, rated_store[1])
    yield desk
    desk.close()


def _client(desk: RatingDesk) -> TestClient:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TestClient(create_rating_app(desk))


def _signed_in(desk: RatingDesk, rater: str = "alice") -> tuple[TestClient, str]:
    client = _client(desk)
    secret = desk.issue_link(rater)
    response = client.get(f"/rate?token={secret}", follow_redirects=False)
    assert response.status_code == 303
    return client, secret


def _form(client: TestClient, n: int) -> dict[str, str]:
    html = client.get(f"/rate/items/{n}").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', html)
    save_id = re.search(r'name="save_id" value="([^"]+)"', html)
    assert csrf and save_id, html[:500]
    return {"csrf": csrf.group(1), "save_id": save_id.group(1)}


def _scores(**changed: str) -> dict[str, str]:
    return {f"score.{k}": v for k, v in {**VALID, **changed}.items()}


def _query(desk: RatingDesk, sql: str) -> list[tuple]:
    return desk.store.con.execute(sql).fetchall()


def test_a_link_becomes_a_strict_httponly_session_and_leaves_the_address(
    desk: RatingDesk,
) -> None:
    client = _client(desk)
    secret = desk.issue_link("alice")
    response = client.get(f"/rate?token={secret}", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/rate"  # the secret is not in the next address
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
    assert response.headers["referrer-policy"] == "no-referrer"
    session_id = re.search(r"clinjudge_rate=([^;]+)", cookie).group(1)  # type: ignore[union-attr]
    # Stored hashed: neither the link's secret nor the session id is in the database.
    tokens = [row[0] for row in _query(desk, "SELECT token_hash FROM rating_tokens")]
    sessions = [row[0] for row in _query(desk, "SELECT session_hash FROM rating_sessions")]
    assert hashlib.sha256(secret.encode()).hexdigest() in tokens
    assert secret not in tokens and session_id not in sessions
    assert hashlib.sha256(session_id.encode()).hexdigest() in sessions
    # The session opens the rater's first item.
    first = client.get("/rate", follow_redirects=False)
    assert first.headers["location"] == "/rate/items/1"
    assert client.get("/rate/items/1").status_code == 200


def test_without_a_live_link_or_session_nothing_is_shown(desk: RatingDesk) -> None:
    client = _client(desk)
    bad = client.get("/rate?token=not-a-token", follow_redirects=False)
    assert bad.status_code == 403 and "not valid" in bad.text
    assert "set-cookie" not in bad.headers
    assert client.get("/rate?r=1").status_code == 401
    assert client.get("/rate/items/1").status_code in (200, 401)  # the signing-in refresh
    assert "item-" not in client.get("/rate/items/1").text
    assert client.get("/rate/items").status_code in (200, 401)
    assert "item-" not in client.get("/rate/items").text
    assert client.get("/rate/progress", params={"r": "1"}).status_code == 401
    assert client.post("/rate/items/1", data=_scores()).status_code == 401


def test_a_rater_sees_only_their_items(desk: RatingDesk) -> None:
    client, secret = _signed_in(desk, "alice")
    mine = [a["item_id"] for a in desk.assignments("alice")]
    others = {a["item_id"] for r in ("bob", "carol") for a in desk.assignments(r)} - set(mine)
    assert mine and others
    assert client.get(f"/rate/items/{len(mine) + 1}").status_code == 404
    listing = client.get("/rate/items").text
    assert all(item in listing for item in mine)
    assert not any(item in listing for item in others)
    api = client.post(
        "/api/ratings",
        json={"item_id": sorted(others)[0], "attribute": "accurate", "score": 3},
        headers={"authorization": f"Bearer {secret}"},
    )
    assert api.status_code == 403 and "not one of your items" in api.text


def test_a_forged_host_or_another_origin_is_refused(desk: RatingDesk) -> None:
    client, _ = _signed_in(desk)
    rebound = client.get("/rate/items/1", headers={"host": "evil.example"})
    assert rebound.status_code == 421
    form = _form(client, 1)
    post = client.post(
        "/rate/items/1", data={**form, **_scores()}, headers={"origin": "http://evil.example"}
    )
    assert post.status_code == 403
    assert _query(desk, "SELECT count(*) FROM rating_saves") == [(0,)]


def test_every_write_needs_the_sessions_csrf_token(desk: RatingDesk) -> None:
    client, _ = _signed_in(desk, "alice")
    other, _ = _signed_in(desk, "bob")
    form = _form(client, 1)
    missing = client.post("/rate/items/1", data={"save_id": form["save_id"], **_scores()})
    assert missing.status_code == 403
    bobs = _form(other, 1)["csrf"]
    foreign = client.post("/rate/items/1", data={**form, "csrf": bobs, **_scores()})
    assert foreign.status_code == 403
    assert _query(desk, "SELECT count(*) FROM rating_saves") == [(0,)]
    header = client.post(
        "/rate/items/1",
        data={"save_id": form["save_id"], **_scores()},
        headers={"x-csrf-token": form["csrf"], "accept": "application/json"},
    )
    assert header.status_code == 201


def test_request_bodies_are_capped(desk: RatingDesk) -> None:
    client, secret = _signed_in(desk)
    form = _form(client, 1)
    big = client.post("/rate/items/1", data={**form, **_scores(), "comment": "x" * (MAX_BODY + 1)})
    assert big.status_code == 413
    api = client.post(
        "/api/ratings",
        content=b"[" + b" " * (MAX_BODY + 1) + b"]",
        headers={"authorization": f"Bearer {secret}", "content-type": "application/json"},
    )
    assert api.status_code == 413
    assert _query(desk, "SELECT count(*) FROM rating_saves") == [(0,)]


@pytest.mark.parametrize(
    ("changed", "says"),
    [
        ({"score.accurate": "7"}, "outside the scale"),
        ({"score.accurate": "2.5"}, "outside the scale"),
        ({"score.accurate": "na"}, "N/A is not allowed"),
        ({"score.bogus": "3"}, "unknown attribute"),
        ({"score.synthesized": "na"}, "N/A only when"),  # abstraction is 1: gate open
        ({"score.abstraction": "0"}, "must be N/A"),  # gate closed, synthesized scored
        ({"score.thorough": ""}, "not a score"),
    ],
)
def test_scores_off_the_rubric_are_refused_on_the_page(
    desk: RatingDesk, changed: dict[str, str], says: str
) -> None:
    client, _ = _signed_in(desk)
    form = _form(client, 1)
    response = client.post("/rate/items/1", data={**form, **_scores(), **changed})
    assert response.status_code == 400
    assert "Not saved" in response.text and says in response.text
    as_json = client.post(
        "/rate/items/1",
        data={**form, **_scores(), **changed},
        headers={"accept": "application/json"},
    )
    assert as_json.status_code == 400 and says in str(as_json.json()["errors"])
    assert _query(desk, "SELECT count(*) FROM rating_saves") == [(0,)]
    assert _query(desk, "SELECT count(*) FROM human_ratings") == [(0,)]


def test_a_closed_gate_takes_na(desk: RatingDesk) -> None:
    client, _ = _signed_in(desk)
    form = _form(client, 1)
    data = {**form, **_scores(abstraction="0", synthesized="na")}
    assert client.post("/rate/items/1", data=data, follow_redirects=False).status_code == 303
    stored = dict(_query(desk, "SELECT attribute, score FROM human_ratings"))
    assert stored["synthesized"] is None and stored["abstraction"] == 0


def test_hostile_text_is_shown_literally(desk: RatingDesk) -> None:
    holder = next(r for r in ("alice", "bob", "carol") if any(
        a["item_id"] == "item-0000" for a in desk.assignments(r)
    ))  # fmt: skip
    client, _ = _signed_in(desk, holder)
    n = [a["item_id"] for a in desk.assignments(holder)].index("item-0000") + 1
    html = client.get(f"/rate/items/{n}").text
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&#39;summary&#39;)&lt;/script&gt;" in html
    assert HOSTILE_NOTE.split(":")[0] in html and HOSTILE_SUMMARY not in html
    csp = client.get(f"/rate/items/{n}").headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "<script>" not in html.replace('<script src="/static/rate.js" defer></script>', "")


def test_saves_land_in_human_ratings_with_history_and_edits_are_kept(desk: RatingDesk) -> None:
    client, _ = _signed_in(desk)
    first = _form(client, 1)
    client.post("/rate/items/1", data={**first, **_scores()}, follow_redirects=False)
    again = client.post("/rate/items/1", data={**first, **_scores()}, follow_redirects=False)
    assert again.status_code == 303  # a repeated save (a retry) changes nothing
    edit = _form(client, 1)
    client.post("/rate/items/1", data={**edit, **_scores(accurate="2")}, follow_redirects=False)
    item = desk.assignments("alice")[0]["item_id"]
    rows = _query(
        desk,
        "SELECT attribute, score, source FROM human_ratings WHERE rater_id = 'alice' "
        f"AND item_id = '{item}' ORDER BY attribute",
    )
    assert len(rows) == len(VALID) and {r[2] for r in rows} == {"rate"}
    assert dict((r[0], r[1]) for r in rows)["accurate"] == 2
    assert _query(desk, "SELECT count(*) FROM rating_saves") == [(2,)]
    history = _query(
        desk,
        "SELECT h.old_score, h.new_score, h.was_rated FROM rating_history h JOIN rating_saves s "
        "USING (save_id) WHERE h.attribute = 'accurate' ORDER BY s.saved_at",
    )
    assert history == [(None, 5.0, False), (5.0, 2.0, True)]
    page = client.get("/rate/items/1").text
    assert 'value="2" checked' in page  # going back shows the stored rating
    assert "1 of" in client.get("/rate/items").text


def test_the_page_is_blind_unless_revealed(rated_store: tuple[Path, str], tmp_path: Path) -> None:
    db = tmp_path / "copy.duckdb"
    db.write_bytes(rated_store[0].read_bytes())
    for n, reveal in ((1, False), (2, True)):
        desk = RatingDesk(db, rated_store[1], reveal_after=reveal)
        try:
            client, _ = _signed_in(desk, "alice")
            assert "the judge and the other raters" not in client.get(f"/rate/items/{n}").text
            form = _form(client, n)
            client.post(f"/rate/items/{n}", data={**form, **_scores()}, follow_redirects=False)
            after = client.get(f"/rate/items/{n}").text
            assert ("the judge and the other raters" in after) is reveal
            rationale = _query(desk, "SELECT rationale FROM samples WHERE rationale <> ''")
            assert rationale and all(r[0] not in after for r in rationale)
        finally:
            desk.close()


def test_the_json_api_checks_like_the_page(desk: RatingDesk) -> None:
    client, secret = _signed_in(desk)
    auth = {"authorization": f"Bearer {secret}"}
    assert client.get("/api/assignments").status_code == 401
    listing = client.get("/api/assignments", headers=auth).json()
    assert listing["rater_id"] == "alice"
    item = listing["items"][0]["item_id"]
    bad = client.post(
        "/api/ratings",
        json=[
            {"item_id": item, "attribute": "accurate", "score": 9},
            {"item_id": item, "attribute": "nonsense", "score": 1},
        ],
        headers=auth,
    )
    assert bad.status_code == 422
    assert "outside the scale" in str(bad.json()) and "unknown attribute" in str(bad.json())
    assert _query(desk, "SELECT count(*) FROM human_ratings") == [(0,)]
    malformed = client.post("/api/ratings", content=b"{not json", headers=auth)
    assert malformed.status_code == 400
    rows = [{"item_id": item, "attribute": "accurate", "score": 4},
            {"item_id": item, "attribute": "useful", "score": 3}]  # fmt: skip
    keyed = {**auth, "idempotency-key": "k1"}
    ok = client.post("/api/ratings", json=rows, headers=keyed)
    assert ok.status_code == 201
    assert {(r["attribute"], r["score"]) for r in ok.json()["ratings"]} == {
        ("accurate", 4),
        ("useful", 3),
    }
    assert client.post("/api/ratings", json=rows, headers=keyed).status_code == 201
    assert _query(desk, "SELECT count(*) FROM rating_saves") == [(1,)]  # the retry is the same
    # A cookie is not a key to the API, and a revoked link is no key at all.
    assert client.post("/api/ratings", json=rows[0]).status_code == 401
    assert desk.revoke("alice") >= 1
    assert client.get("/api/assignments", headers=auth).status_code == 401
    assert client.get("/rate/items/1", params={"r": "1"}).status_code == 401


def test_the_progress_page_is_the_leads(desk: RatingDesk) -> None:
    rater, _ = _signed_in(desk, "alice")
    form = _form(rater, 1)
    rater.post("/rate/items/1", data={**form, **_scores()}, follow_redirects=False)
    assert rater.get("/rate/progress").status_code == 403
    lead = _client(desk)
    lead.get(f"/rate?token={desk.issue_link('lead', role='lead')}")
    page = lead.get("/rate/progress")
    assert page.status_code == 200
    assert re.search(r"<td class=\"l\">alice</td><td>1</td><td>\d+</td>", page.text)
    assert "Agreement between raters" in page.text
    widths = page.text.split('<table id="widths">')[1].split("</table>")[0]
    assert "Accurate" in widths and "planned half-width" in widths
    # Two more items rated by alice: three rated items give a PPI++ interval.
    for n in (2, 3):
        form = _form(rater, n)
        scores = _scores(accurate=str(n + 1))
        rater.post(f"/rate/items/{n}", data={**form, **scores}, follow_redirects=False)
    widths = lead.get("/rate/progress").text.split('<table id="widths">')[1].split("</table>")[0]
    accurate = re.search(r"<td class=\"l\">Accurate</td><td>3</td><td>\d+</td><td>±([\d.]+)</td>"
                         r"<td>±([\d.]+)</td>", widths)  # fmt: skip
    assert accurate, widths


def test_csrf_tokens_differ_per_session() -> None:
    assert csrf_token("a") != csrf_token("b")
    assert len(csrf_token("a")) == 64


def test_the_store_is_duckdb_readable_after_close(desk: RatingDesk) -> None:
    client, _ = _signed_in(desk)
    form = _form(client, 1)
    client.post("/rate/items/1", data={**form, **_scores()}, follow_redirects=False)
    path = desk.store.path
    desk.close()
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM human_ratings").fetchone() == (len(VALID),)
