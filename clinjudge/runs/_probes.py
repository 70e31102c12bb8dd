"""The tables of ``judge probe`` runs: which items are edited variants of which originals
(``probe_variants``), which originals a probe could not edit (``probe_skips``), and the final
scores the probe statistics pair up.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypedDict, cast

from clinjudge.runs._aggregate import FINAL_AGENT
from clinjudge.runs._store import FINAL_SAMPLE, RunStore


class ProbeVariantRow(TypedDict):
    """One variant item of a probe run."""

    item_id: str
    original_id: str
    probe: str
    seed: int
    edit: dict[str, Any]


class ProbeSkipRow(TypedDict):
    """An original a probe could not edit, and why."""

    original_id: str
    probe: str
    reason: str


def write_probe_rows(
    store: RunStore,
    run_id: str,
    variants: Sequence[ProbeVariantRow],
    skips: Sequence[ProbeSkipRow],
) -> None:
    """Record a probe run's variants and skips in one transaction (rows already stored, as
    when a creation is repeated, are left as they are).

    Args:
        store: The run store (open for writing).
        run_id: The probe run's full id.
        variants: Its variant items.
        skips: The originals each probe could not edit.
    """
    store.write_batch(
        {
            "probe_variants": [
                {**v, "run_id": run_id, "edit": json.dumps(v["edit"])} for v in variants
            ],
            "probe_skips": [{**s, "run_id": run_id} for s in skips],
        }
    )


def is_probe_run(store: RunStore, run_id: str) -> bool:
    """Whether the run has probe variants (a store from before version 7 has none)."""
    if not store.has_table("probe_variants"):
        return False
    rows = store.query("SELECT count(*) AS n FROM probe_variants WHERE run_id = ?", [run_id])
    return bool(rows[0]["n"])


def probe_variant_rows(store: RunStore, run_id: str) -> list[ProbeVariantRow]:
    """A probe run's variants in item order (original, then probe order of creation).

    Args:
        store: The run store.
        run_id: Full run id.
    """
    if not store.has_table("probe_variants"):
        return []
    rows = store.query(
        """
        SELECT v.item_id, v.original_id, v.probe, v.seed, v.edit
        FROM probe_variants v LEFT JOIN items i ON i.run_id = v.run_id AND i.item_id = v.item_id
        WHERE v.run_id = ? ORDER BY i.position, v.item_id
        """,
        [run_id],
    )
    for row in rows:
        edit = row["edit"]
        row["edit"] = json.loads(edit) if isinstance(edit, str) else (edit or {})
    return cast(list[ProbeVariantRow], rows)


def probe_skip_rows(store: RunStore, run_id: str) -> list[ProbeSkipRow]:
    """The originals each probe of a run could not edit, with the reasons.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    if not store.has_table("probe_skips"):
        return []
    rows = store.query(
        "SELECT original_id, probe, reason FROM probe_skips WHERE run_id = ? "
        "ORDER BY probe, original_id",
        [run_id],
    )
    return cast(list[ProbeSkipRow], rows)


def valid_final_values(store: RunStore, run_id: str) -> dict[str, dict[str, float]]:
    """Every item's valid final values (item -> attribute -> value); a failed judgment or a
    null (not applicable) value is absent.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    rows = store.query(
        "SELECT item_id, attribute, value FROM judgments WHERE run_id = ? AND final "
        "AND sample = ? AND agent = ? AND status = 'ok' AND value IS NOT NULL",
        [run_id, FINAL_SAMPLE, FINAL_AGENT],
    )
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        out.setdefault(r["item_id"], {})[r["attribute"]] = float(r["value"])
    return out


def probe_links(store: RunStore, run_id: str, item_ids: Sequence[str]) -> list[ProbeVariantRow]:
    """The variant rows that concern some items of a run: each item's own row (when it is a
    variant), the variants of each (when it is an original), and the other variants of its
    original, for the viewer's links between an original and its variants.

    Args:
        store: The run store.
        run_id: Full run id.
        item_ids: The items (a page's, or a chunk of the static export's).
    """
    if not item_ids or not store.has_table("probe_variants"):
        return []
    ids = list(item_ids)
    rows = store.query(
        """
        SELECT v.item_id, v.original_id, v.probe, v.seed, v.edit
        FROM probe_variants v LEFT JOIN items i ON i.run_id = v.run_id AND i.item_id = v.item_id
        WHERE v.run_id = ? AND (
            v.item_id IN (SELECT unnest(?)) OR v.original_id IN (SELECT unnest(?))
            OR v.original_id IN (SELECT original_id FROM probe_variants
                                 WHERE run_id = ? AND item_id IN (SELECT unnest(?))))
        ORDER BY i.position, v.item_id
        """,
        [run_id, ids, ids, run_id, ids],
    )
    for row in rows:
        edit = row["edit"]
        row["edit"] = json.loads(edit) if isinstance(edit, str) else (edit or {})
    return cast(list[ProbeVariantRow], rows)
