"""A fake OpenAI-compatible chat-completions server for tests and benchmarks.

Standard library only. It binds to 127.0.0.1, answers ``POST /v1/chat/completions``
(and ``/chat/completions``) plus ``GET /v1/models``, and can inject faults (HTTP errors,
hangs, connection resets, broken JSON, truncated or invalid rubric replies) either
from a per-request plan or from a scripted queue of replies.

In-process use::

    with FakeOpenAIServer(latency=0.01) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x")

As a separate process::

    python -m tests.fake_openai --port 0 --latency 0.1 [--fault-rate P --seed S] [--rpm-limit N]

prints ``READY http://127.0.0.1:PORT/v1`` and serves until SIGTERM/SIGINT, then prints
``STATS requests=... rate_limited=... max_in_60s=...``.

The Files and Batches endpoints (``/v1/files``, ``/v1/batches``, and Azure's ``/openai/...``
forms) run each uploaded request line through the same chat logic; see :class:`FakeBatchAPI`.

With ``rpm_limit`` the server enforces a requests-per-minute limit like a provider: a request
arriving when ``rpm_limit`` requests were accepted in the last 60 s is answered 429 at once with
Retry-After (until the oldest leaves the window) and counted in ``rate_limited``.

Structured output: with ``reject_json_schema`` a request whose ``response_format`` is
``json_schema`` is answered 400 like a server without schema support (counted in
``schema_rejections``); with ``check_schemas`` such a request's schema must follow OpenAI's strict
rules (else 400 "Invalid schema for response_format", like OpenAI) and every reply sent for it is
validated against it, problems collected in ``schema_errors`` (needs ``jsonschema``, imported
only then).

Prompt caching: with ``prompt_cache_min`` set, every reply reports
``usage.prompt_tokens_details.cached_tokens`` like OpenAI: the longest prefix (in the server's
tokens, whitespace-separated words across the messages in order) that the prompt shares with
any earlier answered request, when at least ``prompt_cache_min`` long, counted in steps of
``prompt_cache_step`` beyond that minimum; else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import random
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, get_args

__all__ = [
    "PDSQI9_KEYS",
    "reply_schema_errors",
    "requested_json_schema",
    "strict_schema_problems",
    "LIKERT_KEYS",
    "Fault",
    "FaultKind",
    "FakeOpenAIServer",
    "FakeBatchAPI",
    "pdsqi9_scores",
    "random_faults",
    "make_fake_openai_fixture",
    "main",
]

PDSQI9_KEYS = [
    "citation",
    "accurate",
    "thorough",
    "useful",
    "organized",
    "comprehensible",
    "succinct",
    "abstraction",
    "synthesized",
    "voice_summ",
    "voice_note",
]
LIKERT_KEYS = PDSQI9_KEYS[:7]

FaultKind = Literal[
    "rate_limit",
    "server_error",
    "hang",
    "reset",
    "malformed_json",
    "truncated",
    "wrong_keys",
    "out_of_range",
    "empty_choices",
    "bad_gateway",
    "unavailable",
    "absurd_usage",
]
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)

Body = dict[str, Any]
Responder = Callable[[Body], str | dict[str, Any]]
FaultPlan = Sequence["Fault | None"] | Callable[[int, Body], "Fault | None"]

# Renames used by the ``wrong_keys`` fault: none of the targets is a PDSQI-9 key.
_WRONG_KEYS = {
    "citation": "citations_score",
    "accurate": "accuracy_score",
    "thorough": "thoroughness_score",
    "useful": "usefulness_score",
    "organized": "organization_score",
    "comprehensible": "clarity_score",
    "succinct": "brevity_score",
    "abstraction": "needs_abstraction",
    "synthesized": "synthesis_score",
    "voice_summ": "stigma_summary",
    "voice_note": "stigma_note",
    "rationale": "explanation",
}

# HTTP error faults: kind -> (status, OpenAI error type, message).
_HTTP_ERRORS: dict[str, tuple[int, str, str]] = {
    "rate_limit": (429, "rate_limit_error", "Rate limit reached (fake server)."),
    "server_error": (500, "server_error", "The server had an error (fake server)."),
    "bad_gateway": (502, "server_error", "Bad gateway (fake server)."),
    "unavailable": (503, "server_error", "The engine is currently overloaded (fake server)."),
}

_NO_SCRIPT = object()
_MALFORMED_BODY = b'{"id": "chatcmpl-fake", "object": "chat.completion", "choices": [{'  # cut


def pdsqi9_scores(seed_text: str) -> dict[str, Any]:
    """Return a deterministic, gate-valid PDSQI-9 rating derived from a hash of ``seed_text``."""
    digest = hashlib.blake2b(seed_text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    scores: dict[str, Any] = {key: digest[i] % 5 + 1 for i, key in enumerate(LIKERT_KEYS)}
    abstraction = digest[7] & 1
    scores["abstraction"] = abstraction
    scores["synthesized"] = digest[8] % 5 + 1 if abstraction else None
    scores["voice_summ"] = digest[9] & 1
    scores["voice_note"] = digest[10] & 1
    scores["rationale"] = f"Fake deterministic rating {digest[11:14].hex()}."
    return scores


@dataclass
class Fault:
    """One injected failure; see the module docstring of :class:`FakeOpenAIServer`."""

    kind: FaultKind
    retry_after: float | None = None
    hang_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {FAULT_KINDS}")


def random_faults(rate: float, seed: int) -> Callable[[int, Body], Fault | None]:
    """Fault plan drawing from {rate_limit, server_error, truncated, malformed_json}.

    Each request index gets a fault with probability ``rate``. Draws come from
    ``random.Random(seed)`` in index order, so the plan is deterministic per index
    no matter in which order concurrent requests arrive.
    """
    choices = (
        Fault("rate_limit", retry_after=0.05),
        Fault("server_error"),
        Fault("truncated"),
        Fault("malformed_json"),
    )
    rng = random.Random(seed)
    plan: list[Fault | None] = []
    lock = threading.Lock()

    def pick(index: int, _body: Body) -> Fault | None:
        with lock:
            while len(plan) <= index:
                hit = rng.random() < rate
                choice = rng.choice(choices)
                plan.append(choice if hit else None)
            return plan[index]

    return pick


def _message_text(message: Any) -> str:
    """Plain text of one chat message (string content or a list of text parts)."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _last_user_text(body: Body) -> str:
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return _message_text(message)
    return ""


def _default_responder(body: Body) -> dict[str, Any]:
    return pdsqi9_scores(_last_user_text(body))


def _as_content(reply: str | dict[str, Any]) -> str:
    if isinstance(reply, str):
        return reply
    if isinstance(reply, dict):
        return json.dumps(reply)
    raise TypeError(f"responder must return str or dict, got {type(reply).__name__}")


def _error_body(
    message: str, err_type: str, code: str | int | None, param: str | None = None
) -> bytes:
    payload = {"error": {"message": message, "type": err_type, "param": param, "code": code}}
    return json.dumps(payload).encode()


def requested_json_schema(body: Body) -> dict[str, Any] | None:
    """The ``json_schema`` block of a request's ``response_format``, or None."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        block = fmt.get("json_schema")
        return block if isinstance(block, dict) else {}
    return None


_STRICT_UNSUPPORTED = ("oneOf", "allOf", "not", "if", "then", "else", "patternProperties")


def strict_schema_problems(schema: Any, where: str = "root") -> list[str]:
    """Where a schema breaks OpenAI's strict structured-output rules (empty: none).

    Every object lists all its properties in ``required`` and sets ``additionalProperties:
    false``; the root is an object; a few composition keywords are not supported.
    """
    if not isinstance(schema, dict):
        return [f"{where}: schema is not an object"]
    problems = [f"{where}: '{k}' is not permitted" for k in _STRICT_UNSUPPORTED if k in schema]
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if where == "root" and kinds != ["object"]:
        problems.append("root: schema must be a JSON object")
    if "object" in kinds:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            problems.append(f"{where}: an object needs 'properties'")
            properties = {}
        if schema.get("additionalProperties") is not False:
            problems.append(f"{where}: 'additionalProperties' is required to be false")
        if sorted(schema.get("required") or []) != sorted(properties):
            problems.append(f"{where}: 'required' must list every key in 'properties'")
        for key, sub in properties.items():
            problems += strict_schema_problems(sub, f"{where}.{key}")
    if "array" in kinds:
        problems += strict_schema_problems(schema.get("items"), f"{where}[]")
    for key in ("anyOf",):
        for index, sub in enumerate(schema.get(key) or []):
            problems += strict_schema_problems(sub, f"{where}.{key}[{index}]")
    return problems


def reply_schema_errors(content: str, schema: dict[str, Any]) -> list[str]:
    """Why a reply's text does not validate against a JSON Schema (empty: it does)."""
    import jsonschema  # only the schema checks need it

    try:
        value = json.loads(content)
    except ValueError:
        return ["the reply is not JSON"]
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or 'root'}: {e.message}" for e in
            validator.iter_errors(value)]  # fmt: skip


class _HTTPServer(ThreadingHTTPServer):
    """Threaded server: daemon handler threads, no join on close, deep accept backlog."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], fake: FakeOpenAIServer) -> None:
        self.fake = fake
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet about clients that disconnect; report anything else."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError | ValueError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Request handler; all state lives on ``self.server.fake``."""

    protocol_version = "HTTP/1.1"
    server_version = "FakeOpenAI/1.0"
    disable_nagle_algorithm = True
    server: _HTTPServer

    # -- plumbing -----------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Silence per-request logging."""

    def _send(
        self,
        status: int,
        body: bytes,
        extra_headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        """Write status line, headers and body in a single socket write."""
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        lines = [
            f"HTTP/1.1 {status} {phrase}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            f"Date: {self.date_time_string()}",
        ]
        if self.close_connection:
            lines.append("Connection: close")
        for name, value in (extra_headers or {}).items():
            lines.append(f"{name}: {value}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.wfile.write(head + body)

    def _send_json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode())

    def _send_error(
        self, status: int, message: str, err_type: str = "invalid_request_error"
    ) -> None:
        self._send(status, _error_body(message, err_type, None))

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    # -- routes -------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
                    ],
                },
            )
        elif not self.server.fake.batch_api.handle(self, "GET", path, b""):
            self._send_error(404, f"Unknown path {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        raw = self._read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        if self.server.fake.batch_api.handle(self, "POST", path, raw):  # Files and Batches
            return
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send_error(404, f"Unknown path {self.path}")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send_error(400, "Request body is not valid JSON.")
            return
        if not isinstance(body, dict):
            self._send_error(400, "Request body must be a JSON object.")
            return
        self.server.fake._handle_chat(self, body)


class FakeOpenAIServer:
    """Fake OpenAI chat-completions endpoint on 127.0.0.1 with scripted replies and faults.

    ``responder(body)`` builds the reply content (a ``str`` is sent verbatim, a ``dict``
    is JSON-encoded); by default it is ``pdsqi9_scores(<last user message text>)``.
    ``faults`` is a sequence indexed by the 0-based chat request number or a callable
    ``(index, body) -> Fault | None``. Items queued with :meth:`script` take precedence
    over both. ``latency`` seconds are slept before every answer, faults included.
    ``rpm_limit`` enforces a sliding 60 s requests-per-minute limit (429 with Retry-After,
    counted in ``rate_limited``; such requests skip the latency and the fault plan).
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        latency: float = 0.0,
        faults: FaultPlan | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        rpm_limit: int | None = None,
        reject_json_schema: bool = False,
        check_schemas: bool = False,
        prompt_cache_min: int | None = None,
        prompt_cache_step: int = 1,
    ) -> None:
        self.responder = responder
        self.prompt_cache_min = prompt_cache_min
        """Report cached prompt tokens (a shared prefix at least this long); None: never."""
        self.prompt_cache_step = prompt_cache_step
        self._seen_prompts: list[list[str]] = []
        self.rpm_limit = rpm_limit
        self.reject_json_schema = reject_json_schema
        """Answer 400 to ``response_format: json_schema`` (a server without schema support)."""
        self.check_schemas = check_schemas
        """Hold schema requests to OpenAI's strict rules and validate replies against them."""
        self.schema_rejections = 0
        self.schema_errors: list[str] = []
        self.rate_limited = 0
        self.accepted_times: list[float] = []
        self._window: deque[float] = deque()
        self.latency = latency
        self.faults = faults
        self.host = host
        self.port = port
        self.requests: list[Body] = []
        self.request_headers: list[dict[str, str]] = []
        """Each chat request's headers, in the order of :attr:`requests`."""
        self._lock = threading.Lock()
        self._script: deque[str | dict[str, Any] | Fault] = deque()
        self._next_index = 0
        self._connections: set[socket.socket] = set()
        self._connections_opened = 0
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.batch_api = FakeBatchAPI(self)  # Files and Batches endpoints

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        """Bind and serve in a daemon thread; returns ``self``."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer((self.host, self.port), self)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-openai-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake sleeping handlers and drop open connections. Never blocks long."""
        httpd = self._httpd
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- public state ---------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (valid once started)."""
        if self._httpd is None:
            raise RuntimeError("FakeOpenAIServer is not started")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def request_count(self) -> int:
        """Number of chat-completion requests received so far."""
        with self._lock:
            return len(self.requests)

    @property
    def connections_opened(self) -> int:
        """Number of TCP connections accepted so far (to check keep-alive reuse)."""
        with self._lock:
            return self._connections_opened

    def max_in_window(self, seconds: float = 60.0) -> int:
        """Most requests accepted (not rate limited) within any ``seconds`` window."""
        with self._lock:
            times = list(self.accepted_times)
        best, lo = 0, 0
        for hi, t in enumerate(times):
            while times[lo] <= t - seconds:
                lo += 1
            best = max(best, hi - lo + 1)
        return best

    def _over_rpm(self) -> float | None:
        """Under the lock: None when a request may pass (and record it), else Retry-After."""
        now = time.monotonic()
        if self.rpm_limit is not None:
            window = self._window
            while window and window[0] <= now - 60.0:
                window.popleft()
            if len(window) >= self.rpm_limit:
                self.rate_limited += 1
                return max(window[0] + 60.0 - now, 0.001)
            window.append(now)
        self.accepted_times.append(now)
        return None

    def script(self, replies: Sequence[str | dict[str, Any] | Fault]) -> None:
        """Queue replies consumed in order before ``responder``/``faults`` apply."""
        with self._lock:
            self._script.extend(replies)

    # -- internals ------------------------------------------------------------------

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
                self._connections_opened += 1
            else:
                self._connections.discard(conn)

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def _fault_for(self, index: int, body: Body) -> Fault | None:
        plan = self.faults
        if plan is None:
            return None
        if callable(plan):
            return plan(index, body)
        return plan[index] if index < len(plan) else None

    def _normal_content(self, body: Body) -> str:
        responder = self.responder or _default_responder
        return _as_content(responder(body))

    def _reply_dict(self, body: Body, content: str) -> dict[str, Any]:
        try:
            parsed = json.loads(content)
        except ValueError:
            parsed = None
        return parsed if isinstance(parsed, dict) else pdsqi9_scores(_last_user_text(body))

    def _completion(
        self, index: int, body: Body, content: str, finish_reason: str = "stop"
    ) -> dict[str, Any]:
        messages = body.get("messages")
        prompt_tokens = 0
        if isinstance(messages, list):
            prompt_tokens = sum(len(_message_text(m).split()) for m in messages)
        prompt_tokens = max(prompt_tokens, 1)
        completion_tokens = max(len(content.split()), 1)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if self.prompt_cache_min is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self._cached_prefix(messages)}
        return {
            "id": f"chatcmpl-fake-{index}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or "fake-model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": usage,
        }

    def _cached_prefix(self, messages: Any) -> int:
        """Tokens of the longest prefix shared with an earlier prompt, as a provider's prompt
        cache would serve them (``prompt_cache_min``, ``prompt_cache_step``)."""
        words = [w for m in messages for w in _message_text(m).split()] if messages else []
        minimum, step = self.prompt_cache_min or 0, max(self.prompt_cache_step, 1)
        with self._lock:
            longest = 0
            for seen in self._seen_prompts:
                shared = 0
                for a, b in zip(seen, words, strict=False):
                    if a != b:
                        break
                    shared += 1
                longest = max(longest, shared)
            self._seen_prompts.append(words)
        if longest < minimum or longest == 0:
            return 0
        return minimum + (longest - minimum) // step * step

    def _handle_chat(self, handler: _Handler, body: Body) -> None:
        """Record the request, pick reply or fault, and answer."""
        streaming = bool(body.get("stream"))
        with self._lock:
            self.requests.append(body)
            # A batch line has no HTTP request of its own (its handler is a stand-in).
            headers = getattr(handler, "headers", None)
            self.request_headers.append(dict(headers.items()) if headers is not None else {})
            retry_after = self._over_rpm()
        if retry_after is not None:
            headers = {
                "Retry-After": f"{retry_after:.3f}",
                "retry-after-ms": str(max(int(retry_after * 1000), 1)),
            }
            message = "Rate limit reached for requests per minute (fake server)."
            handler._send(
                429, _error_body(message, "rate_limit_error", "rate_limit_exceeded"), headers
            )
            return
        if self._refuse_schema(handler, body):
            return
        with self._lock:
            index = self._next_index
            self._next_index += 1
            scripted: Any = _NO_SCRIPT
            if not streaming and self._script:
                scripted = self._script.popleft()

        if streaming:
            self._sleep(self.latency)
            handler._send_error(400, "stream=true is not supported by the fake server.")
            return

        fault: Fault | None
        content: str | None = None
        if isinstance(scripted, Fault):
            fault = scripted
        elif scripted is not _NO_SCRIPT:
            fault = None
            content = _as_content(scripted)
        else:
            fault = self._fault_for(index, body)

        self._sleep(self.latency)

        if fault is not None and self._apply_transport_fault(handler, fault):
            return
        try:
            if content is None:
                content = self._normal_content(body)
        except Exception as exc:  # a broken responder should surface as a 500, not a hang
            handler._send_error(500, f"responder failed: {exc!r}", "server_error")
            return

        if fault is None:
            self._check_reply(body, content)
            handler._send_json(200, self._completion(index, body, content))
            return
        kind = fault.kind
        if kind == "malformed_json":
            handler._send(200, _MALFORMED_BODY)
        elif kind == "truncated":
            cut = content[: max(1, int(len(content) * 0.6))]
            handler._send_json(200, self._completion(index, body, cut, finish_reason="length"))
        elif kind == "wrong_keys":
            reply = self._reply_dict(body, content)
            renamed = {_WRONG_KEYS.get(k, f"{k}_x"): v for k, v in reply.items()}
            handler._send_json(200, self._completion(index, body, json.dumps(renamed)))
        elif kind == "out_of_range":
            reply = dict(self._reply_dict(body, content))
            reply.update({"accurate": 9, "thorough": 0, "succinct": 9})
            handler._send_json(200, self._completion(index, body, json.dumps(reply)))
        elif kind == "empty_choices":
            payload = self._completion(index, body, content)
            payload["choices"] = []
            handler._send_json(200, payload)
        elif kind == "absurd_usage":  # a valid reply whose usage no database column can hold
            payload = self._completion(index, body, content)
            payload["usage"]["prompt_tokens"] = 10**12
            handler._send_json(200, payload)
        else:  # pragma: no cover - guarded by Fault.__post_init__
            handler._send_error(500, f"unhandled fault {kind}", "server_error")

    def _refuse_schema(self, handler: _Handler, body: Body) -> bool:
        """Answer 400 to a schema request this server will not take; True when it did."""
        block = requested_json_schema(body)
        if block is None:
            return False
        if self.reject_json_schema:
            with self._lock:
                self.schema_rejections += 1
            message = (
                "response_format type 'json_schema' is not supported by this server "
                "(fake server); use 'json_object' or 'text'."
            )
            handler._send(
                400, _error_body(message, "invalid_request_error", None, "response_format")
            )
            return True
        if self.check_schemas:
            problems = strict_schema_problems(block.get("schema"))
            if block.get("strict") is not True:
                problems.append("strict must be true")
            if problems:
                name = block.get("name")
                message = f"Invalid schema for response_format '{name}': " + "; ".join(problems)
                with self._lock:
                    self.schema_errors.append(message)
                handler._send(
                    400, _error_body(message, "invalid_request_error", None, "response_format")
                )
                return True
        return False

    def _check_reply(self, body: Body, content: str) -> None:
        """Validate a reply against the schema its request asked for (``check_schemas``)."""
        block = requested_json_schema(body)
        if not self.check_schemas or block is None:
            return
        errors = reply_schema_errors(content, block.get("schema") or {})
        if errors:
            with self._lock:
                self.schema_errors.append(f"reply for {block.get('name')!r}: " + "; ".join(errors))

    def _apply_transport_fault(self, handler: _Handler, fault: Fault) -> bool:
        """Handle faults that need no reply content; return True when handled."""
        kind = fault.kind
        if kind in _HTTP_ERRORS:
            status, err_type, message = _HTTP_ERRORS[kind]
            headers: dict[str, str] = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = f"{fault.retry_after:g}"
                headers["retry-after-ms"] = str(int(fault.retry_after * 1000))
            code = "rate_limit_exceeded" if kind == "rate_limit" else None
            handler._send(status, _error_body(message, err_type, code), headers)
            return True
        if kind == "hang":
            self._sleep(fault.hang_seconds)
            handler.close_connection = True
            return True
        if kind == "reset":
            handler.close_connection = True
            conn = handler.connection
            try:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                handler.rfile.close()
                conn.close()  # linger 0: the kernel sends RST instead of FIN
            except OSError:
                pass
            return True
        return False


# ==== Files and Batches endpoints (provider batch APIs) ====================================
# Owned by the batch-API work (issue #7, part 4). Every uploaded request line goes through the
# same chat logic as a live request (responder, script, fault plan, rpm limit), so a fault that
# would fail a live call becomes an error-file line instead.


class _NoSocket:
    """What a batch line has instead of a connection: transport faults cannot reset it."""

    def setsockopt(self, *args: Any) -> None:
        raise OSError("no connection in a batch")


class _CapturedReply:
    """Stands in for a request handler so one batch line can reuse the chat-completion logic."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.body = b""
        self.close_connection = False
        self.connection = _NoSocket()

    def _send(self, status: int, body: bytes, *args: Any, **kwargs: Any) -> None:
        self.status, self.body = status, body

    def _send_json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode())

    def _send_error(self, status: int, message: str, err_type: str = "invalid_request_error"):
        self._send(status, _error_body(message, err_type, None))


class FakeBatchAPI:
    """Files and Batches endpoints of a :class:`FakeOpenAIServer` (``/v1/...`` and Azure's
    ``/openai/...``).

    A batch reads ``validating`` when created, ``in_progress`` on the next polls, and runs all
    its lines and reads ``completed`` on poll number ``polls_to_complete``. With
    ``expire_after`` set, only that many lines run; the rest end in the error file as
    ``batch_expired`` and the batch reads ``expired``.
    """

    def __init__(self, fake: FakeOpenAIServer) -> None:
        self.fake = fake
        self.polls_to_complete = 2
        self.expire_after: int | None = None
        # The providers' limits on one batch input file (OpenAI: 200 MB, 50,000 requests).
        self.max_file_bytes = 200 * 1000 * 1000
        self.max_requests = 50_000
        # OpenAI's enqueued-token limit per model and organization (None: no limit): a batch
        # whose prompt tokens (this server's count: words) pass it fails as a whole.
        self.enqueued_token_limit: int | None = None
        self.enqueued_by_others = 0  # tokens other batches of the organization hold
        # A provider failing every batch whole at creation, its message naming the request's
        # Authorization header where the template says {authorization} (as OpenAI's "Incorrect
        # API key provided" does with the key) and the key alone where it says {key}.
        self.fail_batches_with: str | None = None
        # Rewrites result records as written to the output and error files: called with each
        # record's number in its file and the record; returns the raw text to write in its
        # place (None: the record as JSON). Lets a test write any line a hostile provider could.
        self.result_hook: Callable[[int, dict[str, Any]], str | None] | None = None
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.uploads: list[str] = []
        self.paths: list[str] = []  # each Files or Batches request's path, query included
        self.polls: dict[str, int] = {}
        self._lock = threading.Lock()
        self._counter = 0

    # -- public helpers for tests ------------------------------------------------------------

    def uploaded_lines(self) -> list[dict[str, Any]]:
        """Every request line of every uploaded batch input file, in upload order."""
        lines = []
        for file_id in self.uploads:
            text = self.files[file_id]["data"].decode("utf-8")
            lines.extend(json.loads(raw) for raw in text.splitlines() if raw.strip())
        return lines

    # -- routing --------------------------------------------------------------------------

    def handle(self, handler: _Handler, method: str, path: str, raw: bytes) -> bool:
        """Answer a Files or Batches request; False when the path is not one of ours."""
        for prefix in ("/openai", "/v1"):
            if path.startswith(prefix + "/"):
                path = path[len(prefix) :]
                break
        parts = path.strip("/").split("/")
        if not parts or parts[0] not in ("files", "batches"):
            return False
        self.paths.append(handler.path)
        route = (method, parts[0], len(parts))
        if route == ("POST", "files", 1):
            self._upload(handler, raw)
        elif route == ("GET", "files", 2):
            self._answer_file(handler, parts[1], content=False)
        elif route == ("GET", "files", 3) and parts[2] == "content":
            self._answer_file(handler, parts[1], content=True)
        elif route == ("POST", "batches", 1):
            self._create(handler, raw)
        elif route == ("GET", "batches", 1):
            with self._lock:
                data = list(reversed(self.batches.values()))
            handler._send_json(200, {"object": "list", "data": data, "has_more": False})
        elif route == ("GET", "batches", 2):
            self._retrieve(handler, parts[1])
        elif route == ("POST", "batches", 3) and parts[2] == "cancel":
            self._cancel(handler, parts[1])
        else:
            handler._send_error(404, f"Unknown path {handler.path}")
        return True

    # -- files ----------------------------------------------------------------------------

    def _new_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}-fake-{self._counter}"

    def _store_file(self, data: bytes, purpose: str, filename: str) -> dict[str, Any]:
        with self._lock:
            file_id = self._new_id("file")
            record = {
                "id": file_id,
                "object": "file",
                "bytes": len(data),
                "created_at": int(time.time()),
                "filename": filename,
                "purpose": purpose,
                "status": "processed",
                "data": data,
            }
            self.files[file_id] = record
        return record

    @staticmethod
    def _public(record: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in record.items() if k != "data"}

    def _upload(self, handler: _Handler, raw: bytes) -> None:
        from email.parser import BytesParser
        from email.policy import HTTP

        head = f"Content-Type: {handler.headers.get('Content-Type', '')}\r\n\r\n".encode()
        message = BytesParser(policy=HTTP).parsebytes(head + raw)
        fields: dict[str, Any] = {}
        filename = "upload.jsonl"
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if part.get_filename():
                filename = part.get_filename()
            fields[str(name)] = part.get_payload(decode=True)
        if "file" not in fields or "purpose" not in fields:
            handler._send_error(400, "multipart upload needs 'file' and 'purpose' fields")
            return
        purpose = fields["purpose"].decode()
        if purpose == "batch" and len(fields["file"]) > self.max_file_bytes:
            handler._send_error(
                400, f"File is too large: a batch input file may be {self.max_file_bytes} bytes"
            )
            return
        record = self._store_file(fields["file"], purpose, filename)
        if purpose == "batch":
            with self._lock:
                self.uploads.append(record["id"])
        handler._send_json(200, self._public(record))

    def _answer_file(self, handler: _Handler, file_id: str, *, content: bool) -> None:
        with self._lock:
            record = self.files.get(file_id)
        if record is None:
            handler._send_error(404, f"No such File object: {file_id}")
        elif content:
            handler._send(200, record["data"], content_type="application/octet-stream")
        else:
            handler._send_json(200, self._public(record))

    # -- batches --------------------------------------------------------------------------

    def _create(self, handler: _Handler, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            handler._send_error(400, "Request body is not valid JSON.")
            return
        with self._lock:
            source = self.files.get(str(body.get("input_file_id")))
            if source is None:
                handler._send_error(404, f"No such File object: {body.get('input_file_id')}")
                return
            total = sum(1 for raw_line in source["data"].splitlines() if raw_line.strip())
            if total > self.max_requests:
                handler._send_error(
                    400, f"A batch may hold {self.max_requests} requests; the file has {total}"
                )
                return
            batch_id = self._new_id("batch")
            failure = self._whole_batch_failure(handler)
            batch = {
                "id": batch_id,
                "object": "batch",
                "endpoint": body.get("endpoint"),
                "errors": None,
                "input_file_id": source["id"],
                "completion_window": body.get("completion_window"),
                "status": "validating",
                "output_file_id": None,
                "error_file_id": None,
                "created_at": int(time.time()),
                "request_counts": {"total": total, "completed": 0, "failed": 0},
                "metadata": body.get("metadata"),
            }
            if failure is not None:
                batch.update(status="failed", failed_at=int(time.time()), errors=failure)
            self.batches[batch_id] = batch
            self.polls[batch_id] = 0
        handler._send_json(200, batch)

    def _whole_batch_failure(self, handler: _Handler) -> dict[str, Any] | None:
        """The errors of a batch failed whole at creation (``fail_batches_with``), if set."""
        if self.fail_batches_with is None:
            return None
        authorization = handler.headers.get("Authorization", "")
        key = authorization.removeprefix("Bearer ")
        message = self.fail_batches_with.format(authorization=authorization, key=key)
        error = {"code": "invalid_api_key", "line": None, "message": message, "param": None}
        return {"object": "list", "data": [error]}

    def _retrieve(self, handler: _Handler, batch_id: str) -> None:
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                handler._send_error(404, f"No such Batch object: {batch_id}")
                return
            self.polls[batch_id] += 1
            due = self.polls[batch_id] >= self.polls_to_complete
            refused = batch["status"] == "validating" and self._over_token_queue(batch)
            if batch["status"] in ("validating", "in_progress") and not due:
                batch["status"] = "in_progress"
                batch["in_progress_at"] = batch.get("in_progress_at") or int(time.time())
            run = not refused and batch["status"] in ("validating", "in_progress") and due
            if run:
                batch["status"] = "finalizing"
        if run:
            self._run(batch)
        with self._lock:
            handler._send_json(200, dict(batch))

    def _over_token_queue(self, batch: dict[str, Any]) -> bool:
        """Fail a batch whose prompt tokens pass the enqueued-token limit, as OpenAI does at
        validation (call with the lock held)."""
        limit = self.enqueued_token_limit
        if limit is None:
            return False
        source = self.files[batch["input_file_id"]]["data"].decode("utf-8")
        tokens = sum(
            len(_message_text(m).split())
            for raw in source.splitlines()
            if raw.strip()
            for m in json.loads(raw)["body"]["messages"]
        )
        if tokens + self.enqueued_by_others <= limit:
            return False
        model = json.loads(source.splitlines()[0])["body"].get("model", "model")
        message = (
            f"Enqueued token limit reached for {model} in organization org-fake. Limit: "
            f"{limit:,} enqueued tokens. Please try again once some in_progress batches have "
            "been completed."
        )
        error = {"code": "token_limit_exceeded", "line": None, "message": message, "param": None}
        batch.update(status="failed", failed_at=int(time.time()))
        batch["errors"] = {"object": "list", "data": [error]}
        return True

    def _cancel(self, handler: _Handler, batch_id: str) -> None:
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                handler._send_error(404, f"No such Batch object: {batch_id}")
                return
            if batch["status"] in ("validating", "in_progress"):
                batch["status"] = "cancelled"
                batch["cancelled_at"] = int(time.time())
        handler._send_json(200, dict(batch))

    def _run_line(self, line: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Send one request line through the chat logic; (answered with 200, result record)."""
        capture = _CapturedReply()
        self.fake._handle_chat(capture, line.get("body") or {})  # type: ignore[arg-type]
        record: dict[str, Any] = {
            "id": f"batch_req_{self._new_id('r')}",
            "custom_id": line.get("custom_id"),
            "response": None,
            "error": None,
        }
        try:
            payload = json.loads(capture.body) if capture.body else None
        except ValueError:
            payload = None
        if capture.status is None:
            record["error"] = {"code": "server_error", "message": "connection lost (fake)"}
            return False, record
        if payload is None:
            payload = {"error": {"message": "unreadable upstream reply (fake)", "type": "server"}}
            record["response"] = {"status_code": 500, "request_id": "fake", "body": payload}
            return False, record
        record["response"] = {"status_code": capture.status, "request_id": "fake", "body": payload}
        return capture.status == 200, record

    def _run(self, batch: dict[str, Any]) -> None:
        source = self.files[batch["input_file_id"]]["data"].decode("utf-8")
        lines = [json.loads(raw) for raw in source.splitlines() if raw.strip()]
        answered, failed = [], []
        for number, line in enumerate(lines):
            if self.expire_after is not None and number >= self.expire_after:
                message = "This request could not be executed before the window expired."
                failed.append(
                    {
                        "id": f"batch_req_{self._new_id('r')}",
                        "custom_id": line.get("custom_id"),
                        "response": None,
                        "error": {"code": "batch_expired", "message": message},
                    }
                )
                continue
            ok, record = self._run_line(line)
            (answered if ok else failed).append(record)
        status = "expired" if self.expire_after is not None else "completed"
        out = self._write_results(answered, "output") if answered else None
        err = self._write_results(failed, "error") if failed else None
        with self._lock:
            batch.update(
                status=status,
                output_file_id=out,
                error_file_id=err,
                request_counts={
                    "total": len(lines),
                    "completed": len(answered),
                    "failed": len(failed),
                },
            )
            batch[f"{status}_at"] = int(time.time())

    def _write_results(self, records: list[dict[str, Any]], kind: str) -> str:
        hook = self.result_hook
        lines = [
            (hook(number, record) if hook is not None else None) or json.dumps(record)
            for number, record in enumerate(records)
        ]
        data = "".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass")
        return self._store_file(data, "batch_output", f"batch_{kind}.jsonl")["id"]


# ==== end of Files and Batches endpoints ===================================================


def make_fake_openai_fixture(
    name: str = "fake_openai", *, scope: str = "function", **server_kwargs: Any
) -> Any:
    """Build a pytest fixture yielding a started :class:`FakeOpenAIServer`.

    Usage in a test module or conftest: ``fake_openai = make_fake_openai_fixture()``;
    ``server_kwargs`` go to the constructor (e.g. ``latency=0.01``).
    """
    import pytest  # imported lazily so the server itself stays stdlib-only

    @pytest.fixture(name=name, scope=scope)  # type: ignore[misc]
    def _fixture() -> Iterator[FakeOpenAIServer]:
        with FakeOpenAIServer(**server_kwargs) as server:
            yield server

    return _fixture


def serve_until_signal(server: FakeOpenAIServer) -> None:
    """Start ``server``, print ``READY <base_url>`` and serve until SIGTERM or SIGINT.

    Args:
        server: The server (not started yet); it is stopped before this returns.
    """
    done = threading.Event()

    def _on_signal(_signum: int, _frame: Any) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    server.start()
    print(f"READY {server.base_url}", flush=True)
    try:
        while not done.wait(0.5):
            pass
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: serve until SIGTERM/SIGINT after printing ``READY <base_url>``."""
    parser = argparse.ArgumentParser(description="Fake OpenAI chat-completions server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="probability of a fault")
    parser.add_argument("--seed", type=int, default=0, help="seed for --fault-rate")
    parser.add_argument(
        "--rpm-limit", type=int, default=None, help="answer 429 beyond N requests per minute"
    )
    args = parser.parse_args(argv)

    faults = random_faults(args.fault_rate, args.seed) if args.fault_rate > 0 else None
    server = FakeOpenAIServer(
        latency=args.latency,
        faults=faults,
        host=args.host,
        port=args.port,
        rpm_limit=args.rpm_limit,
    )
    try:
        serve_until_signal(server)
    finally:
        print(
            f"STATS requests={server.request_count} rate_limited={server.rate_limited} "
            f"max_in_60s={server.max_in_window(60.0)}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
