"""Model clients: OpenAI, Azure OpenAI, any OpenAI-compatible server, litellm and the mock
provider, with fault classification, token and cost accounting, the response cache and the
provider batch API."""

from clinjudge.judges.clients._accounting import (
    COUNT_ENCODING,
    TokenPrices,
    bundled_model_map,
    call_cost,
    count_message_tokens,
    count_tokens,
    counts_exactly,
    model_map_names,
    price_per_token,
    token_prices,
)
from clinjudge.judges.clients._base_client import GENERIC_MODEL_INFO, SimpleChatCompletionClient
from clinjudge.judges.clients._batch_api import (
    BatchClient,
    BatchLine,
    BatchState,
    batch_call_cost,
    batch_price_per_token,
    batch_supported,
    check_batch_settings,
    request_line,
)
from clinjudge.judges.clients._cache import ResponseCache, cache_key
from clinjudge.judges.clients._faults import TIMED_OUT, ProviderFault, classify_fault
from clinjudge.judges.clients._litellm_client import LiteLLMChatCompletionClient
from clinjudge.judges.clients._mock_client import (
    SIMULATED_NOTICE,
    MockChatCompletionClient,
    SimulatedReplies,
    register_simulated_replies,
    simulated_scores,
)
from clinjudge.judges.clients._model import (
    CallOutcome,
    JudgeModel,
    ModelConfigError,
    build_client,
    check_credentials,
    to_autogen_messages,
)
from clinjudge.judges.clients._settings import (
    ModelSettings,
    Price,
    ReasoningEffort,
    StructuredOutput,
)
from clinjudge.judges.clients._structured import (
    OutputMode,
    ReplySchema,
    openai_response_format,
    requested_schema,
    split_schema,
    structured_reply,
)

__all__ = [
    "BatchClient",
    "COUNT_ENCODING",
    "BatchLine",
    "BatchState",
    "CallOutcome",
    "GENERIC_MODEL_INFO",
    "JudgeModel",
    "LiteLLMChatCompletionClient",
    "MockChatCompletionClient",
    "ModelConfigError",
    "ModelSettings",
    "OutputMode",
    "Price",
    "ProviderFault",
    "ReasoningEffort",
    "ReplySchema",
    "ResponseCache",
    "SIMULATED_NOTICE",
    "SimpleChatCompletionClient",
    "SimulatedReplies",
    "StructuredOutput",
    "TIMED_OUT",
    "batch_call_cost",
    "batch_price_per_token",
    "batch_supported",
    "build_client",
    "check_credentials",
    "bundled_model_map",
    "cache_key",
    "call_cost",
    "check_batch_settings",
    "classify_fault",
    "count_message_tokens",
    "count_tokens",
    "counts_exactly",
    "model_map_names",
    "openai_response_format",
    "price_per_token",
    "TokenPrices",
    "token_prices",
    "register_simulated_replies",
    "request_line",
    "requested_schema",
    "simulated_scores",
    "split_schema",
    "structured_reply",
    "to_autogen_messages",
]
