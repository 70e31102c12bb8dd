"""The vLLM pooling backend against a fake ``/pooling`` endpoint on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from clinjudge.prm_bridge import Chain, PRMModelError, Step, make_format
from clinjudge.prm_bridge._render import encode
from clinjudge.prm_bridge._vllm import VLLMPRM, pooling_endpoint
from tests.prm_bridge._tiny import build_tokenizer


def _p(token: int, index: int) -> float:
    return ((token + index) % 9 + 1) / 10


class _Pooling(BaseHTTPRequestHandler):
    mode = "ALL"
    tag = -1
    requests: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, **body})
        if self.mode == "FAIL":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"model not loaded")
            return
        data = []
        for index, ids in enumerate(body["input"]):
            rows = [[_p(t, i), 1 - _p(t, i)] for i, t in enumerate(ids)]
            if self.mode == "STEP":
                rows = [row for row, t in zip(rows, ids, strict=True) if t == self.tag]
            if self.mode == "SHORT":
                rows = rows[:2]
            data.append({"index": index, "object": "pooling", "data": rows})
        payload = json.dumps({"object": "list", "data": data[::-1]}).encode()  # any order
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tok")
    build_tokenizer([" ки"], [" +", " -"]).save_pretrained(path)
    return path


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Pooling]]]:
    handler = type("Handler", (_Pooling,), {"requests": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


CHAINS = [
    Chain(id="a", steps=[Step(text="one"), Step(text="two two")], question="Q"),
    Chain(id="b", steps=[Step(text="x")], question="longer question text"),
]


def _expected(scorer: VLLMPRM) -> list[list[float]]:
    """P(+) the fake server gives at each chain's score positions."""
    out = []
    for chain in CHAINS:
        enc = encode(scorer.format, scorer.tokenizer, chain)
        out.append([_p(enc.input_ids[p], p) for p in enc.positions])
    return out


def test_all_pooling_rows_gathered_at_score_positions(server, tokenizer_dir):
    url, handler = server
    scorer = VLLMPRM(url, make_format("medprm"), tokenizer=str(tokenizer_dir), served_model="prm")
    results = scorer.score(CHAINS)
    got = [s.score for r in results for s in r.steps]
    assert got == pytest.approx([v for row in _expected(scorer) for v in row])
    [request] = handler.requests
    assert request["path"] == "/pooling"
    assert request["task"] == "token_classify" and request["model"] == "prm"
    assert request["use_activation"] is True
    assert len(request["input"]) == 2 and all(isinstance(t, int) for t in request["input"][0])
    assert results[0].aggregates["min"] == min(_expected(scorer)[0])


def test_step_pooling_rows_used_in_order(server, tokenizer_dir):
    url, handler = server
    handler.mode = "STEP"
    scorer = VLLMPRM(url, make_format("medprm"), tokenizer=str(tokenizer_dir))
    handler.tag = scorer.tokenizer.convert_tokens_to_ids(" ки")
    results = scorer.score(CHAINS)
    got = [s.score for r in results for s in r.steps]
    assert got == pytest.approx([v for row in _expected(scorer) for v in row])


def test_server_errors_are_reported(server, tokenizer_dir):
    url, handler = server
    scorer = VLLMPRM(url, make_format("medprm"), tokenizer=str(tokenizer_dir))
    handler.mode = "SHORT"
    with pytest.raises(PRMModelError, match="serve with ALL pooling"):
        scorer.score(CHAINS)
    handler.mode = "FAIL"
    with pytest.raises(PRMModelError, match="HTTP 500: model not loaded"):
        scorer.score(CHAINS)
    with pytest.raises(PRMModelError, match="full-vocabulary softmax"):
        VLLMPRM(url, make_format("prm-clinic"), tokenizer=str(tokenizer_dir))


def test_pooling_endpoint_from_any_base():
    for url in ("http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/pooling"):
        assert pooling_endpoint(url) == "http://h:8000/pooling"


def test_cli_scores_through_prm_url(server, tokenizer_dir, tmp_path):
    from tests.cli._helpers import invoke

    url, handler = server
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": "a", "question": "Q", "steps": ["one", "two two"]}) + "\n")
    result = invoke(
        "prm", "score", "--model", str(tokenizer_dir), "--prm-url", url, "--served-model", "prm",
        "--input", str(data), "--no-store", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [scored] = json.loads(result.stdout)["results"]
    scorer = VLLMPRM(url, make_format("medprm"), tokenizer=str(tokenizer_dir))
    expected = _expected(scorer)[0]
    assert [s["score"] for s in scored["steps"]] == pytest.approx(expected)
    assert handler.requests[0]["model"] == "prm"
