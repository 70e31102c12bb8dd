"""Per-role model settings and model-string parsing."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from clinjudge._util.secrets import (
    REDACTED,
    redact_url,
    remember_secret,
    remember_url_secrets,
)
from clinjudge.errors import UserError

ReasoningEffort = Literal["minimal", "low", "medium", "high"]
StructuredOutput = Literal["auto", "json_schema", "json_object", "off"]
"""How replies with a JSON Schema are constrained (``ModelSettings.structured_output``)."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ModelConfigError(UserError):
    """Model settings that cannot produce a working client."""


class Price(BaseModel):
    """Dollar prices per million tokens, overriding litellm's price map.

    Args:
        input_per_mtok: Prompt tokens the provider did not serve from its prompt cache.
        output_per_mtok: Generated tokens.
        cached_input_per_mtok: Prompt tokens read from the provider's prompt cache (OpenAI
            and Azure ``cached_tokens``, Anthropic ``cache_read_input_tokens``); unset, they
            are priced as ordinary input (no discount assumed).
        cache_write_input_per_mtok: Prompt tokens written to the cache (Anthropic
            ``cache_creation_input_tokens``); unset, priced as ordinary input.
    """

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)
    cached_input_per_mtok: float | None = Field(default=None, ge=0)
    cache_write_input_per_mtok: float | None = Field(default=None, ge=0)


class ModelSettings(BaseModel):
    """How to reach a model and how to sample from it.

    Defaults follow Table 4 of the LLM-as-a-judge study for the GPT judges (temperature 0.01,
    top-p 0.95, 400 new tokens).

    Args:
        model: ``provider/model``, e.g. ``openai/gpt-4o-mini``, ``azure/my-deployment``,
            ``anthropic/claude-sonnet-4-5``, ``mock/judge``.
        base_url: Endpoint of an OpenAI-compatible server (vLLM, Ollama, llama.cpp, TGI) or Azure.
        api_key_env: Name of the environment variable holding the key (the key itself is never
            stored).
        api_version: Azure OpenAI API version.
        temperature: Sampling temperature (dropped for reasoning models that reject it).
        top_p: Nucleus sampling mass (dropped for reasoning models that reject it).
        max_tokens: Cap on generated tokens.
        seed: Provider-side sampling seed, where supported.
        reasoning_effort: For reasoning models.
        timeout: Seconds before one call is abandoned and retried (finite, above zero).
        max_reply_bytes: Most bytes of reply body read; a longer reply fails the call (the
            body is read in chunks and dropped at the limit, never buffered whole).
        json_mode: Ask the provider for a JSON object response on calls that ask for no reply
            schema (calls that do follow ``structured_output``).
        structured_output: How replies that have a JSON Schema (rubric scores, DocLens stages,
            the chair's decision) are constrained: ``json_schema`` sends the schema as
            structured output (strict), ``json_object`` asks for JSON mode only, ``off`` sends
            no ``response_format`` at all, and ``auto`` (default) sends the schema and falls
            back to JSON mode for the rest of the run when the endpoint refuses it. The parser
            validates every reply whatever the mode.
        client: For ``openai/`` models: ``autogen`` uses autogen-ext's OpenAI client, ``direct``
            our lean HTTP client; ``auto`` picks ``direct`` when ``base_url`` is set
            (self-hosted servers, where throughput matters) and ``autogen`` otherwise.
        rpm: Requests per minute allowed for this model (shared by every agent using it).
        tpm: Tokens per minute allowed for this model (prompt plus completion).
        max_connections: Most calls in flight at once to this model's endpoint, shared by
            every model and agent of the run whose calls reach the same server (the
            provider's ``connection_key``); wins over the provider's own limit
            (``Provider.max_connections``). Unset: the provider's, else only ``concurrency``.
        price: Price override; otherwise litellm's bundled price map is used.
        price_as: Model name to look up in the price map (e.g. the model behind a deployment).
        ray: ``hf/`` models only: run the model's replicas as Ray actors (``--ray``): ``local``
            starts a Ray here, ``auto`` joins this machine's cluster, ``HOST:PORT`` that one.
        ray_replicas: Model replicas on Ray; default one per GPU of the cluster, else one.
        engine: ``hf/`` models only: how batches are decoded, ``padded`` (one ``generate`` call
            over padded rows) or ``paged`` (transformers' continuous batching with paged
            attention); default ``CLINJUDGE_HF_ENGINE``, else ``padded``.
    """

    model_config = ConfigDict(extra="forbid")

    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    api_version: str | None = None
    temperature: float | None = Field(default=0.01, ge=0, le=2)
    top_p: float | None = Field(default=0.95, gt=0, le=1)
    max_tokens: int | None = Field(default=400, gt=0)
    seed: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    timeout: float = Field(default=120.0, gt=0, allow_inf_nan=False)
    max_reply_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    json_mode: bool = False
    structured_output: StructuredOutput = "auto"
    client: Literal["auto", "autogen", "direct"] = "auto"
    rpm: int | None = Field(default=None, gt=0)
    tpm: int | None = Field(default=None, gt=0)
    max_connections: int | None = Field(default=None, gt=0)
    price: Price | None = None
    price_as: str | None = None
    ray: str | None = Field(default=None, min_length=1)
    ray_replicas: int | None = Field(default=None, ge=1)
    engine: Literal["padded", "paged"] | None = None

    @field_validator("model")
    @classmethod
    def _has_provider(cls, value: str) -> str:
        provider, _, name = value.partition("/")
        if not provider or not name:
            raise ValueError(
                f"model {value!r} must look like provider/model, e.g. openai/gpt-4o-mini, "
                "azure/<deployment>, anthropic/claude-sonnet-4-5 or mock/judge"
            )
        return value

    @field_validator("base_url")
    @classmethod
    def _remember_url_credentials(cls, value: str | None) -> str | None:
        # A key in the URL (userinfo, ?api-key=, ?sig=) can come back quoted in a provider's
        # error: known from here on, it is redacted from every reason and message written.
        remember_url_secrets(value)
        return value

    @field_validator("api_key_env")
    @classmethod
    def _names_a_variable(cls, value: str | None) -> str | None:
        if value is None or _ENV_NAME.fullmatch(value):
            return value
        # Most likely the key itself, pasted where its variable's name belongs: never echo it.
        remember_secret(value)
        raise ValueError(
            "api_key_env must be the NAME of an environment variable (letters, digits and _, "
            "e.g. OPENAI_API_KEY), not the key itself; the value given is not shown or stored"
        )

    @field_serializer("base_url")
    def _no_credentials(self, value: str | None) -> str | None:
        # Settings are stored with every run: a key written into the URL must not be.
        return redact_url(value) if value else value

    @property
    def carries_redacted_credentials(self) -> bool:
        """The base_url came from a stored config whose credentials were removed."""
        return bool(self.base_url) and REDACTED in str(self.base_url)

    @property
    def provider(self) -> str:
        """The part before the first slash."""
        return self.model.split("/", 1)[0].lower()

    @property
    def name(self) -> str:
        """The part after the first slash."""
        return self.model.split("/", 1)[1]

    @property
    def is_reasoning_model(self) -> bool:
        """OpenAI reasoning models reject temperature and top-p."""
        name = self.name.lower().rsplit("/", 1)[-1]
        return name.startswith(("o1", "o3", "o4", "gpt-5"))

    def public_dict(self) -> dict[str, object]:
        """Settings safe to store: everything here names keys, never holds them."""
        return self.model_dump(mode="json", exclude_none=True)


def sampling_args(settings: ModelSettings) -> dict[str, Any]:
    """The sampling fields of a chat request under these settings (unset ones left out).

    Args:
        settings: Model and sampling settings.
    """
    args: dict[str, Any] = {
        "max_tokens": settings.max_tokens,
        "seed": settings.seed,
        "reasoning_effort": settings.reasoning_effort,
    }
    if settings.is_reasoning_model:
        # OpenAI's reasoning models reject max_tokens and want max_completion_tokens.
        args["max_completion_tokens"] = args.pop("max_tokens")
    else:
        args["temperature"] = settings.temperature
        args["top_p"] = settings.top_p
    return {k: v for k, v in args.items() if v is not None}
