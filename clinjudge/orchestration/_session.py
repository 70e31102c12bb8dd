"""Create, resume and finish runs: the glue between config, inputs, runner and store."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import json
import logging
import platform
import random
import secrets
import signal
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from clinjudge.inputs import (
    InputError,
    check_rubric_inputs,
    in_file_order,
    iter_items,
    read_records,
    validate_records,
)
from clinjudge.judges import (
    ModelSettings,
    count_message_tokens,
    count_tokens,
    price_per_token,
    token_prices,
)
from clinjudge.judges.doclens import doclens_estimate_prompts
from clinjudge.judges.workflows import workflow_for
from clinjudge.orchestration._cache_estimate import PromptCacheTally, cache_style
from clinjudge.orchestration._config import EXPECTED_REPLY_TOKENS, ConfigError, RunConfig
from clinjudge.orchestration._context import resolve_run_personas
from clinjudge.orchestration._fit import context_window, oversized_item
from clinjudge.orchestration._pending import PendingWork
from clinjudge.orchestration._preflight import check_doclens_config, check_prm_config
from clinjudge.orchestration._run_items import (
    ITEM_CHUNK,
    FileItems,
    RunItems,
    StoredItems,
    file_stamp,
    run_items,
)
from clinjudge.orchestration._sample_runner import (
    CircuitBreakerOpen,
    RunTally,
    WorkUnit,
)
from clinjudge.personas import PersonaSet
from clinjudge.rubrics import (
    PROMPT_VERSION,
    Item,
    JudgmentParseError,
    Rubric,
    Shot,
    load_rubric,
    parse_judgment,
    parse_rubric_text,
    render_messages,
)
from clinjudge.runs import (
    RunStore,
    StagedItemRows,
    WriteRows,
    finalize_run,
    flag_run_scores,
    flag_samples,
    insert_staged_items,
    item_row,
    now,
    write_in_one_transaction,
)

logger = logging.getLogger(__name__)


class ShotRecord(Item):
    """A shot-pool record: an item plus its human scores."""

    model_config = ConfigDict(extra="forbid")

    scores: dict[str, Any]
    rationale: str | None = None


class _Versions(BaseModel):
    clinjudge: str
    autogen_agentchat: str | None
    python: str
    prompt: str


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def load_shot_pool(path: str | Path, rubric: Rubric) -> list[Shot]:
    """Read and validate a few-shot pool; every record's scores must satisfy the rubric.

    Args:
        path: JSONL, CSV or Parquet file of items with a ``scores`` object.
        rubric: The rubric the scores must satisfy.
    """
    problems: list[str] = []
    records = validate_records(read_records(path), ShotRecord, problems)
    shots = []
    for where, record in records:
        check_rubric_inputs(where, record, rubric, problems)
        try:
            values = parse_judgment(json.dumps(record.scores), rubric).values
        except JudgmentParseError as exc:
            problems.append(f"{where}: field scores: {exc}")
            continue
        item = Item.model_validate(record.model_dump(exclude={"scores", "rationale"}))
        shots.append(Shot(item=item, scores=values))
    if problems:
        raise InputError(problems)
    return shots


def _shot_payload(shots: list[Shot]) -> list[dict[str, Any]]:
    return [{**s.item.model_dump(), "scores": s.scores} for s in shots]


def _shots_from_payload(payload: list[dict[str, Any]]) -> list[Shot]:
    return [
        Shot(
            item=Item.model_validate({k: v for k, v in p.items() if k != "scores"}),
            scores=p["scores"],
        )
        for p in payload
    ]


def new_run_id() -> str:
    """A sortable, unique run id."""
    return f"{now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def parse_shard(spec: str) -> tuple[int, int]:
    """Parse ``i/n`` (1-based shard i of n).

    Args:
        spec: The shard spec, e.g. ``2/4``.
    """
    index, sep, count = spec.partition("/")
    if not sep or not index.strip().isdigit() or not count.strip().isdigit():
        raise ConfigError(f"shard {spec!r}: expected i/n, e.g. 1/4", setting="shard")
    i, n = int(index), int(count)
    if n < 1 or not 1 <= i <= n:
        raise ConfigError(
            f"shard {spec!r}: need 1 <= i <= n (shards are numbered 1..n)", setting="shard"
        )
    return i, n


def shard_of(item_id: str, n: int) -> int:
    """The 1-based shard of an item: sha256 of its id, modulo n (stable across machines)."""
    return int.from_bytes(hashlib.sha256(item_id.encode("utf-8")).digest()[:8], "big") % n + 1


# Keys of the stored config JSON holding the resolved personas and their fingerprint.
_PERSONAS_DATA = "personas_data"
_PERSONAS_FINGERPRINT = "personas_fingerprint"

# Settings that may differ between the machines running the shards of one run.
_PER_MACHINE = ("shard", "db", "data", "concurrency", "max_consecutive_failures")


def sharded_run_id(
    config: RunConfig, items: Iterable[Item], personas: PersonaSet | None = None
) -> str:
    """The run id every shard of one sharded run shares.

    Derived from the name, the config without its per-machine settings (shard, db, data path,
    concurrency, rate and connection limits), the personas' wording and the content of the
    whole dataset, so ``judge run --shard i/n`` with the same settings and data yields the same
    id on every machine (and a machine whose persona file reads differently does not join the
    run).

    Args:
        config: The run's settings.
        items: The whole dataset, in order (read once).
        personas: The run's personas.
    """
    digest = _ShardDigest(config, personas)
    for item in items:
        digest.add(item)
    return digest.run_id()


class _ShardDigest:
    """:func:`sharded_run_id` fed one item at a time (a streamed dataset)."""

    def __init__(self, config: RunConfig, personas: PersonaSet | None):
        payload = config.model_dump(mode="json", exclude_none=True, exclude=set(_PER_MACHINE))
        for settings in [payload.get("judge") or {}, *(payload.get("roles") or {}).values()]:
            for key in ("rpm", "tpm", "max_connections"):
                settings.pop(key, None)
        self._digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8"))
        if personas is not None:
            self._digest.update(personas.fingerprint().encode("utf-8"))
        self._name = config.name

    def add(self, item: Item) -> None:
        self._digest.update(item.model_dump_json().encode("utf-8"))

    def run_id(self) -> str:
        label = "".join(c if c.isalnum() or c in "-_." else "-" for c in self._name or "")
        return f"{label or 'sharded'}-{self._digest.hexdigest()[:12]}"


@dataclass
class PreparedRun:
    """Everything needed to execute a run, validated, before anything is written."""

    config: RunConfig
    rubric: Rubric
    items: Sequence[Item]
    """The run's items. :func:`prepare_run` and :func:`load_stored_run` give
    :class:`RunItems`, read from the file or the store a chunk at a time when iterated, so a
    run never holds them all; a plain list works too."""
    shots: list[Shot]
    run_id: str | None = None
    """Fixed run id (shared by every shard of a sharded run); a fresh one otherwise."""
    positions: list[int] | None = None
    """Items' positions in the whole dataset (a shard keeps the global order)."""
    personas: PersonaSet | None = None
    """The personas the mode seats (wording, stances, moderator), resolved once when the run is
    prepared and stored with it; None in single mode."""


def prepare_run(
    config: RunConfig, *, limit: int | None = None, shuffle: bool = False
) -> PreparedRun:
    """Load and validate the rubric, data and shot pool of a new run (writes nothing).

    The data is read and checked whole, a chunk at a time; the prepared run keeps the items'
    ids and positions. Unless ``shuffle`` picks the items (known only once the file was read
    whole), the same pass also builds the selected items' rows for :func:`create_run` and keeps
    them on disk (:class:`StagedItemRows`), so a run reads, validates and scans its data once;
    the items themselves are read again only when iterated (:class:`FileItems`: dry runs).

    Args:
        config: The run configuration.
        limit: Keep only this many items (of the shard, when ``config.shard`` is set): the
            first ones, so a paid model can be tried on a few items first.
        shuffle: With ``limit``: a sample drawn with ``config.seed`` instead (kept in dataset
            order).
    """
    if shuffle and limit is None:
        raise ConfigError(
            "shuffle goes with limit: it draws limit items at random, with the seed",
            setting="limit",
        )
    if config.judge is None:
        raise ConfigError("no judge model: set judge.model", setting="judge.model")
    if not config.data:
        raise ConfigError("no input data: set data to a JSONL, CSV or Parquet file", setting="data")
    rubric = load_rubric(config.rubric)
    personas = resolve_run_personas(config)  # a bad persona spec fails before any write
    if rubric.method == "claims":
        check_doclens_config(config)  # e.g. an NLI model that cannot load
    check_prm_config(config, rubric)  # the PRM loads here, once per process
    shard = parse_shard(config.shard) if config.shard else None  # fails before the data is read
    stamp = file_stamp(config.data)
    # A shuffled sample is drawn once the file was read whole: its rows are not staged.
    selection = None if shuffle else _Selection(shard, limit)
    check = _check_data(config, rubric, personas, selection)
    ids, staged = check.ids, check.staged
    try:
        shots = load_shot_pool(config.shot_pool, rubric) if config.shot_pool else []
        if config.shots:
            for item_id in ids:
                config.shots_for(shots, item_id, 1)
        positions = list(range(len(ids)))
        if shard is not None:
            index, count = shard
            positions = [p for p in positions if shard_of(ids[p], count) == index]
        positions = _limited(positions, config.seed, limit, shuffle)
        if staged is not None and check.staged_positions != positions:  # pragma: no cover
            raise AssertionError("the staged rows are not the selected items")
    except BaseException:
        if staged is not None:
            staged.close()
        raise
    items = FileItems(
        config.data, rubric, [ids[p] for p in positions], positions, staged=staged, stamp=stamp
    )
    return PreparedRun(
        config,
        rubric,
        items,
        shots,
        run_id=check.shard_id,
        positions=positions if config.shard or len(positions) < len(ids) else None,
        personas=personas,
    )


@dataclass
class _Selection:
    """Which items of the file a run takes, where that is known as the file is read: those of
    a shard, the first ``limit`` ones (a shuffled sample is known only at the end)."""

    shard: tuple[int, int] | None
    limit: int | None

    def takes(self, item_id: str, taken: int) -> bool:
        if self.limit is not None and taken >= self.limit:
            return False
        return self.shard is None or shard_of(item_id, self.shard[1]) == self.shard[0]


@dataclass
class _CheckedData:
    ids: list[str]
    """Every item's id, in file order."""
    shard_id: str | None
    staged: StagedItemRows | None
    """The selected items' rows, when the selection was known while reading."""
    staged_positions: list[int]


def _check_data(
    config: RunConfig, rubric: Rubric, personas: PersonaSet | None, selection: _Selection | None
) -> _CheckedData:
    """Read and check every item of the run's data, one at a time, keeping their ids: records
    (file, line, field), then prompts beyond the context window; and the sharded run id. The
    rows of the items ``selection`` takes are built as they pass (the item scanned for text
    that addresses the judge) and staged on disk; None stages nothing.

    Raises:
        InputError: Every problem of the first check that found some.
    """
    assert config.judge is not None and config.data
    problems: list[str] = []
    oversized: list[str] = []
    window = context_window(config.judge) if rubric.method == "scores" else None
    digest = _ShardDigest(config, personas) if config.shard else None
    ids: list[str] = []
    staged = None if selection is None else StagedItemRows()
    staged_positions: list[int] = []
    rows: list[dict[str, Any]] = []
    try:
        with contextlib.closing(iter_items(config.data, rubric, problems)) as items:
            for position, (_, item) in enumerate(items):
                ids.append(item.id)
                if problems:
                    continue  # the run is refused: the rest is only read for its problems
                if window is not None:
                    problem = oversized_item(item, rubric, config.judge, config.data, window)
                    if problem is not None:
                        oversized.append(problem)
                if digest is not None:
                    digest.add(item)
                if staged is None or oversized:
                    continue
                assert selection is not None
                if selection.takes(item.id, len(staged_positions)):
                    # The row the run will store, built here once.
                    rows.append(item_row("", position, item, rubric))
                    staged_positions.append(position)
                    if len(rows) >= ITEM_CHUNK:
                        staged.add(rows)
                        rows = []
        if problems:
            raise InputError(in_file_order(problems))
        if oversized:
            raise InputError(oversized)
        if staged is not None:
            staged.add(rows)
            staged.finish()
            if staged.failed:  # no room for the rows: creation reads the data again
                staged.close()
                staged = None
    except BaseException:
        if staged is not None:
            staged.close()
        raise
    return _CheckedData(ids, None if digest is None else digest.run_id(), staged, staged_positions)


def _limited(positions: list[int], seed: int, limit: int | None, shuffle: bool) -> list[int]:
    """The first ``limit`` positions, or with ``shuffle`` a sample drawn with the run's seed
    (in dataset order)."""
    if limit is None or limit >= len(positions):
        return positions
    if shuffle:
        keep = sorted(random.Random(seed).sample(range(len(positions)), limit))
    else:
        keep = list(range(limit))
    return [positions[k] for k in keep]


def create_run(store: RunStore, prepared: PreparedRun) -> str:
    """Record a new run and its items in one transaction.

    Items whose rows :func:`prepare_run` staged go in from there, without reading the input
    file again (a file whose size or time changed since the check is refused, as a re-read
    would), and the staged rows are dropped; others (and the items of a prepared run created
    a second time) are read and written a chunk at a time, and a problem met on the way (an
    input file changed since it was checked) rolls the whole transaction back.

    Args:
        store: The run store.
        prepared: The validated run.
    """
    run_id = prepared.run_id or new_run_id()
    config = prepared.config
    assert config.judge is not None
    versions = _Versions(
        clinjudge=_version("clinjudge") or "unknown",
        autogen_agentchat=_version("autogen-agentchat"),
        python=platform.python_version(),
        prompt=PROMPT_VERSION,
    )
    stored_config = config.model_dump(mode="json", exclude_none=True)
    stored_config["shot_pool_data"] = _shot_payload(prepared.shots)
    if prepared.personas is not None:
        stored_config[_PERSONAS_DATA] = prepared.personas.model_dump(mode="json")
        stored_config[_PERSONAS_FINGERPRINT] = prepared.personas.fingerprint()
    stamp = now()
    run_row = {
        "run_id": run_id,
        "name": config.name,
        "created_at": stamp,
        "updated_at": stamp,
        "status": "running",
        "mode": config.mode,
        "rubric": prepared.rubric.name,
        "rubric_version": prepared.rubric.version,
        "rubric_json": prepared.rubric.model_dump_json(),
        "models": json.dumps(
            {"judge": config.judge.model, **{k: v.model for k, v in config.roles.items()}}
        ),
        "config": json.dumps(stored_config),
        "versions": versions.model_dump_json(),
        "data_source": config.data,
        "simulated": config.simulated,
        "n_items": len(prepared.items),
        "n_samples": config.samples,
    }
    items = run_items(prepared.items)
    staged = _staged_rows(prepared, items)
    if staged is not None:
        assert isinstance(items, FileItems)
        items.check_unchanged()
        attempts = [0]

        def write_staged(write: WriteRows) -> None:
            # A second call is the store writing again, ignoring rows whose key exists (a
            # shard's run already stored by another shard) or with its cache bound lifted.
            attempts[0] += 1
            write("runs", [run_row])
            insert_staged_items(store, run_id, staged, ignore_existing=attempts[0] > 1)

        write_in_one_transaction(store, write_staged)
        # Written: the disk they took is freed (creating the run again reads the file again).
        items.staged = None
        staged.close()
        return run_id

    def write_run(write: WriteRows) -> None:
        positions = iter(prepared.positions or range(len(items)))
        write("runs", [run_row])
        for chunk in items.chunks():
            write(
                "items",
                [item_row(run_id, next(positions), item, prepared.rubric) for item in chunk],
            )

    write_in_one_transaction(store, write_run)
    return run_id


def _staged_rows(prepared: PreparedRun, items: RunItems) -> StagedItemRows | None:
    """The rows :func:`prepare_run` staged for these items, if they are still the run's: the
    same rubric, the same positions."""
    if not isinstance(items, FileItems) or items.staged is None:
        return None
    if items.rubric is not prepared.rubric or items.staged.count != len(items):
        return None
    if list(prepared.positions or range(len(items))) != items.positions:
        return None
    return items.staged


def load_stored_run(store: RunStore, run_id: str) -> tuple[str, PreparedRun]:
    """Rebuild a run from the database alone (no input files needed); its items are read
    from the store when they are needed (:class:`StoredItems`).

    Args:
        store: The run store.
        run_id: Run id or unique prefix.
    """
    run = store.get_run(run_id)
    stored = dict(run["config"])
    shots = _shots_from_payload(stored.pop("shot_pool_data", []))
    persona_data = stored.pop(_PERSONAS_DATA, None)
    stored.pop(_PERSONAS_FINGERPRINT, None)
    config = RunConfig.model_validate(stored)
    personas = _stored_personas(run["run_id"], config, persona_data)
    rubric = parse_rubric_text(json.dumps(run["rubric_json"]), f"{run['run_id']}.json")
    items = StoredItems(store, run["run_id"])
    return run["run_id"], PreparedRun(config, rubric, items, shots, personas=personas)


def _stored_personas(run_id: str, config: RunConfig, data: Any) -> PersonaSet | None:
    """The personas stored with a run; a run stored before they were (an older version) gets
    them resolved from their name, as the name reads now."""
    if data is not None:
        return PersonaSet.model_validate(data)
    personas = resolve_run_personas(config)
    if personas is not None:
        logger.warning(
            "run %s was stored without its personas (an older clinjudge): using %r as it reads "
            "now, which may differ from the wording the run started with",
            run_id,
            config.personas,
        )
    return personas


def missing_work(store: RunStore, run_id: str, prepared: PreparedRun) -> list[WorkUnit]:
    """Samples of the run that are not in the database yet (every one with its item: for a
    look at the work; the runner takes :func:`pending_work`, which reads items as it goes).

    Args:
        store: The run store.
        run_id: The run (created: its items are read from the store).
        prepared: The run's config and rubric.
    """
    return list(pending_work(store, run_id, prepared))


def pending_work(store: RunStore, run_id: str, prepared: PreparedRun) -> PendingWork:
    """The samples of the run that are not in the database yet, in :func:`missing_work`'s
    order, their items read from the store a chunk at a time as they are taken.

    Args:
        store: The run store.
        run_id: The run (created).
        prepared: The run's config and rubric.
    """
    agent = workflow_for(prepared.config.mode, prepared.rubric)[0]
    return PendingWork(store, run_id, prepared.config.samples, agent)


def mark_failed(store: RunStore, run_id: str, reason: str) -> None:
    """Mark a run failed with its reason, if the store still takes writes.

    Args:
        store: The run store.
        run_id: The run.
        reason: Why it stopped.
    """
    try:
        store.set_run_status(run_id, "failed", reason=reason[:2000])
    except Exception as exc:  # noqa: BLE001 - the original error matters more
        logger.warning("could not mark run %s failed: %s", run_id, exc)


def cancel_on_sigterm() -> None:
    """Make SIGTERM cancel the current task, so a run stops as cleanly as on Ctrl-C (only for
    a loop this process owns)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    if task is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGTERM, task.cancel)


async def drive_run(
    store: RunStore,
    run_id: str,
    prepared: PreparedRun,
    work: Callable[[], Awaitable[RunTally]],
    *,
    agent: str,
    handle_sigterm: bool = False,
) -> RunTally:
    """Run a run's work and keep its status: ``running``, then ``completed`` with the final
    per-item scores written, or ``interrupted``, ``budget_exhausted`` or ``failed``.

    Every way of producing samples (the sample runner, a provider's batch API) goes through
    here, so a run ends in the same states whichever produced it.

    Args:
        store: The run store.
        run_id: The run.
        prepared: The run's config, rubric, items and shots.
        work: Produces the missing samples and returns the tally.
        agent: The deciding agent whose samples the final scores come from.
        handle_sigterm: Treat SIGTERM as a cancellation.
    """
    store.set_run_status(run_id, "running")
    if handle_sigterm:
        cancel_on_sigterm()
    with _old_objects_frozen():
        return await _drive(store, run_id, prepared, work, agent)


@contextlib.contextmanager
def _old_objects_frozen() -> Iterator[None]:
    """Keep the objects that exist before a run out of the garbage collector's passes while it
    runs (``gc.freeze``), unless the caller froze some itself.

    A run allocates a few dicts per judgment, so the collector runs often, and every older
    generation pass walked the interpreter's whole heap of imported modules (measured: 0.1 ms
    of CPU per judgment in a lean process, more under the CLI's imports). Nothing changes for
    the run's own objects; garbage from before the run waits until it ends.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def _drive(
    store: RunStore,
    run_id: str,
    prepared: PreparedRun,
    work: Callable[[], Awaitable[RunTally]],
    agent: str,
) -> RunTally:
    try:
        tally = await work()
    except asyncio.CancelledError:
        store.set_run_status(run_id, "interrupted")
        raise
    except CircuitBreakerOpen as exc:
        # Not a failed run: the endpoint failed; a resume redoes the samples it stopped.
        store.set_run_status(run_id, "interrupted", reason=str(exc)[:2000])
        raise
    except Exception as exc:
        # Finished samples are already stored; the run stays resumable after the fix.
        mark_failed(store, run_id, str(exc))
        raise
    if tally.budget_exhausted:
        # Not finalized: the run is resumable and its final scores wait for the missing samples.
        store.set_run_status(run_id, "budget_exhausted")
        logger.info(
            "budget of $%.4f reached after $%.4f: %d samples not started; resume run %s "
            "(each resume may spend up to its own budget)",
            prepared.config.max_cost,
            tally.cost_usd,
            tally.not_started,
            run_id,
        )
        return tally
    try:
        finish_run(store, run_id, prepared, agent)
    except Exception as exc:
        # Every sample is stored, but the run is not `completed` without its final scores and
        # flags (a full disk, a store that refuses writes): say so, and a resume finishes it.
        mark_failed(store, run_id, f"finishing the run: {exc}")
        raise
    return tally


def finish_run(store: RunStore, run_id: str, prepared: PreparedRun, agent: str) -> None:
    """Flag suspect samples, write the final scores (without suspect samples where the run
    drops them), flag the run's scores, and mark it completed.

    Args:
        store: The run store.
        run_id: The run, every sample done.
        prepared: The run's config and rubric.
        agent: The deciding agent, whose samples make the final scores.
    """
    rubric, config = prepared.rubric, prepared.config
    flag_samples(store, run_id, rubric)
    finalize_run(
        store,
        run_id,
        rubric,
        config.samples,
        agent,
        drop_suspect=config.drop_suspect,
        reducer=config.reducer,
    )
    flag_run_scores(store, run_id, rubric)
    store.set_run_status(run_id, "completed", finished=True)


def run_in_new_loop(
    store: RunStore, run_id: str, coroutine: Coroutine[Any, Any, RunTally]
) -> RunTally:
    """Run a run's coroutine on a fresh event loop; Ctrl-C or SIGTERM mark the run
    ``interrupted`` and propagate as ``KeyboardInterrupt``.

    Args:
        store: The run store.
        run_id: The run.
        coroutine: The run's work, usually :func:`drive_run`.
    """
    try:
        return asyncio.run(coroutine)
    except (KeyboardInterrupt, asyncio.CancelledError):
        store.set_run_status(run_id, "interrupted")
        raise KeyboardInterrupt from None


@dataclass
class DryRunEstimate:
    """What a run would send, without sending it."""

    prompts: int
    prompt_tokens: int
    max_completion_tokens: int
    cost_usd: float | None
    max_prompt_tokens_one_call: int
    note: str = ""
    cached_input_tokens: int | None = None
    """Prompt tokens the provider's prompt cache would likely serve (an estimate; None: not
    estimated for this provider)."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the cache (Anthropic), estimated likewise."""
    cost_with_cache_usd: float | None = None
    """The upper bound of the cost with those tokens at their cache prices."""


def _claims_estimate_note(config: RunConfig) -> str:
    """What a DocLens estimate assumes (claims are unknown until they are extracted)."""
    settings = config.doclens
    note = "doclens: counts claim extraction of the output and the reference"
    if settings.nli_model:
        return note + " only; the NLI model judges entailment locally"
    cited = "one call per cited statement" if settings.citations else "no citation calls"
    each = "" if config.mode == "single" else ", each once per panel member"
    note += (
        f", one batch entailment call per direction and {cited}{each}. Claims are unknown "
        "before extraction, so each text's sentences stand in for its claims (at most "
        f"max_claims={settings.max_claims}); entailment prompt sizes grow with the number of "
        "claims actually extracted, and single-claim fallbacks and repairs come on top"
    )
    if config.mode == "magentic":
        note += (
            f"; magentic: the discussion of disputed claims ({config.rounds} round(s) per member "
            "plus one orchestrator decision, only for samples with disputes) is not counted"
        )
    return note


def estimate_run(prepared: PreparedRun) -> DryRunEstimate:
    """Render every prompt of a run and count tokens and cost; calls nothing, writes nothing.

    Args:
        prepared: The validated run.
    """
    config = prepared.config
    settings: ModelSettings | None = config.judge
    assert settings is not None
    prompt_tokens, largest, prompts = 0, 0, 0
    # A panel sends the judge prompt once per member, each prefixed with the persona.
    prefixes = [0]
    persona_texts = [""]
    if prepared.personas is not None:
        prefixes = [count_tokens(p.system_message) for p in prepared.personas.personas]
        persona_texts = [p.system_message for p in prepared.personas.personas]
    caching = PromptCacheTally(cache_style(settings))
    items = run_items(prepared.items)
    for sample in range(1, config.samples + 1):
        for item in items:  # read again for each sample, a chunk at a time
            if prepared.rubric.method == "claims":
                sizes = []
                for turns in doclens_estimate_prompts(item, config, prepared.personas):
                    size = count_message_tokens([t.content for t in turns])
                    sizes.append(size)
                    caching.add_turns("", 0, turns, size)
            else:
                shots = config.shots_for(prepared.shots, item.id, sample)
                turns = render_messages(
                    item, prepared.rubric, shots, explanations=config.explanations
                )
                tokens = count_message_tokens([t.content for t in turns])
                sizes = [tokens + prefix for prefix in prefixes]
                for persona, prefix in zip(persona_texts, prefixes, strict=True):
                    caching.add_turns(persona, prefix, turns, tokens + prefix)
            for size in sizes:
                prompt_tokens += size
                largest = max(largest, size)
                prompts += 1
    completion = prompts * (settings.max_tokens or EXPECTED_REPLY_TOKENS)
    per_token = price_per_token(settings)
    cost = None if per_token is None else prompt_tokens * per_token[0] + completion * per_token[1]
    note = ""
    if prepared.rubric.method == "claims":
        note = _claims_estimate_note(config)
    elif config.mode == "magentic":
        note = (
            "magentic: counts one graded turn per persona and sample only; the orchestrator's "
            "planning, ledger and final calls and the growing discussion context come on top "
            "(measured with 3 personas and 1 round, a discussion sent about 1.6x these prompt "
            "tokens with --no-planning and 3.5x with planning)"
        )
    estimate = DryRunEstimate(prompts, prompt_tokens, completion, cost, largest, note)
    if caching.style is not None:
        estimate.cached_input_tokens = caching.cached_input_tokens
        estimate.cache_write_tokens = caching.cache_write_tokens
        prices = token_prices(settings)
        if prices is not None:
            estimate.cost_with_cache_usd = prices.cost(
                prompt_tokens, completion, caching.cached_input_tokens, caching.cache_write_tokens
            )
    return estimate
