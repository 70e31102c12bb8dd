"""A PRM scoring run (`judge prm`, ``clinjudge.score_prm``): build the format, read the
candidates, score them in this process, on a vLLM server or on Ray, and store the run.

What a person should see while it runs (Ray progress, a candidate's warnings, where the run
was stored) goes to a ``notify`` callback as :class:`PRMNotice` lines, in the order they
happen; the caller decides how to show them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard

from clinjudge.errors import UserError
from clinjudge.orchestration._prm_ray import score_with_ray
from clinjudge.orchestration._prm_settings import (
    PRM_API_KEY_ENV,
    Notify,
    PRMCommand,
    PRMNotice,
    PRMSettings,
    RayRun,
)
from clinjudge.orchestration._session import new_run_id
from clinjudge.prm_bridge import (
    SEGMENTERS,
    Chain,
    ChainScore,
    PRMModelError,
    PRMScorer,
    Segmenter,
    best_candidate,
    load_chains,
    load_format_file,
    make_format,
    parse_overrides,
)
from clinjudge.runs import RunStore, end_prm_run, now, write_prm_run


@dataclass
class PRMScoring:
    """The scores of a pass, before the run is closed.

    Args:
        fmt: The PRM format used.
        results: One result per candidate, in input order.
        started: When scoring began (a resumed run's first start).
        ray_run: The Ray pass (None in one process).
    """

    fmt: Any
    results: list[ChainScore]
    started: datetime
    ray_run: RayRun | None = None


def prm_format(settings: PRMSettings) -> Any:
    """The format: the preset, then the format file's fields, then ``format_fields``."""
    fields = load_format_file(settings.format_file) if settings.format_file else {}
    extra = settings.format_fields
    fields.update(dict(extra) if isinstance(extra, Mapping) else parse_overrides(list(extra)))
    return make_format(settings.preset, fields)


def _chains(settings: PRMSettings, fmt: Any, need_labels: bool) -> list[Chain]:
    def known(name: str) -> TypeGuard[Segmenter]:
        return name in SEGMENTERS

    segment = settings.segment or fmt.segmenter
    if not known(segment):
        raise UserError(f"segment {segment!r}: choose {', '.join(SEGMENTERS)}", setting="segment")
    return load_chains(settings.input, segment, need_labels=need_labels, section=fmt.section)


def prm_config(settings: PRMSettings, fmt: Any) -> dict[str, Any]:
    """The settings every stored PRM run keeps in its config."""
    return {
        "format": fmt.model_dump(mode="json"),
        "device": settings.device,
        "dtype": settings.dtype,
        "batch_tokens": settings.batch_tokens,
        "prm_url": settings.prm_url,
    }


def _scorer(settings: PRMSettings, fmt: Any) -> PRMScorer:
    try:
        if settings.prm_url:
            from clinjudge.prm_bridge import VLLMPRM

            return VLLMPRM(
                settings.prm_url,
                fmt,
                tokenizer=settings.model,
                served_model=settings.served_model,
                api_key=settings.api_key or os.environ.get(PRM_API_KEY_ENV),
                batch_tokens=settings.batch_tokens,
                max_length=settings.max_length,
            )
        from clinjudge.prm_bridge import TransformersPRM

        return TransformersPRM(
            settings.model,
            fmt,
            device=settings.device,
            dtype=settings.dtype,
            attn=settings.attn,
            batch_tokens=settings.batch_tokens,
            max_length=settings.max_length,
        )
    except PRMModelError as exc:
        # A model that cannot be loaded is configuration, as for `judge run --prm`.
        raise UserError(str(exc)) from exc


def score_prm_chains(
    settings: PRMSettings, *, command: PRMCommand, need_labels: bool, notify: Notify
) -> PRMScoring:
    """Score every candidate of ``settings.input``; a Ray pass stores batches as they come.

    Args:
        settings: The run's settings.
        command: What the run is for (kept in its config).
        need_labels: Every candidate must carry step labels (``eval``).
        notify: Receives progress lines and each candidate's warnings and errors.

    Raises:
        UserError: Bad settings, input or model (nothing scored).
        PRMModelError: The model failed while scoring in this process.
        PRMRunStopped: A Ray pass failed or was interrupted.
    """
    fmt = prm_format(settings)
    chains = _chains(settings, fmt, need_labels)
    if settings.ray is None and (settings.resume or settings.ray_replicas):
        raise UserError("resume and ray_replicas need ray", setting="resume,ray_replicas")
    if settings.ray is not None:
        config = prm_config(settings, fmt)
        results, ray_run, started = score_with_ray(settings, fmt, chains, config, command, notify)
        _report(results, notify)
        return PRMScoring(fmt, results, started, ray_run)
    scorer = _scorer(settings, fmt)
    started = now()
    results = scorer.score(chains, settings.threshold)
    _report(results, notify)
    return PRMScoring(fmt, results, started)


def _report(results: Sequence[ChainScore], notify: Notify) -> None:
    for result in results:
        for warning in result.warnings:
            notify(PRMNotice(f"{result.id}/{result.candidate}: {warning}", "warning"))
        if result.error:
            notify(PRMNotice(result.error, "error"))


def store_prm_run(
    settings: PRMSettings, scoring: PRMScoring, extra: dict[str, Any], notify: Notify
) -> str | None:
    """Store the run (or close the Ray run already stored); its id, None without ``store``.

    Args:
        settings: The run's settings.
        scoring: What :func:`score_prm_chains` returned.
        extra: The command's own config fields, ``command`` first.
        notify: Told where the run was stored.
    """
    if not settings.store:
        return None
    extra = dict(extra)
    config = {"command": extra.pop("command"), **prm_config(settings, scoring.fmt), **extra}
    results = scoring.results
    ray_run = scoring.ray_run
    if ray_run is not None and ray_run.run_id is not None:  # the steps are stored: close it
        config["ray"] = {**ray_run.config["ray"], "last_pass": ray_run.summary,
                         "reused": ray_run.reused}  # fmt: skip
        with RunStore(settings.db) as store:
            end_prm_run(store, ray_run.run_id, failed=any(r.error for r in results),
                        config=config)  # fmt: skip
        notify(PRMNotice(f"stored run {ray_run.run_id} in {settings.db}"))
        return str(ray_run.run_id)
    run_id = new_run_id()
    with RunStore(settings.db) as store:
        write_prm_run(store, run_id, results, model=settings.stored_model, config=config,
                      data_source=str(settings.input), name=settings.name,
                      started=scoring.started)  # fmt: skip
    notify(PRMNotice(f"stored run {run_id} in {settings.db}"))
    return run_id


@dataclass(frozen=True)
class BestOfN:
    """The best candidate of one input id.

    Args:
        id: The input id.
        best: The chosen candidate (None when no candidate has a score).
        score: Its aggregate.
        ranking: (candidate, aggregate), best first; ties keep input order.
    """

    id: str
    best: str | None
    score: float | None
    ranking: list[tuple[str, float | None]]


def best_of_n(results: Sequence[ChainScore], how: str) -> list[BestOfN]:
    """The best candidate per input id by aggregate ``how`` (ties go to the earliest).

    Args:
        results: Scored candidates, in input order.
        how: The aggregate compared (``min``, ``product``, ...).
    """
    groups: dict[str, list[ChainScore]] = {}
    for result in results:
        groups.setdefault(result.id, []).append(result)
    picks = []
    for item_id, members in groups.items():
        values = [(m.candidate, m.aggregates.get(how)) for m in members]
        best = best_candidate(values)
        order = sorted(
            range(len(values)),
            key=lambda i: (values[i][1] is None, -(values[i][1] or 0.0), i),
        )
        picks.append(
            BestOfN(
                id=item_id,
                best=None if best is None else values[best][0],
                score=None if best is None else values[best][1],
                ranking=[values[i] for i in order],
            )
        )
    return picks


def labelled_steps(results: Sequence[ChainScore]) -> list[list[tuple[Any, ...]]]:
    """(label, score, error type, kind) of every labelled, scored step, per scored candidate:
    what :func:`clinjudge.prm_bridge.evaluate` reads."""
    return [
        [
            (s.label, s.score, s.error_type, s.kind)
            for s in r.steps
            if s.label is not None and s.score is not None
        ]
        for r in results
        if not r.error
    ]
