"""Run orchestration: configuration, the batch runner, retries, and run lifecycle."""

from clinjudge.orchestration import (
    _doclens,  # noqa: F401  (registers the DocLens workflows of claim rubrics)
    _magentic,  # noqa: F401  (registers --mode magentic)
    _panel,  # noqa: F401  (registers --mode panel)
)
from clinjudge.orchestration._audit_prep import prepare_audit
from clinjudge.orchestration._batch_run import (
    BatchRun,
    check_batch_config,
    estimate_batch_run,
    execute_batch_run,
    is_batch_run,
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
    WorkflowResult,
)
from clinjudge.orchestration._doclens import (
    doclens_estimate_prompts,
    doclens_magentic,
    doclens_panel,
    doclens_single,
)
from clinjudge.orchestration._limits import FakeClock, MonotonicClock, RateLimiter
from clinjudge.orchestration._progress import PROGRESS_SECONDS_ENV, RunProgress, progress_line
from clinjudge.orchestration._retry import call_with_retries, retry_send
from clinjudge.orchestration._run_settings import (
    DEFAULT_MODEL_ENV,
    FALLBACK_MODEL,
    default_model,
    doclens_settings,
    prm_settings,
    role_models,
    run_config_from,
)
from clinjudge.orchestration._runner import (
    JUDGE_AGENT,
    BatchRunner,
    CircuitBreakerOpen,
    RunTally,
    RunWriteError,
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
from clinjudge.orchestration._workflows import (
    Workflow,
    register_claims_workflow,
    register_workflow,
    single_workflow,
    workflow_for,
)

__all__ = [
    "PROGRESS_SECONDS_ENV",
    "RunProgress",
    "progress_line",
    "prepare_audit",
    "DEFAULT_MODEL_ENV",
    "FALLBACK_MODEL",
    "default_model",
    "doclens_settings",
    "prm_settings",
    "role_models",
    "run_config_from",
    "doclens_estimate_prompts",
    "doclens_magentic",
    "doclens_panel",
    "doclens_single",
    "JUDGE_AGENT",
    "BatchRun",
    "BatchRunner",
    "ConfigError",
    "DryRunEstimate",
    "Mode",
    "PreparedRun",
    "RetryPolicy",
    "RunConfig",
    "RunTally",
    "RunWriteError",
    "CircuitBreakerOpen",
    "ShotRecord",
    "WorkUnit",
    "apply_shard",
    "build_config",
    "call_with_retries",
    "check_batch_config",
    "create_run",
    "estimate_batch_run",
    "estimate_run",
    "execute_batch_run",
    "execute_run",
    "execute_run_async",
    "is_batch_run",
    "load_config_file",
    "load_shot_pool",
    "load_stored_run",
    "mark_failed",
    "missing_work",
    "new_run_id",
    "prepare_run",
    "ModelPool",
    "RecordingClient",
    "SampleContext",
    "WorkflowResult",
    "retry_send",
    "FakeClock",
    "MonotonicClock",
    "RateLimiter",
    "Workflow",
    "register_claims_workflow",
    "register_workflow",
    "single_workflow",
    "workflow_for",
]
