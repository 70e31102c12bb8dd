"""OpenAI's API (``openai/<model>``) through autogen-ext's client, or any OpenAI-compatible
server at a ``base_url`` through our direct client."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from clinjudge.judges.clients._base_client import GENERIC_MODEL_INFO, completion_of
from clinjudge.judges.clients._call_config import CallConfig
from clinjudge.judges.clients._completion import Completion
from clinjudge.judges.clients._http_guard import guarded_httpx_args
from clinjudge.judges.clients._sdk_usage import SDK_USAGE, reporting_usage, with_sdk_usage
from clinjudge.judges.clients._settings import ModelSettings, sampling_args
from clinjudge.judges.clients._structured import OutputMode, openai_response_format
from clinjudge.judges.clients.providers._call import json_flag
from clinjudge.judges.clients.providers._contract import Provider, prepare_endpoint
from clinjudge.judges.clients.providers._registry import register_provider
from clinjudge.judges.clients.providers.compatible import direct_client
from clinjudge.rubrics import Rubric

if TYPE_CHECKING:
    from autogen_core.models import ChatCompletionClient, LLMMessage


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


def from_autogen_ext(client: ChatCompletionClient) -> bool:
    """Whether ``client`` is autogen-ext's OpenAI or Azure client (not ours: it takes the
    reply schema as the request's ``response_format``).

    Args:
        client: The model's client.
    """
    return type(client).__module__.startswith("autogen_ext.models.openai")


async def send_through_sdk(
    client: ChatCompletionClient,
    messages: Sequence[LLMMessage],
    config: CallConfig,
    extra: dict[str, Any],
    mode: OutputMode,
) -> Completion:
    """One request through autogen-ext's OpenAI or Azure client, with the whole usage of the
    reply its SDK received (see :mod:`~clinjudge.judges.clients._sdk_usage`).

    Args:
        client: autogen-ext's client (wrapped by ``reporting_usage``).
        messages: The conversation.
        config: What the call asks for.
        extra: The request arguments worked out for it.
        mode: The output mode it is sent in.
    """
    schema = config.schema
    if mode == "json_schema" and schema is not None:
        # autogen-ext sends extra arguments to the SDK as they are: they get the request
        # field itself.
        extra = {**extra, "response_format": openai_response_format(schema)}
    sink: list[Any] = []
    token = SDK_USAGE.set(sink)
    try:
        result = await client.create(
            messages,
            tools=config.tools,
            json_output=json_flag(config, mode),
            extra_create_args=extra,
        )
    finally:
        SDK_USAGE.reset(token)
    # autogen-ext's result ends here: the call path reads our own Completion.
    return completion_of(with_sdk_usage(result, sink) if sink else result)


BATCH_TIMEOUT_S = 300.0
"""Least timeout of the batch control-plane calls (upload, create, poll)."""


class SdkClientProvider(Provider):
    """A provider whose calls may go through autogen-ext's OpenAI or Azure client, which
    takes the reply schema as the SDK's ``response_format`` (an injected client of ours is
    served as any provider's)."""

    async def send(
        self,
        client: ChatCompletionClient,
        messages: Sequence[LLMMessage],
        config: CallConfig,
        extra: dict[str, Any],
        mode: OutputMode,
    ) -> Completion:
        """autogen-ext's client through :func:`send_through_sdk`, ours as any provider's."""
        if from_autogen_ext(client):
            return await send_through_sdk(client, messages, config, extra, mode)
        return await super().send(client, messages, config, extra, mode)


class OpenAIProvider(SdkClientProvider):
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
    ) -> ChatCompletionClient:
        """Our direct client (see :meth:`uses_direct`), else autogen-ext's OpenAI client."""
        prepare_endpoint(settings)
        if self.uses_direct(settings):
            return direct_client(self, settings, bounded=bounded)
        return self._autogen_client(settings)

    def _autogen_client(self, settings: ModelSettings) -> ChatCompletionClient:
        from autogen_ext.models.openai import OpenAIChatCompletionClient
        from autogen_ext.models.openai._model_info import get_info

        # A local server (vLLM, Ollama, ...) usually needs no key; api.openai.com does.
        key = self.api_key(settings, required=settings.base_url is None) or "not-needed"
        # Left out rather than None where unset: autogen's typed kwargs take no None.
        optional: dict[str, Any] = {}
        if settings.base_url is not None:
            optional["base_url"] = settings.base_url
        try:
            get_info(settings.name)
        except (KeyError, ValueError):
            optional["model_info"] = GENERIC_MODEL_INFO
        return reporting_usage(
            OpenAIChatCompletionClient(
                model=settings.name, api_key=key, **optional, **autogen_client_args(settings)
            )
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
