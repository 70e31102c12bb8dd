"""Running a judge configuration over a dataset: run settings (one place where defaults, config
files and flags meet), preparation and preflight checks, the sample runner (concurrency, rate
limits, retries, budgets, circuit breaker, batched durable writes), resume, shards, and runs
through a provider's batch API.
"""

from clinjudge.orchestration._audit_prep import prepare_audit
from clinjudge.orchestration._batch_run import (
    BatchRun,
    check_batch_config,
    estimate_batch_run,
    execute_batch_run,
)
from clinjudge.orchestration._config import (
    ConfigError,
    Mode,
    RetryPolicy,
    RunConfig,
    build_config,
    load_config_file,
)
from clinjudge.orchestration._context import (
    ModelPool,
    RecordingClient,
    SampleContext,
    resolve_run_personas,
)
from clinjudge.orchestration._limits import FakeClock, MonotonicClock, RateLimiter
from clinjudge.orchestration._preflight import check_doclens_config, check_prm_config
from clinjudge.orchestration._progress import (
    PROGRESS_SECONDS_ENV,
    RunProgress,
    progress_interval,
    progress_line,
)
from clinjudge.orchestration._retry import (
    call_with_retries,
    retry_send,
    timed_out_calls,
    timeout_advice,
)
from clinjudge.orchestration._run_settings import (
    DEFAULT_MODEL_ENV,
    FALLBACK_MODEL,
    default_model,
    doclens_settings,
    prm_settings,
    role_models,
    run_config_from,
)
from clinjudge.orchestration._sample_runner import (
    CircuitBreakerOpen,
    RunTally,
    RunWriteError,
    SampleRunner,
    WorkUnit,
)
from clinjudge.orchestration._session import (
    DryRunEstimate,
    PreparedRun,
    ShotRecord,
    apply_shard,
    create_run,
    estimate_run,
    execute_run,
    execute_run_async,
    load_shot_pool,
    load_stored_run,
    mark_failed,
    missing_work,
    new_run_id,
    prepare_run,
)

__all__ = [
    "BatchRun",
    "CircuitBreakerOpen",
    "ConfigError",
    "DEFAULT_MODEL_ENV",
    "DryRunEstimate",
    "FALLBACK_MODEL",
    "FakeClock",
    "Mode",
    "ModelPool",
    "MonotonicClock",
    "PROGRESS_SECONDS_ENV",
    "PreparedRun",
    "RateLimiter",
    "RecordingClient",
    "RetryPolicy",
    "RunConfig",
    "RunProgress",
    "RunTally",
    "RunWriteError",
    "SampleContext",
    "SampleRunner",
    "ShotRecord",
    "WorkUnit",
    "apply_shard",
    "build_config",
    "call_with_retries",
    "check_batch_config",
    "check_doclens_config",
    "check_prm_config",
    "create_run",
    "default_model",
    "doclens_settings",
    "estimate_batch_run",
    "estimate_run",
    "execute_batch_run",
    "execute_run",
    "execute_run_async",
    "load_config_file",
    "load_shot_pool",
    "load_stored_run",
    "mark_failed",
    "missing_work",
    "new_run_id",
    "prepare_audit",
    "prepare_run",
    "prm_settings",
    "progress_interval",
    "progress_line",
    "resolve_run_personas",
    "retry_send",
    "role_models",
    "run_config_from",
    "timed_out_calls",
    "timeout_advice",
]
