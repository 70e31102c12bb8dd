"""The simulated judge (``mock/<name>``): replies that follow the rubric's contract, drawn
from the request, free and offline; a run that uses it is marked simulated."""

from __future__ import annotations

from typing import Any

from clinjudge.judges.clients._accounting import FREE, TokenPrices
from clinjudge.judges.clients._client import ModelClient
from clinjudge.judges.clients._mock_client import MockClient
from clinjudge.judges.clients._settings import ModelSettings
from clinjudge.judges.clients.providers._contract import Provider
from clinjudge.judges.clients.providers._registry import register_provider
from clinjudge.rubrics import Rubric


class MockProvider(Provider):
    """Simulated replies: no credentials, no endpoint, no price, no context window."""

    names = ("mock",)
    endpoint_env = ()
    reads_api_version = False
    simulated = True
    probes_schemas = False

    def check_credentials(self, settings: ModelSettings) -> None:
        """Nothing to check: no key and no endpoint."""

    def build_client(
        self, settings: ModelSettings, rubric: Rubric, *, bounded: bool = False
    ) -> ModelClient:
        """The simulated client, following ``rubric``."""
        return MockClient(rubric, settings.name)

    def token_prices(self, settings: ModelSettings) -> TokenPrices | None:
        """Free."""
        return FREE

    def context_window(self, settings: ModelSettings) -> int | None:
        """None: no prompt is too long for it."""
        return None

    def variation_args(self, variation: str) -> dict[str, Any]:
        """The sample's variation as the seed its reply is drawn with.

        Args:
            variation: Seed and sample number of the sample asking.
        """
        return {"seed": variation}


MOCK = register_provider(MockProvider())
