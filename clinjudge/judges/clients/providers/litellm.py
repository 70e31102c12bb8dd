"""Every provider litellm knows (``litellm/<route>``, and any prefix no other provider claims,
e.g. ``gemini/...``, ``mistral/...``); litellm finds each provider's key itself."""

from __future__ import annotations

import os
from typing import ClassVar

from clinjudge.judges.clients._client import ModelClient
from clinjudge.judges.clients._litellm_client import LiteLLMClient
from clinjudge.judges.clients._settings import ModelSettings
from clinjudge.judges.clients.providers._contract import Provider, prepare_endpoint
from clinjudge.judges.clients.providers._registry import register_provider
from clinjudge.rubrics import Rubric

PREFIX = "litellm/"
"""Written before a litellm route to say so explicitly (``litellm/openai/my-model``)."""


class LiteLLMProvider(Provider):
    """Calls through litellm (imported on the first call: its import costs seconds)."""

    names: ClassVar[tuple[str, ...]] = ("litellm",)

    def build_client(
        self, settings: ModelSettings, rubric: Rubric, *, bounded: bool = False
    ) -> ModelClient:
        """litellm's client for the model's route."""
        prepare_endpoint(settings)
        model = settings.model.removeprefix(PREFIX)
        key = self.api_key(settings, required=False)
        if key is None and settings.base_url and model.startswith("openai/"):
            # litellm's OpenAI route refuses to send without a key (or OPENAI_API_KEY), even to
            # a local OpenAI-compatible server that needs none.
            key = os.environ.get("OPENAI_API_KEY") or "not-needed"
        return LiteLLMClient(
            model,
            api_base=settings.base_url,
            api_key=key,
            api_version=settings.api_version,
            timeout=settings.timeout,
            max_reply_bytes=settings.max_reply_bytes,
        )


LITELLM = register_provider(LiteLLMProvider(), fallback=True)
