"""Run management: the one definition of a run's counts, listing with filters, delete, rename.

Counting rules, used by the end-of-run summary, `judge runs show` and `judge runs list`:

- a *sample* is one (item, sample number) of the mode's deciding agent (``judge``, ``panel``,
  ``orchestrator``); a panel member's or persona's own verdict is not a sample, and every model
  call (members' included) is counted under *calls*;
- an item *fails* when it ends without a valid final judgment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from clinjudge._util.modes import DECIDING_AGENTS
from clinjudge.errors import UserError
from clinjudge.runs._store import RunStore, StoreError, _owner_only_files

FAILURE_CLASS_SEPARATOR = ":"

# Agents whose verdicts are a run's samples (single judge, panel, magentic chair): every judge
# workflow stores its sample-level decision under one of them (one table: _util/modes.py).
DECIDING_AGENT_SQL = f"agent IN ({', '.join(repr(a) for a in DECIDING_AGENTS)})"
"""SQL condition on ``samples.agent`` selecting the samples (see :data:`DECIDING_AGENTS`)."""


@dataclass
class FailureClass:
    """Failed samples sharing a reason class (the text before the first colon)."""

    reason: str
    count: int
    first_error: str


@dataclass
class RunCounts:
    """Items, samples and calls of a run, counted once for every command."""

    run_id: str
    items: int
    items_ok: int
    items_failed: int
    """Items with a failed final judgment (every sample failed)."""
    items_unfinished: int
    """Items without any final judgment yet (interrupted, budget, still running)."""
    samples_expected: int
    samples_ok: int
    samples_failed: int
    calls: int
    cost_usd: float = 0.0
    cost_known: bool = True
    """False when some successful call had no known price."""
    failures: list[FailureClass] = field(default_factory=list)
    cached_calls: int = 0
    """Of ``calls``, those answered from the response cache (no provider call, cost 0)."""

    @property
    def items_without_valid_final(self) -> int:
        """Items that did not end with a valid final judgment."""
        return self.items - self.items_ok


def _scalar(store: RunStore, sql: str, params: list[Any]) -> Any:
    row = store.con.execute(sql, params).fetchone()
    return row[0] if row else None


def _agent_filter(agent: str | None) -> tuple[str, list[str]]:
    if agent is None:
        return DECIDING_AGENT_SQL, []
    return "agent = ?", [agent]


def failure_classes(store: RunStore, run_id: str, agent: str | None = None) -> list[FailureClass]:
    """Failed samples of the deciding agent grouped by reason class, each with its first error.

    Args:
        store: The run store.
        run_id: Full run id.
        agent: The mode's deciding agent (default: any of :data:`DECIDING_AGENTS`).
    """
    condition, params = _agent_filter(agent)
    rows = store.query(
        f"SELECT error FROM samples WHERE run_id = ? AND {condition} AND status <> 'ok' "
        "ORDER BY finished_at, item_id, sample",
        [run_id, *params],
    )
    classes: dict[str, FailureClass] = {}
    for row in rows:
        error = row["error"] or "unknown"
        reason = error.split(FAILURE_CLASS_SEPARATOR, 1)[0].strip() or "unknown"
        entry = classes.get(reason)
        if entry is None:
            detail = error.split(FAILURE_CLASS_SEPARATOR, 1)[-1].strip() or error
            classes[reason] = FailureClass(reason, 1, detail)
        else:
            entry.count += 1
    return sorted(classes.values(), key=lambda c: -c.count)


def run_counts(store: RunStore, run_id: str, agent: str | None = None) -> RunCounts:
    """Count a run's items, samples and calls (see the module's rules).

    Args:
        store: The run store.
        run_id: Run id or unique part of it.
        agent: The mode's deciding agent, whose verdicts are the samples (default: any of
            :data:`DECIDING_AGENTS`).
    """
    condition, params = _agent_filter(agent)
    run = store.get_run(run_id)
    rid = run["run_id"]
    finals = store.query(
        "SELECT count(DISTINCT item_id) FILTER (WHERE status = 'ok') AS ok, "
        "count(DISTINCT item_id) FILTER (WHERE status <> 'ok') AS failed "
        "FROM judgments WHERE run_id = ? AND final",
        [rid],
    )[0]
    samples = store.query(
        "SELECT count(*) FILTER (WHERE status = 'ok') AS ok, "
        "count(*) FILTER (WHERE status <> 'ok') AS failed "
        f"FROM samples WHERE run_id = ? AND {condition} AND sample > 0",
        [rid, *params],
    )[0]
    # A store opened read-only from before calls.cached existed has no such column.
    cached = "coalesce(cached, false)" if store.has_column("calls", "cached") else "false"
    calls = store.query(
        "SELECT count(*) AS n, coalesce(sum(cost_usd), 0) AS cost, "
        "count(*) FILTER (WHERE status = 'ok' AND cost_usd IS NULL) AS unpriced, "
        f"count(*) FILTER (WHERE {cached}) AS cached "
        "FROM calls WHERE run_id = ?",
        [rid],
    )[0]
    items = int(run["n_items"] or 0)
    finished = int(finals["ok"] or 0) + int(finals["failed"] or 0)
    return RunCounts(
        run_id=rid,
        items=items,
        items_ok=int(finals["ok"] or 0),
        items_failed=int(finals["failed"] or 0),
        items_unfinished=max(items - finished, 0),
        samples_expected=items * int(run["n_samples"] or 0),
        samples_ok=int(samples["ok"] or 0),
        samples_failed=int(samples["failed"] or 0),
        calls=int(calls["n"] or 0),
        cost_usd=float(calls["cost"] or 0.0),
        cost_known=not calls["unpriced"],
        failures=failure_classes(store, rid, agent),
        cached_calls=int(calls["cached"] or 0),
    )


_FILTERS = ("name", "rubric", "mode", "status")


def runs_overview(
    store: RunStore,
    *,
    filters: dict[str, str | None] | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Runs, newest first, with cost and failed items; filters match a part of the column.

    Args:
        store: The run store.
        filters: ``name``, ``rubric``, ``mode`` or ``status`` to a case-insensitive substring.
        limit: Most runs to return.
    """
    where, params = [], []
    for key, value in (filters or {}).items():
        if key not in _FILTERS:
            raise UserError(f"unknown filter {key!r}; choose from {', '.join(_FILTERS)}")
        if value:
            where.append(f"contains(lower(coalesce(r.{key}, '')), lower(?))")
            params.append(value)
    sql = f"""
        SELECT r.run_id, r.name, r.created_at, r.status, r.mode, r.rubric, r.n_items,
               r.n_samples, r.simulated, json_extract_string(r.models, '$.judge') AS model,
               (SELECT sum(c.cost_usd) FROM calls c WHERE c.run_id = r.run_id) AS cost_usd,
               (SELECT count(DISTINCT j.item_id) FROM judgments j
                 WHERE j.run_id = r.run_id AND j.final AND j.status <> 'ok') AS failed_items,
               (SELECT count(DISTINCT j.item_id) FROM judgments j
                 WHERE j.run_id = r.run_id AND j.final AND j.status = 'ok') AS valid_items
        FROM runs r {"WHERE " + " AND ".join(where) if where else ""}
        ORDER BY r.created_at DESC
        {"LIMIT " + str(int(limit)) if limit is not None else ""}
    """
    return store.query(sql, params)


def status_label(status: str, items: int, valid_items: int) -> str:
    """A run's status as shown to people: a completed run that left items without a valid
    judgment says how many are valid (``completed, 0 of 3 valid``), so it is not read as a
    success.

    Args:
        status: The stored status.
        items: Items in the run.
        valid_items: Items with a valid final judgment.
    """
    if status == "completed" and valid_items < items:
        return f"completed, {valid_items} of {items} valid"
    return status


def _run_tables(store: RunStore) -> list[str]:
    # Tables only: a view (``messages``) takes no DELETE; its rows go with its tables.
    rows = store.query(
        "SELECT DISTINCT c.table_name FROM information_schema.columns c "
        "JOIN information_schema.tables t USING (table_catalog, table_schema, table_name) "
        "WHERE c.column_name = 'run_id' AND c.table_schema = 'main' "
        "AND t.table_type = 'BASE TABLE' ORDER BY c.table_name"
    )
    return [r["table_name"] for r in rows]


# Rows of these tables are counted as the rows of ``messages`` they make (shared texts are not
# rows of their own to a reader).
_COUNTED_AS = {"message_rows": "messages", "message_texts": None, "provider_batch_texts": None}


def delete_run(store: RunStore, run_id: str) -> dict[str, int]:
    """Remove every row of a run from every table, in one transaction.

    Every table with a ``run_id`` column counts, ``response_cache`` included: the replies the
    run cached go with it (rows cached before that column existed belong to no run and stay).

    Args:
        store: The run store (opened for writing).
        run_id: Run id or unique part of it.

    Returns:
        Rows removed per table; ``messages`` counts the rows of that view (its texts stored
        once per run go too, uncounted).
    """
    rid = store.get_run(run_id)["run_id"]
    removed: dict[str, int] = {}
    with _owner_only_files():
        store.con.execute("BEGIN TRANSACTION")
        try:
            for table in _run_tables(store):
                count = _scalar(store, f'SELECT count(*) FROM "{table}" WHERE run_id = ?', [rid])
                store.con.execute(f'DELETE FROM "{table}" WHERE run_id = ?', [rid])
                name = _COUNTED_AS.get(table, table)
                if name is not None:
                    removed[name] = removed.get(name, 0) + int(count or 0)
            store.con.execute("COMMIT")
        except BaseException:
            store.con.execute("ROLLBACK")
            raise
    return removed


AUDIT_SETTINGS_KEY = "audit_statistics"
"""Key in a run's stored config of the settings its audit statistics were last computed with."""


def record_audit_settings(store: RunStore, run_id: str, settings: dict[str, Any]) -> str:
    """Keep the settings of an audit's statistics (bootstrap resamples, seed) with its run, so
    the viewer recomputes the audit as `judge audit` last did: the same intervals, not another
    resample count's (#39).

    Args:
        store: The run store (opened for writing).
        run_id: Run id or unique part of it.
        settings: ``{"n_boot": ..., "seed": ...}``.

    Returns:
        The full run id.
    """
    run = store.get_run(run_id)
    config = {**(run.get("config") or {}), AUDIT_SETTINGS_KEY: dict(settings)}
    with _owner_only_files():
        store.con.execute(
            "UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(config), run["run_id"]]
        )
    return str(run["run_id"])


def audit_settings(run: dict[str, Any]) -> dict[str, Any]:
    """The settings a run's audit statistics were last computed with (empty if none).

    Args:
        run: The run's row (``RunStore.get_run``).
    """
    stored = (run.get("config") or {}).get(AUDIT_SETTINGS_KEY)
    return dict(stored) if isinstance(stored, dict) else {}


def rename_run(store: RunStore, run_id: str, name: str) -> str:
    """Give a run a new label (``runs.name``); the id stays.

    Args:
        store: The run store (opened for writing).
        run_id: Run id or unique part of it.
        name: The new label.

    Returns:
        The full run id.
    """
    if not name.strip():
        raise StoreError("a run name cannot be empty")
    rid = store.get_run(run_id)["run_id"]
    with _owner_only_files():
        store.con.execute("UPDATE runs SET name = ? WHERE run_id = ?", [name.strip(), rid])
    return str(rid)
