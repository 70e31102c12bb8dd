"""Checks a run passes before anything is written: models it loads in this process must load."""

from __future__ import annotations

from clinjudge._util.ray_cluster import check_reachable, ray_address, refuse_ray_client
from clinjudge.judges.doclens import NLIError, load_nli
from clinjudge.judges.workflows import prm_scorer
from clinjudge.orchestration._config import ConfigError, RunConfig
from clinjudge.prm_bridge import PRMRunSettings, require_ray
from clinjudge.rubrics import Rubric


def check_prm_config(config: RunConfig, rubric: Rubric) -> None:
    """Load the PRM before anything is written, so a bad model is a configuration error (and
    check that Ray is installed when a model runs on it).

    Args:
        config: The run configuration.
        rubric: The run's rubric (claim rubrics have no place for PRM evidence).

    Raises:
        ConfigError: The PRM cannot be used.
    """
    check_ray_models(config)
    if config.prm is None:
        return
    if rubric.method != "scores":
        raise ConfigError(f"prm: rubric {rubric.name} is judged by claims; PRM evidence needs a "
                          "scoring rubric")  # fmt: skip
    if config.prm.ray is not None:
        check_ray(config.prm)
    try:
        prm_scorer(config.prm)
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"prm model {config.prm.model}: {exc}") from exc


def check_ray(settings: PRMRunSettings) -> None:
    """``prm.ray`` needs Ray here, the model on the workers (not a vLLM server), and a cluster
    that answers, joined as a node (not through Ray Client).

    Raises:
        RayDependencyError: Ray is not installed (one line naming the ``ray`` extra).
        RayConnectError: The cluster ``prm.ray`` names cannot be reached in time.
        ConfigError: ``prm.url`` is set as well.
        UserError: ``prm.ray`` is a ``ray://`` address.
    """
    if settings.url:
        raise ConfigError("--ray loads the PRM on the Ray workers; it does not combine with "
                          "--prm-url")  # fmt: skip
    require_ray()
    refuse_ray_client(ray_address(settings.ray))  # its Ray Dataset needs a driver in the cluster
    check_reachable(ray_address(settings.ray))


def check_ray_models(config: RunConfig) -> None:
    """``hf/`` models with ``ray`` need Ray here (the replicas load the model on the workers),
    and the cluster they name must answer.

    Raises:
        RayDependencyError: Ray is not installed (one line naming the ``ray`` extra).
        RayConnectError: A cluster the models name cannot be reached in time.
    """
    addresses = {
        s.ray for s in (config.judge, *config.roles.values()) if s is not None and s.ray is not None
    }
    if addresses:
        require_ray()
    for value in sorted(addresses):
        check_reachable(ray_address(value))


def check_ray_config(config: RunConfig) -> None:
    """What a resumed run on Ray needs before it continues (Ray installed, clusters that
    answer); a new run gets the same checks from :func:`check_prm_config`.

    Raises:
        RayDependencyError: Ray is not installed.
        RayConnectError: A cluster the settings name cannot be reached in time.
        ConfigError: ``prm.ray`` with ``prm.url``.
    """
    check_ray_models(config)
    if config.prm is not None and config.prm.ray is not None:
        check_ray(config.prm)


def check_doclens_config(config: RunConfig) -> None:
    """Fail before anything is written when the DocLens settings cannot work (for
    ``prepare_run`` with a claim rubric): loads the NLI model once, so a bad path or a model
    without an entailment label is a configuration error, not a crash mid-run.

    Args:
        config: The run configuration.

    Raises:
        ConfigError: The NLI model cannot be loaded or used.
    """
    settings = config.doclens
    if not settings.nli_model:
        return
    try:
        load_nli(settings.nli_model, device=settings.nli_device)
    except NLIError as exc:
        raise ConfigError(f"doclens.nli_model: {exc}") from exc
