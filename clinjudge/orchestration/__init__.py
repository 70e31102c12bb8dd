"""Running a judge configuration over a dataset: run settings (one place where defaults, config
files and flags meet), preparation and preflight checks, the sample runner (concurrency, rate
limits, retries, budgets, circuit breaker, batched durable writes), resume, shards, and runs
through a provider's batch API.
"""

from clinjudge.orchestration._audit_prep import prepare_audit
from clinjudge.orchestration._batch_run import BatchRun, check_batch_config, estimate_batch_run
from clinjudge.orchestration._config import ConfigError, Mode, RetryPolicy, RunConfig
from clinjudge.orchestration._context import SampleContext
from clinjudge.orchestration._execute import execute_run, execute_run_async
from clinjudge.orchestration._local_estimate import duration_text, estimate_local_wall_time
from clinjudge.orchestration._preflight import check_ray_config
from clinjudge.orchestration._prm_run import (
    PRMScoring,
    best_of_n,
    labelled_steps,
    score_prm_chains,
    store_prm_run,
)
from clinjudge.orchestration._prm_settings import (
    PRMCommand,
    PRMNotice,
    PRMRunStopped,
    PRMSettings,
)
from clinjudge.orchestration._probe_perturb import perturb_variants, perturber_settings
from clinjudge.orchestration._probe_prep import create_probe_run, prepare_probe
from clinjudge.orchestration._progress import progress_interval
from clinjudge.orchestration._retry import timed_out_calls, timeout_advice
from clinjudge.orchestration._run_settings import run_config_from
from clinjudge.orchestration._sample_runner import (
    CircuitBreakerOpen,
    RunTally,
    RunWriteError,
    SampleRunner,
)
from clinjudge.orchestration._session import (
    DryRunEstimate,
    PreparedRun,
    create_run,
    estimate_run,
    load_stored_run,
    pending_work,
    prepare_run,
)

__all__ = [
    "BatchRun",
    "PRMCommand",
    "PRMNotice",
    "PRMRunStopped",
    "PRMScoring",
    "PRMSettings",
    "best_of_n",
    "labelled_steps",
    "score_prm_chains",
    "store_prm_run",
    "CircuitBreakerOpen",
    "ConfigError",
    "DryRunEstimate",
    "Mode",
    "PreparedRun",
    "RetryPolicy",
    "RunConfig",
    "RunTally",
    "RunWriteError",
    "SampleContext",
    "SampleRunner",
    "check_batch_config",
    "create_probe_run",
    "check_ray_config",
    "create_run",
    "estimate_batch_run",
    "estimate_run",
    "estimate_local_wall_time",
    "duration_text",
    "execute_run",
    "execute_run_async",
    "load_stored_run",
    "pending_work",
    "prepare_audit",
    "prepare_probe",
    "perturb_variants",
    "perturber_settings",
    "prepare_run",
    "progress_interval",
    "run_config_from",
    "timed_out_calls",
    "timeout_advice",
]
