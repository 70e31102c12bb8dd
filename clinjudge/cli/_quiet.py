"""Keep third-party chatter off the terminal: stdout holds the run id, stderr our own messages.

Libraries under the runner print to stdout (litellm's red provider list, its "Give Feedback"
banner), log warnings through Python logging, or raise warnings. While a run executes, all of
that goes to the ``clinjudge.thirdparty`` logger at debug level; ``judge --verbose`` shows it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from clinjudge._util.secrets import redact_secrets

log = logging.getLogger("clinjudge.thirdparty")

# Loggers of libraries the runner calls; they log provider faults we already record per call.
_NOISY_LOGGERS = (
    "LiteLLM",
    "LiteLLM Router",
    "LiteLLM Proxy",
    "litellm",
    "httpx",
    "httpcore",
    "openai",
    "autogen_core",
    "autogen_agentchat",
    "autogen_ext",
    "aiohttp",
    "asyncio",
)


class _DebugWriter(io.TextIOBase):
    """A text stream whose complete lines become debug records."""

    def __init__(self, stream_name: str) -> None:
        self._name = stream_name
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if line.strip():
                log.debug("%s: %s", self._name, line)
        return len(text)

    def flush(self) -> None:
        if self._pending.strip():
            log.debug("%s: %s", self._name, self._pending)
        self._pending = ""


class _ToDebug(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        log.debug("%s: %s", record.name, record.getMessage())


def _silence_litellm() -> None:
    """litellm prints its provider list and help banners unless told not to."""
    module: Any = sys.modules.get("litellm")  # a ModuleType has no declared attributes
    if module is not None:
        module.suppress_debug_info = True
        module.set_verbose = False


@contextlib.contextmanager
def third_party_quiet() -> Iterator[None]:
    """Route third-party prints, log records and warnings to debug logging meanwhile."""
    handler = _ToDebug()
    saved: list[tuple[logging.Logger, list[logging.Handler], bool]] = []
    for name in _NOISY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, list(logger.handlers), logger.propagate))
        logger.handlers = [handler]
        logger.propagate = False
    writer = _DebugWriter("stdout")
    _silence_litellm()
    try:
        with warnings.catch_warnings():
            warnings.showwarning = lambda message, category, *_a, **_k: log.debug(
                "%s: %s", category.__name__, message
            )
            with contextlib.redirect_stdout(writer):
                yield
    finally:
        writer.flush()
        _silence_litellm()
        for logger, handlers, propagate in saved:
            logger.handlers = handlers
            logger.propagate = propagate


class _LibraryWarnings(logging.Handler):
    """The library logs, the CLI prints: clinjudge's warnings reach the user on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        from rich.markup import escape

        from clinjudge.cli._common import console

        console.print(f"[yellow]{escape(redact_secrets(record.getMessage()))}[/]", soft_wrap=True)


class _RedactSecrets(logging.Filter):
    """Debug lines can quote a provider's error, and so the key or URL it was sent."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact_secrets(record.getMessage()), None
        return True


def configure_verbose(verbose: bool) -> None:
    """Show clinjudge's warnings on stderr, and with ``--verbose`` its debug log (third-party
    chatter included).

    Args:
        verbose: Whether ``--verbose`` was given.
    """
    root = logging.getLogger("clinjudge")
    # One handler however often the app runs in a process (tests invoke it many times).
    root.handlers = [h for h in root.handlers if not isinstance(h, _LibraryWarnings)]
    if not verbose:
        handler: logging.Handler = _LibraryWarnings(logging.WARNING)
        root.addHandler(handler)
        if root.level == logging.NOTSET or root.level > logging.WARNING:
            root.setLevel(logging.WARNING)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_RedactSecrets())
    root = logging.getLogger("clinjudge")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
