"""What clinjudge asks of a model provider: one class whose hooks answer every question that
depends on the provider named before the first slash of a model (``openai/gpt-4o-mini``)."""

from __future__ import annotations

import os
import urllib.parse
from typing import Any, ClassVar, Literal, overload

from clinjudge._util.secrets import bare_endpoint
from clinjudge.judges.clients._accounting import (
    TokenPrices,
    listed_cache_prices,
    map_batch_prices,
    map_context_window,
    map_prices,
    tiktoken_counts_exactly,
)
from clinjudge.judges.clients._client import Generation, ModelClient, ProviderClient
from clinjudge.judges.clients._completion import Completion
from clinjudge.judges.clients._faults import (
    ProviderFault,
    classify_fault,
    remember_secret,
    remember_url_secrets,
)
from clinjudge.judges.clients._settings import ModelConfigError, ModelSettings
from clinjudge.rubrics import Rubric

PrefixCache = Literal["automatic", "marked"]
"""How a provider's prompt cache works: ``automatic`` caches every long prefix on its own
(OpenAI, Azure), ``marked`` only the prefix a request marks (Anthropic)."""


class Provider:
    """One model provider. Subclass it, set the class facts that differ, override the hooks
    that differ, and register an instance with :func:`register_provider` (or through the
    ``clinjudge.providers`` entry point group).

    Only one hook must be written: :meth:`generate` (one request in, one reply out), or, for a
    provider with a client of its own (one :class:`ModelClient` per model, holding its
    connections), :meth:`build_client`. Every other hook has the behaviour of a hosted API
    reached over the network, priced from litellm's bundled map.

    Connection limits: :meth:`max_connections` (calls in flight at once, None by default: only
    the run's ``concurrency``) and :meth:`connection_key` (which calls share that limit: by
    default every call to the same provider and endpoint).
    """

    names: ClassVar[tuple[str, ...]] = ()
    """The prefixes (before the first slash of a model) this provider serves."""
    key_env: ClassVar[str | None] = None
    """The environment variable holding the API key when ``api_key_env`` names none."""
    endpoint_env: ClassVar[tuple[str, ...] | None] = None
    """Variables the client reads an endpoint from when ``base_url`` is unset (they enter the
    response-cache key); None: ``<PROVIDER>_API_BASE`` and ``<PROVIDER>_BASE_URL``."""
    reads_api_version: ClassVar[bool] = True
    """The client may read an API version from the environment (it enters the cache key)."""
    simulated: ClassVar[bool] = False
    """Replies are simulated, not a model's (the run is marked simulated)."""
    in_process: ClassVar[bool] = False
    """The model runs in this process: free, keyed by its files in the response cache, and
    the only kind that may run on Ray."""
    probes_schemas: ClassVar[bool] = True
    """Under ``structured_output: auto``, the first ``json_schema`` call finds out whether the
    endpoint takes schemas before others are sent."""
    prefix_cache: ClassVar[PrefixCache | None] = None
    """The provider's prompt cache, for ``--dry-run``'s estimate (None: none estimated)."""
    exact_token_counts: ClassVar[bool] = False
    """tiktoken may know the model's own tokenizer (OpenAI's model family)."""
    batch_endpoint: ClassVar[str | None] = None
    """The URL path of a batch request line; None: no batch API we can drive."""

    def build_client(
        self, settings: ModelSettings, rubric: Rubric, *, bounded: bool = False
    ) -> ModelClient:
        """The client that sends this model's calls.

        The default serves a provider written in the plain form: each request goes to
        :meth:`generate`.

        Args:
            settings: Model and sampling settings.
            rubric: The rubric (a simulated provider follows its contract).
            bounded: The caller bounds every call by ``settings.timeout`` itself, so the
                client need set no timer of its own.

        Raises:
            NotImplementedError: The provider defines neither this nor :meth:`generate`.
        """
        if type(self).generate is Provider.generate:
            raise NotImplementedError(f"{type(self).__name__} must define generate or build_client")
        return ProviderClient(self.generate)

    async def generate(self, call: Generation) -> Completion:
        """Send one request and return its reply: the simplest way to write a provider.
        Faults are exceptions, classified by :meth:`classify_fault`; timeouts are the
        caller's (``settings.timeout``).

        Args:
            call: The conversation (``call.messages`` in chat format), what the call asks for
                and the sampling arguments.
        """
        raise NotImplementedError(f"{type(self).__name__} must define generate or build_client")

    def check_credentials(self, settings: ModelSettings) -> None:
        """Raise what :meth:`build_client` would raise for missing credentials or endpoint,
        without building a client (every model of a run is checked before it is stored).

        Args:
            settings: Model settings.

        Raises:
            ModelConfigError: The settings cannot produce a working client.
        """
        check_stored_url(settings)
        self.check_one_authorization(settings)

    def key_variable(self, settings: ModelSettings) -> str | None:
        """The environment variable the API key is read from, if any.

        Args:
            settings: Model settings (``api_key_env`` wins).
        """
        return settings.api_key_env or self.key_env

    @overload
    def api_key(self, settings: ModelSettings, required: Literal[True]) -> str: ...
    @overload
    def api_key(self, settings: ModelSettings, required: bool) -> str | None: ...
    def api_key(self, settings: ModelSettings, required: bool) -> str | None:
        """The API key from the environment (remembered, so that it is redacted everywhere).

        Args:
            settings: Model settings.
            required: Raise when the key is unset.

        Raises:
            ModelConfigError: ``required`` and no key is set.
        """
        env_name = self.key_variable(settings)
        key = os.environ.get(env_name) if env_name else None
        remember_secret(key)
        if key is None and required:
            raise ModelConfigError(
                f"model {settings.model}: no API key; set {env_name} or pick another variable "
                "with api_key_env in the config (the key itself is never written to config or "
                "database)"
            )
        return key

    def check_one_authorization(self, settings: ModelSettings) -> None:
        """A base_url with ``user:password@`` sends those as the request's Authorization; a
        key in the environment would be a second one, which the HTTP client refuses.

        Args:
            settings: Model settings.
        """
        if not settings.base_url or "@" not in settings.base_url:
            return
        parts = urllib.parse.urlsplit(settings.base_url)
        env_name = self.key_variable(settings)
        if (parts.username or parts.password) and env_name and os.environ.get(env_name):
            raise ModelConfigError(
                f"model {settings.model}: base_url carries credentials (user:password@) and "
                f"{env_name} is set too; a request can carry only one: remove the "
                f"user:password@ part of base_url, or unset {env_name} (or name an unset "
                "variable with api_key_env)"
            )

    def endpoint_variables(self, settings: ModelSettings) -> tuple[str, ...]:
        """Variables the client reads an endpoint from where ``base_url`` is unset.

        Args:
            settings: Model settings.
        """
        if self.endpoint_env is not None:
            return self.endpoint_env
        upper = settings.provider.upper()
        return (f"{upper}_API_BASE", f"{upper}_BASE_URL")

    def context_window(self, settings: ModelSettings) -> int | None:
        """Input tokens the model accepts, None where unknown (items are then not checked).

        Args:
            settings: Model settings.
        """
        return map_context_window(settings)

    def token_prices(self, settings: ModelSettings) -> TokenPrices | None:
        """Dollars per token, None where unknown (a ``price`` in the settings wins before
        this is asked).

        Args:
            settings: Model settings.
        """
        return map_prices(settings, self.cache_prices)

    def cache_prices(
        self, settings: ModelSettings, entry: dict[str, Any], input_price: float
    ) -> tuple[float, float]:
        """Prompt-cache read and write prices per token from the model's price-map entry.

        Args:
            settings: Model settings.
            entry: The model's entry in litellm's map.
            input_price: Its input price per token.
        """
        return listed_cache_prices(entry, input_price)

    def batch_price_per_token(self, settings: ModelSettings) -> tuple[float, float] | None:
        """Dollars per input and output token of a batch request, None where unknown.

        Args:
            settings: Model settings (without a ``price``, which is taken as it stands).
        """
        return map_batch_prices(settings, self.token_prices(settings))

    def counts_exactly(self, settings: ModelSettings) -> bool:
        """Whether local token counts use the model's own tokenizer.

        Args:
            settings: Model settings.
        """
        return self.exact_token_counts and tiktoken_counts_exactly(settings)

    def classify_fault(self, exc: BaseException) -> ProviderFault:
        """Turn an exception of a call into a :class:`ProviderFault` (retryable or not).

        Args:
            exc: What the client raised.
        """
        return classify_fault(exc)

    def variation_args(self, variation: str) -> dict[str, Any]:
        """Request arguments that make repeated samples differ where sampling does not.

        Args:
            variation: Seed and sample number of the sample asking.
        """
        return {}

    def timeout_advice(self, settings: ModelSettings, concurrency: int) -> str | None:
        """What to change when this model's calls time out; None: the general advice.

        Args:
            settings: Model settings.
            concurrency: The run's calls in flight at once.
        """
        return None

    # Connection limits: how many calls may be in flight at once to one server. The run
    # holds every call within the smallest limit among the models sharing a connection key.

    def max_connections(self, settings: ModelSettings) -> int | None:
        """Most calls in flight at once to this model's server, shared by every model and
        agent of a run with the same :meth:`connection_key` (the smallest limit among them
        holds); the ``max_connections`` model setting wins over it.

        Args:
            settings: Model settings.

        Returns:
            A positive number, or None: no limit beyond the run's ``concurrency``.
        """
        return None

    def connection_key(self, settings: ModelSettings) -> str:
        """What the calls sharing one connection limit have in common: the provider's name
        and its endpoint (``base_url``, else the one the client reads from the environment,
        else the provider's own), so calls to one server share the limit whichever model,
        agent or role makes them. It never holds a secret (credentials are removed).

        Args:
            settings: Model settings.
        """
        endpoint = settings.base_url
        if not endpoint:
            found = (os.environ.get(name) for name in self.endpoint_variables(settings))
            endpoint = next((value for value in found if value), "")
        return f"{settings.provider}|{bare_endpoint(endpoint) if endpoint else ''}"

    def check_batch(self, settings: ModelSettings) -> None:
        """Raise when a batch run cannot use this provider's batch API.

        Args:
            settings: Model settings.

        Raises:
            ModelConfigError: No batch API, no key or no endpoint.
        """
        if self.batch_endpoint is None:
            raise ModelConfigError(
                f"model {settings.model}: a batch run needs an openai/ or azure/ model "
                "(the OpenAI and Azure OpenAI batch APIs)"
            )

    def batch_client(self, settings: ModelSettings) -> Any:
        """An SDK client for the provider's Files and Batches endpoints.

        Args:
            settings: Model settings (checked by :meth:`check_batch` first).
        """
        raise ModelConfigError(f"model {settings.model}: no batch API for this provider")


def check_stored_url(settings: ModelSettings) -> None:
    """Refuse a base_url whose credentials were removed when it was stored.

    Args:
        settings: Model settings.

    Raises:
        ModelConfigError: The base_url came from a stored config and lost its credentials.
    """
    if settings.carries_redacted_credentials:
        raise ModelConfigError(
            f"model {settings.model}: its base_url held credentials, which are never stored "
            f"({settings.base_url}); put the key in an environment variable named by "
            "api_key_env and give base_url without it"
        )


def prepare_endpoint(settings: ModelSettings) -> None:
    """What every client of a network provider does first: refuse a stored base_url that lost
    its credentials, and remember the ones it holds (redacted from every error from now on).

    Args:
        settings: Model settings.
    """
    check_stored_url(settings)
    remember_url_secrets(settings.base_url)
