"""OpenAI's API (``openai/<model>``) through autogen-ext's client, or any OpenAI-compatible
server at a ``base_url`` through our direct client."""

from __future__ import annotations

import urllib.parse
from typing import Any

from clinjudge.judges.clients._client import ModelClient
from clinjudge.judges.clients._http_guard import guarded_httpx_args
from clinjudge.judges.clients._settings import ModelSettings, sampling_args
from clinjudge.judges.clients.providers._contract import Provider, prepare_endpoint
from clinjudge.judges.clients.providers._registry import register_provider
from clinjudge.judges.clients.providers.compatible import direct_client
from clinjudge.rubrics import Rubric


def autogen_client_args(settings: ModelSettings) -> dict[str, Any]:
    """Arguments every autogen-ext OpenAI-family client is built with.

    Args:
        settings: Model and sampling settings.
    """
    # httpx's connection pool scans every connection on each request (O(connections) work
    # with a socket poll each), which dominates CPU at high concurrency; aiohttp's pool does not.
    import openai

    http_client = openai.DefaultAioHttpClient(
        timeout=settings.timeout, **guarded_httpx_args(settings.max_reply_bytes)
    )
    # Retries belong to our runner (so every attempt is recorded), never to the SDK.
    return {
        "max_retries": 0,
        "timeout": settings.timeout,
        "include_name_in_message": False,
        "http_client": http_client,
        **sampling_args(settings),
    }


def split_query(url: str | None) -> tuple[str | None, dict[str, str] | None]:
    """A base URL without its query string, and the query's parameters: the SDK appends each
    endpoint's path to the base URL, so a query left there would end up mid-path (a direct
    run keeps it at the end of every request's URL; the SDK does that with default_query).

    Args:
        url: The base URL, if any.
    """
    if url is None or "?" not in url:
        return url, None
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    return urllib.parse.urlunsplit(parts._replace(query="")), query or None


BATCH_TIMEOUT_S = 300.0
"""Least timeout of the batch control-plane calls (upload, create, poll)."""


class OpenAIProvider(Provider):
    """``openai/<model>``: api.openai.com (key required) or a server at ``base_url``."""

    names = ("openai",)
    key_env = "OPENAI_API_KEY"
    endpoint_env = ("OPENAI_BASE_URL", "OPENAI_API_BASE")
    prefix_cache = "automatic"
    exact_token_counts = True
    batch_endpoint = "/v1/chat/completions"

    @staticmethod
    def uses_direct(settings: ModelSettings) -> bool:
        """Whether our direct client sends the calls (``client``; ``auto``: with a base_url).

        Args:
            settings: Model settings.
        """
        return settings.client == "direct" or (
            settings.client == "auto" and settings.base_url is not None
        )

    def check_credentials(self, settings: ModelSettings) -> None:
        """The common checks, and a key unless a server at a base_url is asked.

        Args:
            settings: Model settings.
        """
        super().check_credentials(settings)
        required = not self.uses_direct(settings) and settings.base_url is None
        self.api_key(settings, required=required)

    def build_client(
        self, settings: ModelSettings, rubric: Rubric, *, bounded: bool = False
    ) -> ModelClient:
        """Our direct client (see :meth:`uses_direct`), else autogen-ext's OpenAI client."""
        prepare_endpoint(settings)
        if self.uses_direct(settings):
            return direct_client(self, settings, bounded=bounded)
        # A local server (vLLM, Ollama, ...) usually needs no key; api.openai.com does.
        key = self.api_key(settings, required=settings.base_url is None) or "not-needed"
        # Left out rather than None where unset: autogen's typed kwargs take no None.
        optional: dict[str, Any] = {}
        if settings.base_url is not None:
            optional["base_url"] = settings.base_url
        # AutoGen is imported only by a run that uses autogen-ext's client.
        from clinjudge.judges.clients._sdk_client import openai_sdk_client

        return openai_sdk_client(
            settings.name, api_key=key, **optional, **autogen_client_args(settings)
        )

    def check_batch(self, settings: ModelSettings) -> None:
        """A key, unless the batch API is a server at a base_url.

        Args:
            settings: Model settings.
        """
        self.api_key(settings, required=settings.base_url is None)

    def batch_client(self, settings: ModelSettings) -> Any:
        """The SDK's client, retrying its few control-plane calls itself.

        Args:
            settings: Model settings.
        """
        import openai

        key = self.api_key(settings, required=settings.base_url is None) or "not-needed"
        base_url, query = split_query(settings.base_url)
        return openai.AsyncOpenAI(
            base_url=base_url,
            api_key=key,
            timeout=max(settings.timeout, BATCH_TIMEOUT_S),
            max_retries=5,
            default_query=query,
        )


OPENAI = register_provider(OpenAIProvider())
