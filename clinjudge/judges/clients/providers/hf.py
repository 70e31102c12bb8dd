"""Models run in this process with transformers: ``hf/<path>`` (local files only) and
``hf-hub/<org>/<name>`` (a hub repository); torch is imported when the first call is sent."""

from __future__ import annotations

from clinjudge.judges.clients._accounting import FREE, TokenPrices
from clinjudge.judges.clients._client import ModelClient
from clinjudge.judges.clients._hf_client import HFClient, client_options
from clinjudge.judges.clients._hf_ray import HFRayClient
from clinjudge.judges.clients._hf_source import source_of
from clinjudge.judges.clients._settings import ModelSettings
from clinjudge.judges.clients.providers._contract import Provider
from clinjudge.judges.clients.providers._registry import register_provider
from clinjudge.rubrics import Rubric


def hf_client(settings: ModelSettings, rubric: Rubric | None = None) -> HFClient:
    """The client for an ``hf/`` or ``hf-hub/`` model's settings (see
    :func:`~clinjudge.judges.clients._hf_client.client_options`); with ``ray`` set, one whose
    batches run on Ray replicas (the driver only batches).

    Args:
        settings: Model and sampling settings.
        rubric: The run's rubric (its gates constrain replies).
    """
    options = client_options(settings, rubric)
    if settings.ray is not None:
        return HFRayClient(
            settings.name, ray=settings.ray, replicas=settings.ray_replicas, **options
        )
    return HFClient(settings.name, **options)


class HFProvider(Provider):
    """An in-process model: free, keyed by its files, decoding under the reply schema itself
    (so no endpoint is probed for schema support), and the only kind Ray may run."""

    names = ("hf", "hf-hub")
    in_process = True
    probes_schemas = False

    def check_credentials(self, settings: ModelSettings) -> None:
        """The model must name a model file or folder here (``hf-hub/``: a repository id);
        local files are read, never the hub.

        Args:
            settings: Model settings.
        """
        source_of(settings.model)

    def build_client(
        self, settings: ModelSettings, rubric: Rubric, *, bounded: bool = False
    ) -> ModelClient:
        """The in-process client (on Ray replicas where ``ray`` is set)."""
        return hf_client(settings, rubric)

    def token_prices(self, settings: ModelSettings) -> TokenPrices | None:
        """Free: the model runs here."""
        return FREE

    def timeout_advice(self, settings: ModelSettings, concurrency: int) -> str | None:
        """Raise the timeout, not lower the concurrency: the calls in flight are one batch.

        Args:
            settings: Model settings.
            concurrency: The run's calls in flight at once.
        """
        # Fewer calls in flight make more, smaller batches, each paying for its own prompts'
        # prefill, and no sooner answer (#39, docs/models.md). A call waits as long as its
        # model makes progress: only a model that stopped (or one layer's pass or decoding
        # step longer than the timeout) times out.
        if settings.ray is not None:  # replicas elsewhere: each call has its wall clock
            return (
                f"calls take longer than --timeout {settings.timeout:g} s; a call's time "
                f"includes the whole batch it shares on its Ray replica: raise --timeout "
                "(judge.timeout), e.g. to twice the slowest call's time, and keep --concurrency "
                "at the batch size"
            )
        return (
            f"the {settings.provider}/ model made no progress for --timeout "
            f"{settings.timeout:g} s (no batch begun, no layer's pass ended, no token decoded; "
            "it runs in this process and its calls wait while its batch of up to --concurrency "
            f"{concurrency} items decodes): raise --timeout (judge.timeout) when one step takes "
            "that long, and keep --concurrency at the batch size"
        )


HF = register_provider(HFProvider())
HF_PROVIDERS = frozenset(HFProvider.names)
"""Models run in this process: ``hf/<path>`` (local files only), ``hf-hub/<org>/<name>``."""
