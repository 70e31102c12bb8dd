"""Model access (OpenAI, Azure, OpenAI-compatible servers, litellm, mock) and judge workflows."""

from clinjudge.judges._accounting import (
    call_cost,
    count_message_tokens,
    count_tokens,
    price_per_token,
)
from clinjudge.judges._base_client import GENERIC_MODEL_INFO, SimpleChatCompletionClient
from clinjudge.judges._batch_api import (
    BatchClient,
    BatchLine,
    BatchState,
    batch_call_cost,
    batch_price_per_token,
)
from clinjudge.judges._cache import ResponseCache, cache_key
from clinjudge.judges._doclens_citations import source_units
from clinjudge.judges._doclens_settings import DocLensSettings
from clinjudge.judges._faults import ProviderFault, classify_fault
from clinjudge.judges._litellm_client import LiteLLMChatCompletionClient
from clinjudge.judges._mock_client import (
    SIMULATED_NOTICE,
    MockChatCompletionClient,
    simulated_scores,
)
from clinjudge.judges._model import (
    CallOutcome,
    JudgeModel,
    ModelConfigError,
    build_client,
    to_autogen_messages,
)
from clinjudge.judges._nli import NLIError, NLIModel, load_nli
from clinjudge.judges._settings import ModelSettings, Price, ReasoningEffort
from clinjudge.judges._single import CallFn, SampleVerdict, draw_shots, judge_single_sample

__all__ = [
    "GENERIC_MODEL_INFO",
    "SIMULATED_NOTICE",
    "BatchClient",
    "BatchLine",
    "BatchState",
    "CallFn",
    "CallOutcome",
    "DocLensSettings",
    "JudgeModel",
    "LiteLLMChatCompletionClient",
    "MockChatCompletionClient",
    "NLIError",
    "NLIModel",
    "ModelConfigError",
    "ModelSettings",
    "Price",
    "ProviderFault",
    "ReasoningEffort",
    "ResponseCache",
    "SampleVerdict",
    "SimpleChatCompletionClient",
    "batch_call_cost",
    "batch_price_per_token",
    "build_client",
    "cache_key",
    "call_cost",
    "classify_fault",
    "count_message_tokens",
    "count_tokens",
    "draw_shots",
    "judge_single_sample",
    "load_nli",
    "price_per_token",
    "simulated_scores",
    "source_units",
    "to_autogen_messages",
]
