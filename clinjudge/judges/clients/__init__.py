"""Model clients: OpenAI, Azure OpenAI, any OpenAI-compatible server, litellm and the mock
provider, with fault classification, token and cost accounting, the response cache and the
provider batch API."""

from clinjudge._util.modes import SIMULATED_NOTICE
from clinjudge.judges.clients._accounting import (
    COUNT_ENCODING,
    bundled_model_map,
    count_message_tokens,
    count_tokens,
    model_map_names,
)
from clinjudge.judges.clients._batch_api import (
    BatchClient,
    BatchFile,
    BatchFileError,
    BatchLineTooLarge,
    BatchState,
    batch_call_cost,
    batch_output_mode,
    batch_price_per_token,
    batch_supported,
    check_batch_settings,
    count_batch_files,
    pack_batch_file,
    request_line,
)
from clinjudge.judges.clients._batch_lines import BatchLine, BatchResults
from clinjudge.judges.clients._cache import ResponseCache, hash_model_files
from clinjudge.judges.clients._call_config import PLAIN_CALL, CallConfig
from clinjudge.judges.clients._completion import ToolCall
from clinjudge.judges.clients._faults import TIMED_OUT, ProviderFault
from clinjudge.judges.clients._hf_warmup import DecodeTiming, measure_decoding
from clinjudge.judges.clients._messages import ChatMessage, ToolResult
from clinjudge.judges.clients._mock_client import register_simulated_replies
from clinjudge.judges.clients._model import (
    CallOutcome,
    JudgeModel,
    check_credentials,
)
from clinjudge.judges.clients._pricing import (
    context_window,
    counts_exactly,
    price_per_token,
    token_prices,
)
from clinjudge.judges.clients._settings import ModelConfigError, ModelSettings
from clinjudge.judges.clients._structured import ReplySchema, reply_schema, reply_schema_for
from clinjudge.judges.clients.providers import (
    ENTRY_POINT_GROUP,
    HF_PROVIDERS,
    Completion,
    Generation,
    ModelClient,
    PrefixCache,
    Provider,
    provider_for,
    provider_named,
    provider_names,
    register_provider,
)

__all__ = [
    "BatchClient",
    "COUNT_ENCODING",
    "ENTRY_POINT_GROUP",
    "HF_PROVIDERS",
    "BatchFile",
    "BatchFileError",
    "BatchLine",
    "BatchLineTooLarge",
    "BatchResults",
    "BatchState",
    "CallConfig",
    "CallOutcome",
    "ChatMessage",
    "Completion",
    "DecodeTiming",
    "Generation",
    "JudgeModel",
    "ModelClient",
    "ModelConfigError",
    "ModelSettings",
    "PLAIN_CALL",
    "PrefixCache",
    "Provider",
    "ProviderFault",
    "ReplySchema",
    "ResponseCache",
    "SIMULATED_NOTICE",
    "ToolCall",
    "ToolResult",
    "TIMED_OUT",
    "batch_call_cost",
    "batch_output_mode",
    "batch_price_per_token",
    "batch_supported",
    "check_credentials",
    "context_window",
    "provider_for",
    "provider_named",
    "provider_names",
    "register_provider",
    "hash_model_files",
    "measure_decoding",
    "bundled_model_map",
    "check_batch_settings",
    "count_batch_files",
    "pack_batch_file",
    "count_message_tokens",
    "count_tokens",
    "counts_exactly",
    "model_map_names",
    "price_per_token",
    "token_prices",
    "register_simulated_replies",
    "request_line",
    "reply_schema",
    "reply_schema_for",
]
