"""Prepare a vendor audit: every vendor's outputs on the same encounters as one run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from clinjudge.inputs import AuditItems, load_audit_items, parse_flag_rule
from clinjudge.orchestration._config import ConfigError, RunConfig
from clinjudge.orchestration._context import resolve_run_personas
from clinjudge.orchestration._fit import context_window, oversized_item
from clinjudge.orchestration._run_items import AuditFileItems, file_stamp
from clinjudge.orchestration._session import (
    PreparedRun,
    load_shot_pool,
    parse_shard,
    shard_of,
    sharded_run_id,
)
from clinjudge.rubrics import Item, Rubric, load_rubric


def prepare_audit(
    config: RunConfig, paths: Sequence[str | Path], rules: Sequence[str] | None = None
) -> tuple[PreparedRun, AuditItems]:
    """Validate an audit like a run (rubric, personas, every vendor file, shots, flag rules)
    and combine the vendors' items into one run; writes nothing.

    The vendor files are read and checked whole; the prepared run keeps each item's id and
    position and reads the items again, a chunk at a time, when they are needed (run creation,
    a dry run), so an audit does not hold them all (:class:`AuditFileItems`).

    Args:
        config: The run configuration (its ``data`` names the vendor files, for the record).
        paths: Vendor files.
        rules: Flag rules, checked against the rubric before anything is judged (default: the
            defaults that apply to the rubric).
    """
    if config.judge is None:
        raise ConfigError("no judge model: set judge.model (or model)")
    rubric = load_rubric(config.rubric)
    for rule in rules or ():
        parse_flag_rule(rule, rubric)
    personas = resolve_run_personas(config)  # stored with the run, like a run's
    shard = parse_shard(config.shard) if config.shard else None  # fails before the files are read
    stamps = [file_stamp(path) for path in paths]
    audit_items = load_audit_items(paths, rubric, _fits_the_window(config, rubric))
    ids = audit_items.ids
    shots = load_shot_pool(config.shot_pool, rubric) if config.shot_pool else []
    if config.shots:
        for item_id in ids:
            config.shots_for(shots, item_id, 1)
    positions = list(range(len(ids)))
    every_item = AuditFileItems(paths, rubric, ids, positions, stamps=stamps)
    if shard is None:
        return PreparedRun(config, rubric, every_item, shots, personas=personas), audit_items
    # All vendors of one encounter land in the same shard, so each shard holds whole pairs;
    # every shard's run id comes from all the items (read again here).
    index, count = shard
    keep = [p for p in positions if shard_of(audit_items.encounter_ids[p], count) == index]
    prepared = PreparedRun(
        config,
        rubric,
        AuditFileItems(paths, rubric, [ids[p] for p in keep], keep, stamps=stamps),
        shots,
        run_id=sharded_run_id(config, every_item, personas),
        positions=keep,
        personas=personas,
    )
    return prepared, audit_items


def _fits_the_window(config: RunConfig, rubric: Rubric) -> Callable[[str, Item], str | None] | None:
    """The check a run makes of each item, for an audit's: its prompt within the judge's context
    window (when the model map knows the window; scoring rubrics, as ``judge run``)."""
    judge = config.judge
    assert judge is not None
    window = context_window(judge) if rubric.method == "scores" else None
    if window is None:
        return None
    limit = window
    return lambda where, item: oversized_item(item, rubric, judge, where, limit)
