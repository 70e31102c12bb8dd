"""Azure OpenAI (``azure/<deployment>``, ``azure_openai/<deployment>``) through autogen-ext's
Azure client; its batch API through the SDK."""

from __future__ import annotations

import os
from typing import Any

from clinjudge.judges.clients._client import ModelClient
from clinjudge.judges.clients._settings import ModelConfigError, ModelSettings
from clinjudge.judges.clients.providers._contract import Provider, prepare_endpoint
from clinjudge.judges.clients.providers._registry import register_provider
from clinjudge.judges.clients.providers.openai import (
    BATCH_TIMEOUT_S,
    autogen_client_args,
    split_query,
)
from clinjudge.rubrics import Rubric

DEFAULT_API_VERSION = "2024-10-21"
"""The API version asked for where neither ``api_version`` nor OPENAI_API_VERSION is set."""


def azure_endpoint(settings: ModelSettings) -> str:
    """The Azure endpoint: ``base_url``, else AZURE_OPENAI_ENDPOINT.

    Args:
        settings: Model settings.

    Raises:
        ModelConfigError: Neither is set.
    """
    endpoint = settings.base_url or os.environ.get("AZURE_OPENAI_ENDPOINT")
    if not endpoint:
        raise ModelConfigError(
            f"model {settings.model}: set base_url or AZURE_OPENAI_ENDPOINT to the Azure endpoint"
        )
    return endpoint


def _api_version(settings: ModelSettings) -> str:
    return settings.api_version or os.environ.get("OPENAI_API_VERSION") or DEFAULT_API_VERSION


class AzureProvider(Provider):
    """A deployment on Azure OpenAI: endpoint and key required."""

    names = ("azure", "azure_openai")
    key_env = "AZURE_OPENAI_API_KEY"
    endpoint_env = ("AZURE_OPENAI_ENDPOINT", "AZURE_API_BASE")
    prefix_cache = "automatic"
    exact_token_counts = True
    batch_endpoint = "/chat/completions"

    def check_credentials(self, settings: ModelSettings) -> None:
        """The common checks, an endpoint and a key.

        Args:
            settings: Model settings.
        """
        super().check_credentials(settings)
        azure_endpoint(settings)
        self.api_key(settings, required=True)

    def build_client(
        self, settings: ModelSettings, rubric: Rubric, *, bounded: bool = False
    ) -> ModelClient:
        """autogen-ext's Azure client for the deployment."""
        prepare_endpoint(settings)
        # AutoGen is imported only by a run that uses autogen-ext's client.
        from clinjudge.judges.clients._sdk_client import azure_sdk_client

        return azure_sdk_client(
            azure_deployment=settings.name,
            model=settings.price_as or settings.name,
            azure_endpoint=azure_endpoint(settings),
            api_version=_api_version(settings),
            api_key=self.api_key(settings, required=True),
            **autogen_client_args(settings),
        )

    def check_batch(self, settings: ModelSettings) -> None:
        """An endpoint and a key.

        Args:
            settings: Model settings.
        """
        azure_endpoint(settings)
        self.api_key(settings, required=True)

    def batch_client(self, settings: ModelSettings) -> Any:
        """The SDK's Azure client, retrying its few control-plane calls itself.

        Args:
            settings: Model settings.
        """
        import openai

        endpoint, query = split_query(azure_endpoint(settings))
        return openai.AsyncAzureOpenAI(
            azure_endpoint=endpoint or "",
            default_query=query,
            api_version=_api_version(settings),
            api_key=self.api_key(settings, required=True),
            timeout=max(settings.timeout, BATCH_TIMEOUT_S),
            max_retries=5,
        )


AZURE = register_provider(AzureProvider())
