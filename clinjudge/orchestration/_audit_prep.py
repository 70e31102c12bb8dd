"""Prepare a vendor audit: every vendor's outputs on the same encounters as one run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clinjudge.inputs import AuditItems, load_audit_items, parse_flag_rule
from clinjudge.orchestration._config import ConfigError, RunConfig
from clinjudge.orchestration._context import resolve_run_personas
from clinjudge.orchestration._session import PreparedRun, apply_shard, load_shot_pool
from clinjudge.rubrics import load_rubric


def prepare_audit(
    config: RunConfig, paths: Sequence[str | Path], rules: Sequence[str] | None = None
) -> tuple[PreparedRun, AuditItems]:
    """Validate an audit like a run (rubric, personas, every vendor file, shots, flag rules)
    and combine the vendors' items into one run; writes nothing.

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
    audit_items = load_audit_items(paths, rubric)
    shots = load_shot_pool(config.shot_pool, rubric) if config.shot_pool else []
    if config.shots:
        for item in audit_items.items:
            config.shots_for(shots, item.id, 1)
    prepared = PreparedRun(config, rubric, audit_items.items, shots, personas=personas)
    # All vendors of one encounter land in the same shard, so each shard holds whole pairs.
    return apply_shard(prepared, lambda item: item.meta["encounter_id"]), audit_items
