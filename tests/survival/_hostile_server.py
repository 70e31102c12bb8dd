"""An endpoint that misbehaves on purpose: redirects, endless bodies, HTML pages.

Standard library only, bound to 127.0.0.1. Each ``POST`` is answered according to ``mode``:

* ``redirect``: ``307`` with ``Location: <location>`` (a redirect to another origin);
* ``huge``: ``200`` JSON-looking body of ``body_bytes`` bytes, chunked (no Content-Length)
  unless ``declare_length``; ``bytes_sent`` counts what the client actually took;
* ``html``: ``200 text/html`` page, like a captive portal or a proxy's error page;
* ``gzip_bomb``: ``200`` gzip body of ``body_bytes`` zeros once decompressed (about 1000 times
  smaller on the wire), with ``Content-Encoding: gzip``;
* ``gzip_completion``: an ordinary chat completion, gzip-compressed (what real providers send).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Mode = Literal["redirect", "huge", "html", "gzip_bomb", "gzip_completion"]
COMPLETION = {
    "id": "chatcmpl-gz",
    "object": "chat.completion",
    "created": 0,
    "model": "local-judge",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "compressed hello"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
HTML_PAGE = b"<!doctype html><html><body><h1>Sign in to the guest network</h1></body></html>"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet."""

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        host = self.server.hostile
        with host.lock:
            host.requests += 1
        if host.mode == "redirect":
            self._head(307, {"Location": host.location, "Content-Length": "0"})
        elif host.mode in ("gzip_bomb", "gzip_completion"):
            body = (
                _bomb(host.body_bytes)
                if host.mode == "gzip_bomb"
                else gzip.compress(json.dumps(COMPLETION).encode())
            )
            headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
            self._head(200, {**headers, "Content-Length": str(len(body))})
            with contextlib.suppress(OSError):
                self.wfile.write(body)
        elif host.mode == "html":
            self._head(200, {"Content-Type": "text/html", "Content-Length": str(len(HTML_PAGE))})
            self.wfile.write(HTML_PAGE)
        else:
            self._huge(host)

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _huge(self, host: HostileServer) -> None:
        headers = {"Content-Type": "application/json"}
        if host.declare_length:
            headers["Content-Length"] = str(host.body_bytes)
        else:
            headers["Transfer-Encoding"] = "chunked"
        self._head(200, headers)
        chunk = b'{"pad": "' + b"x" * (64 * 1024 - 9)
        with contextlib.suppress(OSError):
            sent = 0
            while sent < host.body_bytes:
                piece = chunk[: host.body_bytes - sent]
                if host.declare_length:
                    self.wfile.write(piece)
                else:
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                sent += len(piece)
                with host.lock:
                    host.bytes_sent = sent
            if not host.declare_length:
                self.wfile.write(b"0\r\n\r\n")


def _bomb(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"0" * (1 << 20)
    parts = [packer.compress(block) for _ in range(size // len(block))]
    return b"".join(parts) + packer.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, hostile: HostileServer):
        self.hostile = hostile
        super().__init__(("127.0.0.1", 0), _Handler)


class HostileServer:
    """Serve ``mode`` on 127.0.0.1 in a daemon thread (a context manager)."""

    def __init__(
        self,
        mode: Mode,
        *,
        location: str = "",
        body_bytes: int = 0,
        declare_length: bool = False,
    ):
        self.mode = mode
        self.location = location
        self.body_bytes = body_bytes
        self.declare_length = declare_length
        self.requests = 0
        self.bytes_sent = 0
        self.lock = threading.Lock()
        self._httpd: _Server | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> HostileServer:
        self._httpd = _Server(self)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()
