"""How much of a run's prompts a provider's prompt cache would serve, for ``--dry-run``.

OpenAI and Azure cache every prompt prefix of 1,024 tokens or more on their own (hits count in
steps of 128 tokens) and bill cached tokens at a discount; Anthropic caches only the prefix a
request marks with ``cache_control`` (clinjudge marks the system message), writing it once at a
premium and reading it at a tenth of the input price. A run sends the same system prompt for
every item and the same whole prompt for every sample, so most prompt tokens can be cached.

The figures are an estimate: each request is assumed to find what earlier requests sent still
in the cache. Requests sent at the same moment (before the first has been answered) and gaps
longer than the cache lives (5-10 minutes idle) lower the real share; ``judge runs show``
reports what the provider actually served.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from clinjudge.judges import ModelSettings, count_message_tokens
from clinjudge.judges.clients import PrefixCache, provider_for
from clinjudge.rubrics import ChatTurn

MIN_CACHED_PREFIX = 1024
"""Shortest prompt prefix the providers cache (OpenAI, Azure; Anthropic's Sonnet and Opus)."""
OPENAI_CACHE_STEP = 128
"""OpenAI's cache hits grow in steps of this many tokens beyond the first 1,024."""


def cache_style(settings: ModelSettings) -> PrefixCache | None:
    """``automatic`` (every long prefix cached, as OpenAI and Azure do), ``marked`` (the
    marked prefix, as Anthropic does) or None (no cache clinjudge knows how to estimate: other
    providers, local and simulated models).

    Args:
        settings: The judge model's settings.
    """
    return provider_for(settings).prefix_cache


def openai_cached(tokens: int) -> int:
    """Tokens of a ``tokens``-long repeated prefix that OpenAI serves from its cache."""
    if tokens < MIN_CACHED_PREFIX:
        return 0
    return MIN_CACHED_PREFIX + (tokens - MIN_CACHED_PREFIX) // OPENAI_CACHE_STEP * OPENAI_CACHE_STEP


@dataclass
class PromptCacheTally:
    """Counts the cached and cache-written prompt tokens of a run's prompts, in send order.

    Args:
        style: What :func:`cache_style` said for the model.
    """

    style: PrefixCache | None
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    _prefixes: set[bytes] = field(default_factory=set)
    _prompts: set[bytes] = field(default_factory=set)

    def add(self, prefix: str, prefix_tokens: int, prompt: str, prompt_tokens: int) -> None:
        """Count one request.

        Args:
            prefix: Text every item's request shares (persona and system message).
            prefix_tokens: Its tokens.
            prompt: The whole prompt (every message), which repeats once per sample.
            prompt_tokens: Its tokens.
        """
        # Digests, not texts: a run's prompts can hold gigabytes of notes.
        prefix_key, prompt_key = _digest(prefix), _digest(prompt)
        if self.style == "automatic":
            if prompt_key in self._prompts:  # another sample of the same prompt
                self.cached_input_tokens += openai_cached(prompt_tokens)
            elif prefix_key in self._prefixes:  # another item under the same system prompt
                self.cached_input_tokens += openai_cached(prefix_tokens)
        elif self.style == "marked" and prefix_tokens >= MIN_CACHED_PREFIX:
            if prefix_key in self._prefixes:
                self.cached_input_tokens += prefix_tokens
            else:
                self.cache_write_tokens += prefix_tokens
        self._prefixes.add(prefix_key)
        self._prompts.add(prompt_key)

    def add_turns(
        self, persona: str, persona_tokens: int, turns: list[ChatTurn], prompt_tokens: int
    ) -> None:
        """Count one request given as rendered turns: the shared prefix is the persona (a
        panel member's instructions, placed before the system prompt) and the leading system
        messages (rubric, instructions); the rest is the item.

        Args:
            persona: The persona's system message ("" for none).
            persona_tokens: Its tokens.
            turns: The rendered request.
            prompt_tokens: Tokens of the whole request (persona included).
        """
        leading = 0
        while leading < len(turns) and turns[leading].role == "system":
            leading += 1
        system = [t.content for t in turns[:leading]]
        prefix_tokens = persona_tokens + (count_message_tokens(system) if system else 0)
        prefix = "\x00".join([persona, *system])
        prompt = "\x00".join([persona, *(t.content for t in turns)])
        self.add(prefix, prefix_tokens, prompt, prompt_tokens)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
