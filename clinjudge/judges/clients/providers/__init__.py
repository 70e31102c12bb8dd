"""Model providers as plugins: one module per provider, each registering a
:class:`Provider` under the model prefixes it serves; third-party providers register through
the ``clinjudge.providers`` entry point group.

Adding a provider: subclass :class:`Provider` (``names``, :meth:`Provider.generate` — one
:class:`Generation` in, one :class:`Completion` out — and the hooks that differ), then call
:func:`register_provider` at import, or name the class in a package's entry points
(``[clinjudge.providers]`` ``myprefix = my_package.module:MyProvider``). A provider with a
client of its own (a :class:`ModelClient`: one per model, holding its connections) defines
:meth:`Provider.build_client` instead.
"""

from clinjudge.judges.clients._client import Generation, ModelClient
from clinjudge.judges.clients._completion import Completion
from clinjudge.judges.clients.providers import (
    anthropic,
    azure,
    compatible,
    hf,
    litellm,
    mock,
    ollama,
    openai,
)
from clinjudge.judges.clients.providers._contract import (
    PrefixCache,
    Provider,
    check_stored_url,
    prepare_endpoint,
)
from clinjudge.judges.clients.providers._registry import (
    ENTRY_POINT_GROUP,
    provider_for,
    provider_named,
    provider_names,
    register_provider,
)

HF_PROVIDERS = hf.HF_PROVIDERS
"""Prefixes of the models run in this process (``hf/``, ``hf-hub/``)."""

BUILT_IN = (anthropic, azure, compatible, hf, litellm, mock, ollama, openai)
"""The built-in provider modules (imported above: each registers its providers)."""

__all__ = [
    "BUILT_IN",
    "ENTRY_POINT_GROUP",
    "Completion",
    "Generation",
    "HF_PROVIDERS",
    "ModelClient",
    "PrefixCache",
    "Provider",
    "check_stored_url",
    "prepare_endpoint",
    "provider_for",
    "provider_named",
    "provider_names",
    "register_provider",
]
