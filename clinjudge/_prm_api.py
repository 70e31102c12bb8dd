"""The Python API of process reward models: score every step of every candidate
(:func:`score_prm`), pick the best candidate per input (:func:`best_of_n_prm`), and measure a
PRM against step labels (:func:`evaluate_prm`). `judge prm score|best-of-n|eval` are thin
shells over these functions, as `judge run` is over ``evaluate``.

Kept apart from ``_api``: it needs no judge workflow, so a PRM pass does not load them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from clinjudge._args import (
    _db,
    _flag,
    _optional_path,
    _path,
    _whole,
    _wrong,
)
from clinjudge._util.pandas_import import PANDAS_NEEDED
from clinjudge.errors import UserError
from clinjudge.orchestration import (
    PRMCommand,
    PRMNotice,
    PRMRunStopped,
    PRMScoring,
    PRMSettings,
    best_of_n,
    labelled_steps,
    score_prm_chains,
    store_prm_run,
)
from clinjudge.prm_bridge import AGGREGATES, ChainScore, EvalReport, PRMModelError, evaluate

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "PRMBestOfNResult",
    "PRMCandidate",
    "PRMEvalResult",
    "PRMModelError",
    "PRMNotice",
    "PRMOptions",
    "PRMPick",
    "PRMRunStopped",
    "PRMScoreResult",
    "best_of_n_prm",
    "evaluate_prm",
    "score_prm",
]

logger = logging.getLogger(__name__)


class PRMOptions(TypedDict, total=False):
    """The settings every PRM function takes besides the input, the model and the threshold
    (`judge prm`'s options of the same names).

    Args:
        preset: Format preset: ``medprm`` (default), ``prm-clinic``, ``math-shepherd`` or
            ``custom``.
        format_fields: Format fields over the preset's: a mapping, or ``KEY=VALUE`` strings
            with JSON values (as `--set` takes them).
        format_file: YAML/JSON file of format fields, read before ``format_fields``.
        segment: Split ``text`` as ``medprm``, ``chain``, ``note`` or ``lines`` (default: the
            format's).
        device: ``auto`` (default), ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``auto`` (bf16 on GPU, fp32 on CPU) or a torch dtype name.
        attn: ``auto``, ``sdpa``, ``flash_attention_2`` or ``eager``.
        batch_tokens: Padded tokens per forward pass (default 16384).
        max_length: Token limit (default: the format's, else the model's).
        prm_url: A vLLM pooling server to call instead of loading the model here.
        served_model: The model's name on the ``prm_url`` server.
        api_key: Bearer token for ``prm_url`` (default ``$CLINJUDGE_PRM_API_KEY``).
        db: The run store (default ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb).
        store: Record the run in ``db`` (default True).
        name: Label for the stored run.
        ray: Score on Ray, one model per replica: ``local``, ``auto`` or the head's
            ``HOST:PORT``.
        ray_replicas: Ray model replicas (default: one per GPU, else one).
        ray_batch: Candidates a Ray replica takes at a time, stored per batch (default 64).
        ray_connect_timeout: Seconds to wait for the Ray cluster to answer (default
            ``$CLINJUDGE_RAY_CONNECT_TIMEOUT``, else 30).
        resume: With ``ray``: finish this stored run, scoring only the candidates it lacks.
        on_notice: Receives progress lines, candidates' warnings and errors, and where the
            run was stored (default: this module's logger).
    """

    preset: str
    format_fields: Mapping[str, Any] | Sequence[str] | None
    format_file: str | Path | None
    segment: str | None
    device: str
    dtype: str
    attn: str
    batch_tokens: int
    max_length: int | None
    prm_url: str | None
    served_model: str | None
    api_key: str | None
    db: str | Path | None
    store: bool
    name: str | None
    ray: str | None
    ray_replicas: int | None
    ray_batch: int
    ray_connect_timeout: float | None
    resume: str | None
    on_notice: Callable[[PRMNotice], None] | None


class PRMScoreResult(BaseModel):
    """A PRM pass: every candidate's step scores, and where the run was stored.

    ``to_arrow()``/``to_pandas()`` give one row per step.

    Args:
        run_id: The stored run (None with ``store=False``).
        db: The database holding it (None with ``store=False``).
        model: The PRM (the served name with ``prm_url``).
        threshold: Steps scoring below it are flagged.
        results: One scored candidate per input row, in input order.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str | None
    db: str | None
    model: str
    threshold: float
    results: list[ChainScore]

    @property
    def failed(self) -> int:
        """Candidates that could not be scored."""
        return sum(1 for r in self.results if r.error)

    def to_arrow(self) -> pa.Table:
        """One row per step: id, candidate, step, kind, score, flagged, label, error type."""
        rows = [
            {"id": r.id, "candidate": r.candidate, "step": s.index, "kind": s.kind,
             "text": s.text, "score": s.score, "flagged": s.flagged, "label": s.label,
             "error_type": s.error_type}
            for r in self.results
            for s in r.steps
        ]  # fmt: skip
        return pa.Table.from_pylist(rows, schema=_STEP_SCHEMA)

    def to_pandas(self) -> pd.DataFrame:
        """:meth:`to_arrow` as a pandas DataFrame."""
        return _pandas(self.to_arrow())


def _pandas(table: pa.Table) -> pd.DataFrame:
    """``table.to_pandas()``, or an ImportError that says how to install pandas."""
    try:
        import pandas  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{PANDAS_NEEDED}; to_arrow() gives the same table without it") from exc
    return table.to_pandas()


_STEP_SCHEMA = pa.schema(
    [("id", pa.string()), ("candidate", pa.string()), ("step", pa.int64()),
     ("kind", pa.string()), ("text", pa.string()), ("score", pa.float64()),
     ("flagged", pa.bool_()), ("label", pa.int64()), ("error_type", pa.string())]
)  # fmt: skip


class PRMCandidate(BaseModel):
    """A candidate in a best-of-n ranking.

    Args:
        candidate: The candidate's name.
        score: Its aggregate (None when it has no score).
    """

    model_config = ConfigDict(frozen=True)

    candidate: str
    score: float | None


class PRMPick(BaseModel):
    """The best candidate of one input id.

    Args:
        id: The input id.
        best: The chosen candidate (None when no candidate has a score).
        score: Its aggregate.
        ranking: Every candidate, best first; ties keep input order.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    best: str | None
    score: float | None
    ranking: list[PRMCandidate]


class PRMBestOfNResult(PRMScoreResult):
    """A best-of-n selection: the scores, and the best candidate per input id.

    ``to_arrow()``/``to_pandas()`` give one row per step; ``picks_to_pandas()`` one row per
    input id and candidate, with its rank.

    Args:
        aggregate: The aggregate compared (``min``, ``product``, ...).
        items: One pick per input id, in input order.
    """

    aggregate: str
    items: list[PRMPick]

    def picks_to_arrow(self) -> pa.Table:
        """One row per input id and candidate: id, candidate, score, rank (1 = best), best."""
        rows = [
            {"id": p.id, "candidate": c.candidate, "score": c.score, "rank": rank,
             "best": c.candidate == p.best}
            for p in self.items
            for rank, c in enumerate(p.ranking, start=1)
        ]  # fmt: skip
        return pa.Table.from_pylist(rows, schema=_PICK_SCHEMA)

    def picks_to_pandas(self) -> pd.DataFrame:
        """:meth:`picks_to_arrow` as a pandas DataFrame."""
        return _pandas(self.picks_to_arrow())


_PICK_SCHEMA = pa.schema(
    [("id", pa.string()), ("candidate", pa.string()), ("score", pa.float64()),
     ("rank", pa.int64()), ("best", pa.bool_())]
)  # fmt: skip


class PRMEvalResult(PRMScoreResult):
    """A PRM measured against step labels: the scores and the report (PRMScore, F1s,
    accuracies, first-error accuracy).

    Args:
        report: The metrics, overall, per step kind and per error type.
    """

    report: EvalReport


def _number(name: str, value: object) -> float:
    """A finite number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _wrong(name, "a finite number", value)
    return float(value)


def _str(name: str, value: object) -> str:
    """A string, empty allowed: an empty one means what it meant to `judge prm` (not given)."""
    if not isinstance(value, str):
        raise _wrong(name, "a string", value)
    return value


def _optional_str(name: str, value: object) -> str | None:
    return None if value is None else _str(name, value)


def _optional_whole(name: str, value: object) -> int | None:
    return None if value is None else _whole(name, value, 1)


def _fields(value: object) -> Mapping[str, Any] | Sequence[str]:
    """Format fields: a mapping, or ``KEY=VALUE`` strings (never one bare string)."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        return value
    if isinstance(value, Sequence) and not isinstance(value, str):
        strings = list(value)
        if all(isinstance(one, str) for one in strings):
            return strings
    raise _wrong("format_fields", "a mapping or a list of KEY=VALUE strings", value)


def _settings(input: object, model: object, threshold: object, options: PRMOptions) -> PRMSettings:
    """The checked settings of a PRM pass; a wrong value is a ``UserError`` naming it."""
    unknown = sorted(set(options) - PRMOptions.__optional_keys__)
    if unknown:
        known = ", ".join(sorted(PRMOptions.__optional_keys__))
        raise UserError(f"unknown setting {unknown[0]!r}; PRM settings are {known}",
                        setting=unknown[0])  # fmt: skip
    get = dict[str, Any](options).get
    format_file = _optional_path("format_file", get("format_file"))
    return PRMSettings(
        model=_str("model", model),
        input=Path(_path("input", input)),
        preset=_str("preset", get("preset", "medprm")),
        format_fields=_fields(get("format_fields")),
        format_file=None if format_file is None else Path(format_file),
        segment=_optional_str("segment", get("segment")),
        threshold=_number("threshold", threshold),
        device=_str("device", get("device", "auto")),
        dtype=_str("dtype", get("dtype", "auto")),
        attn=_str("attn", get("attn", "auto")),
        batch_tokens=_whole("batch_tokens", get("batch_tokens", 16384), 1),
        max_length=_optional_whole("max_length", get("max_length")),
        prm_url=_optional_str("prm_url", get("prm_url")),
        served_model=_optional_str("served_model", get("served_model")),
        api_key=_optional_str("api_key", get("api_key")),
        db=_db(get("db")),
        store=bool(_flag("store", get("store", True))),
        name=_optional_str("name", get("name")),
        ray=_optional_str("ray", get("ray")),
        ray_replicas=_optional_whole("ray_replicas", get("ray_replicas")),
        ray_batch=_whole("ray_batch", get("ray_batch", 64), 1),
        # Checked where it is read (``connect_timeout``), as for `judge run --ray`.
        ray_connect_timeout=get("ray_connect_timeout"),
        resume=_optional_str("resume", get("resume")),
    )


def _log(notice: PRMNotice) -> None:
    level = {"info": logging.INFO, "warning": logging.WARNING}.get(notice.level, logging.ERROR)
    logger.log(level, "%s", notice.text)


def _run(
    settings: PRMSettings,
    options: PRMOptions,
    command: PRMCommand,
    extra: Callable[[PRMScoring], dict[str, Any]],
    *,
    need_labels: bool = False,
) -> tuple[PRMScoring, str | None]:
    """Score, then store the run with the command's config fields (``extra``, computed from
    the scores whether or not the run is stored)."""
    notify = options.get("on_notice") or _log
    scoring = score_prm_chains(settings, command=command, need_labels=need_labels, notify=notify)
    run_id = store_prm_run(settings, scoring, {"command": command, **extra(scoring)}, notify)
    return scoring, run_id


def _base(settings: PRMSettings, scoring: PRMScoring, run_id: str | None) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "db": settings.db if run_id else None,
        "model": settings.stored_model,
        "threshold": settings.threshold,
        "results": scoring.results,
    }


def score_prm(
    input: str | Path,
    *,
    model: str,
    threshold: float = 0.5,
    **options: Unpack[PRMOptions],
) -> PRMScoreResult:
    """Score every step of every candidate with a process reward model; flag steps below
    ``threshold``; store the run.

    Example::

        result = clinjudge.score_prm("chains.jsonl", model="dmis-lab/llama-3.1-medprm-reward-v1.0",
                                     device="cpu", store=False)
        result.to_pandas()  # one row per step

    A candidate that cannot be scored (too long, empty) is kept with its ``error``; check
    ``result.failed``.

    Args:
        input: JSONL/CSV/Parquet of candidates: ``{id, candidate?, text | steps | note,
            question?, ...}``.
        model: PRM checkpoint directory or hub id (with ``prm_url``: its tokenizer).
        threshold: Steps scoring below it are flagged.
        **options: See :class:`PRMOptions`.

    Raises:
        UserError: Bad settings, input or model; nothing is stored.
        PRMModelError: The model failed while scoring.
        PRMRunStopped: A Ray pass failed or was interrupted (``resume`` finishes it).
    """
    settings = _settings(input, model, threshold, options)
    scoring, run_id = _run(settings, options, "score", lambda _: {"threshold": settings.threshold})
    return PRMScoreResult(**_base(settings, scoring, run_id))


def best_of_n_prm(
    input: str | Path,
    *,
    model: str,
    aggregate: str | None = None,
    threshold: float = 0.5,
    **options: Unpack[PRMOptions],
) -> PRMBestOfNResult:
    """Score every candidate and pick the best per input id (ties go to the earliest in the
    file); store the run.

    Args:
        input: Candidates, several per ``id`` (see :func:`score_prm`).
        model: PRM checkpoint directory or hub id.
        aggregate: How a candidate's step scores become one: ``min``, ``product``, ``last``,
            ``mean``, ``geomean``, ``median``, ``max``, ``sum`` or ``threshold`` (default: the
            format's).
        threshold: Steps scoring below it are flagged.
        **options: See :class:`PRMOptions`.
    """
    if aggregate is not None and aggregate not in AGGREGATES:
        raise UserError(f"aggregate {aggregate!r}: choose from {', '.join(AGGREGATES)}",
                        setting="aggregate")  # fmt: skip
    settings = _settings(input, model, threshold, options)

    def how(scoring: PRMScoring) -> str:
        return aggregate or scoring.fmt.aggregate

    def extra(scoring: PRMScoring) -> dict[str, Any]:
        return {"aggregate": how(scoring), "threshold": settings.threshold}

    scoring, run_id = _run(settings, options, "best-of-n", extra)
    picks = [
        PRMPick(id=p.id, best=p.best, score=p.score,
                ranking=[PRMCandidate(candidate=c, score=v) for c, v in p.ranking])
        for p in best_of_n(scoring.results, how(scoring))
    ]  # fmt: skip
    return PRMBestOfNResult(**_base(settings, scoring, run_id), aggregate=how(scoring),
                            items=picks)  # fmt: skip


def evaluate_prm(
    input: str | Path,
    *,
    model: str,
    threshold: float = 0.5,
    **options: Unpack[PRMOptions],
) -> PRMEvalResult:
    """Measure a PRM against step labels (PRMScore, F1s, accuracies, first-error accuracy);
    store the run with its report.

    Args:
        input: Candidates whose steps carry labels (``label`` per step, or ``labels``).
        model: PRM checkpoint directory or hub id.
        threshold: A step scoring below it is predicted erroneous.
        **options: See :class:`PRMOptions`.
    """
    settings = _settings(input, model, threshold, options)
    reports: list[EvalReport] = []

    def report(scoring: PRMScoring) -> dict[str, Any]:
        reports.append(evaluate(labelled_steps(scoring.results), settings.threshold))
        return {"threshold": settings.threshold, "report": reports[0].model_dump(mode="json")}

    scoring, run_id = _run(settings, options, "eval", report, need_labels=True)
    return PRMEvalResult(**_base(settings, scoring, run_id), report=reports[0])
