"""The Python API: evaluate, resume, load a run, its agreement with physicians, compare runs.

``judge run`` and these functions build a run the same way (``run_config_from``), so a notebook
and the shell get the same defaults. The synchronous functions work inside a running event loop
(a Jupyter kernel) by running the work on a helper thread with its own loop.

Arguments are checked here, at the boundary: a wrong type or value raises a ``UserError`` whose
``setting`` is the parameter's name, never a TypeError from deep inside DuckDB, Arrow or numpy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import os
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, computed_field

from clinjudge.analysis import Comparison, agreement_for_run, audit_for_run, compare_runs
from clinjudge.errors import UserError
from clinjudge.judges.workflows import workflow_for
from clinjudge.orchestration import (
    create_run,
    execute_run_async,
    load_stored_run,
    missing_work,
    prepare_audit,
    prepare_run,
    run_config_from,
)
from clinjudge.reports import write_audit_report
from clinjudge.rubrics import load_rubric
from clinjudge.runs import (
    ImportSummary,
    RunStore,
    StoreError,
    default_db,
    load_human_ratings,
    run_counts,
    status_label,
)
from clinjudge.runs import import_ratings as store_ratings

__all__ = [
    "AgreementResult",
    "AuditResult",
    "audit",
    "audit_async",
    "Run",
    "RunResult",
    "compare",
    "evaluate",
    "evaluate_async",
    "ImportSummary",
    "import_ratings",
    "load_run",
    "resume",
    "resume_async",
]

T = TypeVar("T")


def _wrong(name: str, expected: str, value: object) -> UserError:
    return UserError(f"{name}: expected {expected}, got {value!r}", setting=name)


def _text(name: str, value: object) -> str:
    """A non-empty string (a run id, a rubric name)."""
    if not isinstance(value, str) or not value.strip():
        raise _wrong(name, "a non-empty string", value)
    return value


def _optional_text(name: str, value: object) -> str | None:
    return None if value is None else _text(name, value)


def _path(name: str, value: object) -> str:
    """A file path given as a string or a path object."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise _wrong(name, "a path (str or pathlib.Path)", value)
    return value


def _optional_path(name: str, value: object) -> str | None:
    return None if value is None else _path(name, value)


def _paths(name: str, value: object) -> list[str]:
    """One path or a list of them: a lone string is one path, never a list of characters."""
    if isinstance(value, str | os.PathLike):
        return [_path(name, value)]
    if not isinstance(value, Sequence) or not value:
        raise _wrong(name, "a path or a non-empty list of paths", value)
    return [_path(name, one) for one in value]


def _texts(name: str, value: object, *, optional: bool = False) -> list[str] | None:
    """One string or a list of them: a lone string is one item, never a list of characters.

    Args:
        name: The parameter, for the message.
        value: What the caller gave.
        optional: None, and an empty list, are allowed.
    """
    if value is None and optional:
        return None
    if isinstance(value, str):
        return [_text(name, value)]
    if not isinstance(value, Sequence) or not (value or optional):
        raise _wrong(name, "a string or a non-empty list of strings", value)
    return [_text(name, one) for one in value]


def _whole(name: str, value: object, minimum: int) -> int:
    """An int (not a bool, not a float) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _wrong(name, f"a whole number >= {minimum}", value)
    return value


def _flag(name: str, value: object, *, optional: bool = False) -> bool | None:
    """True or False (or None when ``optional``); a string such as "yes" is refused."""
    if (value is None and optional) or isinstance(value, bool):
        return value
    raise _wrong(name, "True, False or None" if optional else "True or False", value)


def _amount(name: str, value: object) -> float | None:
    """None or a finite number >= 0 (dollars)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong(name, "a number >= 0 or None", value)
    if not math.isfinite(value) or value < 0:
        raise _wrong(name, "a number >= 0 or None", value)
    return float(value)


class RunResult(BaseModel):
    """What a finished (or stopped) run produced.

    Args:
        run_id: The run's id.
        db: The database holding it.
        status: completed, failed, interrupted or budget_exhausted.
        status_reason: Why it stopped early, if it did.
        simulated: Scores came from the simulated ``mock/`` provider (not judgments).
        items: Items in the run.
        items_ok: Items with a valid final judgment.
        samples_ok: Valid samples of the deciding agent.
        samples_failed: Failed samples of the deciding agent.
        calls: Model calls made (every attempt, every agent).
        cost_usd: Dollars spent, as priced.
        cost_known: False when some successful call had no known price.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    db: str
    status: str
    status_reason: str | None = None
    simulated: bool
    items: int
    items_ok: int
    samples_ok: int
    samples_failed: int
    calls: int
    cost_usd: float
    cost_known: bool

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status_text(self) -> str:
        """The status as people read it: ``completed, 0 of 3 valid`` when items lack a valid
        judgment."""
        return status_label(self.status, self.items, self.items_ok)

    def load(self) -> Run:
        """The stored run, for its tables and statistics."""
        return load_run(self.run_id, db=self.db)


class AgreementResult(BaseModel):
    """A run's agreement with physicians' ratings (ICC, Wilcoxon, alpha, AC2, kappa).

    The named fields are the ones most read; every other part of the analysis stays available
    as an extra field (``model_extra``), e.g. ``substitution`` or ``differences``.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    run_id: str
    raters: list[str]
    n_items_rated: int
    attributes: list[str]
    per_attribute: dict[str, Any]
    pooled: dict[str, Any] | None = None
    notes: list[str] = []


class AuditResult(BaseModel):
    """A vendor audit: per-vendor summaries, paired tests between vendors, flagged items.

    Every other part of the analysis (``settings``, ``costs``...) stays available as an extra
    field (``model_extra``).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    run: RunResult | None = None
    run_id: str
    vendors: list[str]
    attributes: list[str]
    summaries: dict[str, Any]
    comparisons: list[dict[str, Any]]
    flagged: list[dict[str, Any]]
    flag_rules: list[str]
    unmatched: list[dict[str, Any]] = []
    simulated: bool = False
    ppi: list[dict[str, Any]] | None = None
    """Judge-corrected (PPI++) physicians' means per vendor and attribute, with ratings."""
    ppi_pairs: list[dict[str, Any]] | None = None
    """The same for each vendor pair's mean difference."""


class Run:
    """A stored run, read-only. Tables come back as Arrow tables (``.to_pandas()`` for pandas).

    Args:
        run_id: The run's full id.
        db: The database holding it.
        info: The run's row (settings, models, status, counts).
    """

    def __init__(self, run_id: str, db: str, info: dict[str, Any]):
        self.run_id = run_id
        self.db = db
        self.info = info

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, status={self.info.get('status')!r}, db={self.db!r})"

    def _table(self, table: str, order: str) -> pa.Table:
        with RunStore(self.db, read_only=True) as store:
            if not store.has_table(table):
                return pa.table({})
            relation = store.con.cursor().sql(
                f"SELECT * FROM {table} WHERE run_id = ? ORDER BY {order}", params=[self.run_id]
            )
            # DuckDB 2 names it to_arrow_table; 1.x calls it arrow.
            fetch = getattr(relation, "to_arrow_table", None) or relation.arrow
            return fetch()

    def items(self) -> pa.Table:
        """The judged items (notes, text under evaluation, reference, vendor, flags)."""
        return self._table("items", "position")

    def judgments(self, *, final: bool | None = None) -> pa.Table:
        """Scores in long form: one row per (item, sample, agent, attribute).

        Args:
            final: True for the final per-item scores only, False for the samples only,
                None for both.
        """
        final = _flag("final", final, optional=True)
        table = self._table("judgments", "item_id, sample, agent, attribute")
        if final is None or table.num_rows == 0:
            return table
        return table.filter(pa.compute.equal(table["final"], final))

    def calls(self) -> pa.Table:
        """Every model call: role, agent, model, tokens, cost, latency, status, error."""
        return self._table("calls", "started_at, call_id")

    def messages(self) -> pa.Table:
        """Transcripts: panel members' and MagenticOne discussion messages."""
        return self._table("messages", "item_id, sample, agent, seq")

    def agreement(self, *, n_boot: int = 1000, seed: int = 0) -> AgreementResult:
        """Agreement of this run's judge with the physicians' ratings in the store.

        Args:
            n_boot: Bootstrap resamples.
            seed: Bootstrap seed.
        """
        n_boot = _whole("n_boot", n_boot, 1)
        seed = _whole("seed", seed, 0)
        with RunStore(self.db, read_only=True) as store:
            result = agreement_for_run(store, self.run_id, n_boot=n_boot, seed=seed)
        return AgreementResult.model_validate(result)


def _db(db: str | Path | None) -> str:
    return _optional_path("db", db) or default_db()


def _existing_db(db: str | Path | None) -> str:
    """The database, which must exist: functions that only read or finish runs never create
    one (a mistyped path would otherwise become an empty database)."""
    path = _db(db)
    if not Path(path).exists():
        raise StoreError(f"no database at {path}", setting="db")
    return path


def load_run(run_id: str, *, db: str | Path | None = None) -> Run:
    """Open a stored run by id or unique part of its id.

    Args:
        run_id: Run id or a unique part of it.
        db: Database (default ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb).
    """
    run_id = _text("run_id", run_id)
    path = _db(db)
    with RunStore(path, read_only=True) as store:
        info = store.get_run(run_id)
    return Run(info["run_id"], path, info)


def import_ratings(
    path: str | Path, *, rubric: str = "pdsqi9", db: str | Path | None = None
) -> ImportSummary:
    """Validate physicians' ratings against a rubric and store them; a file with any problem
    is rejected whole (nothing written). Re-importing replaces a rater's earlier scores.

    Args:
        path: JSONL, CSV or Parquet with item_id, rater_id, attribute, score.
        rubric: Built-in rubric name or rubric file.
        db: Database (default ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb).
    """
    path = _path("path", path)
    chosen = load_rubric(_text("rubric", rubric))
    with RunStore(_db(db)) as store:
        return store_ratings(store, path, chosen)


def _result(store: RunStore, run_id: str, agent: str) -> RunResult:
    run = store.get_run(run_id)
    counts = run_counts(store, run_id, agent)
    return RunResult(
        run_id=run["run_id"],
        db=str(store.path),
        status=run["status"],
        status_reason=run.get("status_reason"),
        simulated=bool(run["simulated"]),
        items=counts.items,
        items_ok=counts.items_ok,
        samples_ok=counts.samples_ok,
        samples_failed=counts.samples_failed,
        calls=counts.calls,
        cost_usd=counts.cost_usd,
        cost_known=counts.cost_known,
    )


async def evaluate_async(
    data: str | Path | None = None, *, progress: bool = False, **options: Any
) -> RunResult:
    """Judge a dataset and store everything; the async form of :func:`evaluate`.

    Args:
        data: Items to judge (JSONL, CSV or Parquet), or None to take it from ``config``.
        progress: Draw a progress bar on stderr.
        **options: The settings of ``judge run`` by name (``rubric``, ``mode``, ``model``,
            ``samples``, ``config``, ``db``...); see :func:`run_config_from`.
    """
    data = _optional_path("data", data)
    _flag("progress", progress)
    config = run_config_from({**options, "data": data})
    prepared = await asyncio.to_thread(prepare_run, config)
    with RunStore(config.db) as store:
        run_id = create_run(store, prepared)
        await execute_run_async(store, run_id, prepared, show_progress=progress)
        return _result(store, run_id, workflow_for(config.mode, prepared.rubric)[0])


async def resume_async(
    run_id: str,
    *,
    db: str | Path | None = None,
    max_cost: float | None = None,
    progress: bool = False,
) -> RunResult:
    """Finish the missing work of a stored run: the async form of :func:`resume`."""
    run_id = _text("run_id", run_id)
    max_cost = _amount("max_cost", max_cost)
    _flag("progress", progress)
    with RunStore(_existing_db(db)) as store:
        full_id, prepared = load_stored_run(store, run_id)
        if max_cost is not None:
            prepared.config = prepared.config.model_copy(update={"max_cost": max_cost})
        agent = workflow_for(prepared.config.mode, prepared.rubric)[0]
        finished = store.get_run(full_id)["status"] == "completed"
        if not (finished and not missing_work(store, full_id, prepared)):
            await execute_run_async(store, full_id, prepared, show_progress=progress)
        return _result(store, full_id, agent)


def _run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion, also from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # A notebook's loop is already running in this thread: use a thread with its own loop.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="clinjudge") as pool:
        return pool.submit(asyncio.run, coroutine).result()


def evaluate(
    data: str | Path | None = None, *, progress: bool = False, **options: Any
) -> RunResult:
    """Judge a dataset with a rubric and store every score, call and transcript.

    Example::

        result = clinjudge.evaluate("items.jsonl", rubric="pdsqi9", mode="panel",
                                    model="openai/gpt-4o-mini", samples=3)
        scores = result.load().judgments(final=True).to_pandas()

    Args:
        data: Items to judge (JSONL, CSV or Parquet), or None to take it from ``config``.
        progress: Draw a progress bar on stderr.
        **options: The settings of ``judge run`` by name (``rubric``, ``mode``, ``model``,
            ``base_url``, ``samples``, ``shots``, ``shot_pool``, ``personas``, ``role_model``,
            ``max_cost``, ``db``, ``config`` for a YAML file...). Without a model it uses
            ``$CLINJUDGE_MODEL``, else the simulated ``mock/judge`` (its run is marked simulated).
    """
    return _run_sync(evaluate_async(data, progress=progress, **options))


def resume(
    run_id: str,
    *,
    db: str | Path | None = None,
    max_cost: float | None = None,
    progress: bool = False,
) -> RunResult:
    """Finish exactly the missing work of a stored run (after a crash, stop or budget).

    Args:
        run_id: Run id or a unique part of it.
        db: Database (default ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb).
        max_cost: A budget for this invocation, replacing the stored one.
        progress: Draw a progress bar on stderr.
    """
    return _run_sync(resume_async(run_id, db=db, max_cost=max_cost, progress=progress))


def compare(
    run_ids: Sequence[str],
    *,
    db: str | Path | None = None,
    sort: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> Comparison:
    """Compare judge configurations (runs over the same items) on agreement, cost and latency.

    Args:
        run_ids: Run ids or unique parts of them (one id alone may be a plain string).
        db: Database (default ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb).
        sort: Column to sort by (e.g. ``icc``, ``cost_per_item_usd``).
        n_boot: Bootstrap resamples per run.
        seed: Bootstrap seed.
    """
    ids = _texts("run_ids", run_ids) or []
    sort = _optional_text("sort", sort)
    n_boot = _whole("n_boot", n_boot, 1)
    seed = _whole("seed", seed, 0)
    with RunStore(_db(db), read_only=True) as store:
        return compare_runs(store, ids, sort=sort, n_boot=n_boot, seed=seed)


async def audit_async(
    vendors: Sequence[str | Path],
    *,
    rules: Sequence[str] | None = None,
    report_dir: str | Path | None = None,
    n_boot: int = 2000,
    progress: bool = False,
    ratings: str | Path | None = None,
    **options: Any,
) -> AuditResult:
    """Judge several vendors' outputs on the same encounters; the async form of :func:`audit`.

    Args:
        vendors: One file per vendor (the vendor is the file stem unless records carry
            ``vendor``), or one file (a plain path) whose records all carry ``vendor``.
        rules: Flag rules such as ``accurate<=2`` (default: those that apply to the rubric).
        report_dir: Write report.html and report.md here.
        n_boot: Bootstrap resamples for the confidence intervals.
        progress: Draw a progress bar on stderr.
        ratings: Physicians' ratings of a random sample of the items (as for
            :func:`import_ratings`, or with ``vendor`` + ``item_id``): adds the judge-corrected
            (PPI++) estimates of the physicians' means (``ppi``, ``ppi_pairs``).
        **options: The settings of ``judge run`` by name (see :func:`evaluate`).
    """
    paths = _paths("vendors", vendors)
    ratings = _optional_path("ratings", ratings)
    rules = _texts("rules", rules, optional=True)
    report_dir = _optional_path("report_dir", report_dir)
    n_boot = _whole("n_boot", n_boot, 0)  # 0: no confidence intervals, as `judge audit --boot 0`
    _flag("progress", progress)
    config = run_config_from({**options, "data": ",".join(paths)})
    prepared, _ = await asyncio.to_thread(prepare_audit, config, paths, rules)
    physicians = load_human_ratings(ratings, prepared.rubric) if ratings else None
    with RunStore(config.db) as store:
        run_id = create_run(store, prepared)
        await execute_run_async(store, run_id, prepared, show_progress=progress)
        run = _result(store, run_id, workflow_for(config.mode, prepared.rubric)[0])
        stats = audit_for_run(
            store, run_id, rules=rules, n_boot=n_boot, seed=config.seed, ratings=physicians
        )
    if report_dir is not None:
        write_audit_report(stats, report_dir)
    return AuditResult.model_validate({**stats, "run": run})


def audit(
    vendors: Sequence[str | Path],
    *,
    rules: Sequence[str] | None = None,
    report_dir: str | Path | None = None,
    n_boot: int = 2000,
    progress: bool = False,
    ratings: str | Path | None = None,
    **options: Any,
) -> AuditResult:
    """Audit vendors: one judge configuration over every vendor's outputs, then statistics.

    The synchronous form of :func:`audit_async` (same arguments); works inside a running loop.
    """
    coroutine = audit_async(
        vendors,
        rules=rules,
        report_dir=report_dir,
        n_boot=n_boot,
        progress=progress,
        ratings=ratings,
        **options,
    )
    return _run_sync(coroutine)
