"""Checks a run passes before anything is written: models it loads in this process must load."""

from __future__ import annotations

from clinjudge.judges.doclens import NLIError, load_nli
from clinjudge.judges.workflows import prm_scorer
from clinjudge.orchestration._config import ConfigError, RunConfig
from clinjudge.rubrics import Rubric


def check_prm_config(config: RunConfig, rubric: Rubric) -> None:
    """Load the PRM before anything is written, so a bad model is a configuration error.

    Args:
        config: The run configuration.
        rubric: The run's rubric (claim rubrics have no place for PRM evidence).

    Raises:
        ConfigError: The PRM cannot be used.
    """
    if config.prm is None:
        return
    if rubric.method != "scores":
        raise ConfigError(f"prm: rubric {rubric.name} is judged by claims; PRM evidence needs a "
                          "scoring rubric")  # fmt: skip
    try:
        prm_scorer(config.prm)
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"prm model {config.prm.model}: {exc}") from exc


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
