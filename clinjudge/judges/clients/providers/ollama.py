"""Ollama's native API (``ollama/<model>``, ``ollama_chat/<model>``) through litellm, on its
guarded HTTP handler; Ollama's OpenAI-compatible API is ``openai/<model>`` with a base_url."""

from __future__ import annotations

from clinjudge.judges.clients.providers._registry import register_provider
from clinjudge.judges.clients.providers.litellm import LiteLLMProvider


class OllamaProvider(LiteLLMProvider):
    """A local Ollama server: no key, and a model litellm's price map usually does not list
    (so calls have no known price and items are not checked against a context window)."""

    names = ("ollama", "ollama_chat")


OLLAMA = register_provider(OllamaProvider())
