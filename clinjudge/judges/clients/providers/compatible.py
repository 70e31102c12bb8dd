"""Any OpenAI-compatible server at a ``base_url`` (vLLM, Ollama's OpenAI API, llama.cpp, TGI),
reached by our lean direct HTTP client: ``openai-compatible/<model>``, and ``openai/<model>``
with a ``base_url``."""

from __future__ import annotations

from clinjudge.judges.clients._client import ModelClient
from clinjudge.judges.clients._direct_client import DirectClient
from clinjudge.judges.clients._settings import ModelConfigError, ModelSettings
from clinjudge.judges.clients.providers._contract import Provider, prepare_endpoint
from clinjudge.judges.clients.providers._registry import register_provider
from clinjudge.rubrics import Rubric


def direct_client(
    provider: Provider, settings: ModelSettings, *, bounded: bool = False
) -> ModelClient:
    """Our direct client for a server at ``settings.base_url``.

    Args:
        provider: The provider whose key variable applies.
        settings: Model settings.
        bounded: The caller bounds every call by ``settings.timeout``: no timer of its own.

    Raises:
        ModelConfigError: No base_url.
    """
    if settings.base_url is None:
        raise ModelConfigError(f"model {settings.model}: client 'direct' needs a base_url")
    return DirectClient(
        settings.name,
        settings.base_url,
        api_key=provider.api_key(settings, required=False),
        timeout=None if bounded else settings.timeout,
        max_reply_bytes=settings.max_reply_bytes,
    )


class CompatibleProvider(Provider):
    """A self-hosted OpenAI-compatible server: a key only where ``api_key_env`` names one."""

    names = ("openai-compatible",)

    def check_credentials(self, settings: ModelSettings) -> None:
        """Refuse settings without a base_url, besides the common checks.

        Args:
            settings: Model settings.
        """
        super().check_credentials(settings)
        if settings.base_url is None:
            raise ModelConfigError(f"model {settings.model}: set base_url to the server")

    def build_client(
        self, settings: ModelSettings, rubric: Rubric, *, bounded: bool = False
    ) -> ModelClient:
        """Our direct client (see :func:`direct_client`)."""
        prepare_endpoint(settings)
        return direct_client(self, settings, bounded=bounded)


COMPATIBLE = register_provider(CompatibleProvider())
