"""Prepare a probe run: each item and its seeded, rule-based variants as one run.

A probe run is an ordinary run whose items are the originals followed each by its variants,
so resume, merge, export and the viewer treat it as any run; ``probe_variants`` links each
variant to its original and probe, and ``probe_skips`` keeps why a probe left an original
alone. Probe runs are meant for tens to hundreds of items: the originals and variants are held
in memory while the run is prepared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from clinjudge.inputs import (
    InputError,
    ProbeSkip,
    make_variant,
    probe_expectations,
)
from clinjudge.orchestration._config import ConfigError, RunConfig
from clinjudge.orchestration._fit import context_window, oversized_item
from clinjudge.orchestration._run_items import FileItems, ListItems
from clinjudge.orchestration._session import PreparedRun, create_run, new_run_id, prepare_run
from clinjudge.rubrics import Item
from clinjudge.runs import ProbeSkipRow, ProbeVariantRow, RunStore, write_probe_rows


@dataclass
class PreparedProbe:
    """A probe run, checked and built, nothing written.

    Args:
        run: The run over originals and variants.
        probes: The probes asked for, in report order.
        originals: How many originals the run holds.
        variants: Each variant's row for ``probe_variants``.
        skips: Each (original, probe) the probe could not edit, with the reason.
    """

    run: PreparedRun
    probes: list[str]
    originals: int
    variants: list[ProbeVariantRow] = field(default_factory=list)
    skips: list[ProbeSkipRow] = field(default_factory=list)


def prepare_probe(
    config: RunConfig, probes: Sequence[str], *, limit: int | None = None
) -> PreparedProbe:
    """Read and check the items as a run would, make every probe's variant of each (seeded
    with ``config.seed``), and combine them into one run; writes nothing.

    Args:
        config: The run configuration (``data`` names the originals).
        probes: Probe names (checked by the caller, e.g. ``parse_probes``).
        limit: Probe only the first ``limit`` items.

    Raises:
        ConfigError: A sharded probe run, or a variant id that an original already has.
        InputError: A variant whose prompt exceeds the judge's context window.
    """
    if config.shard:
        raise ConfigError(
            "a probe run is not sharded: its variants are judged with their originals",
            setting="shard",
        )
    base = prepare_run(config, limit=limit)
    if isinstance(base.items, FileItems) and base.items.staged is not None:
        base.items.staged.close()  # the run's items are rebuilt below, with the variants
        base.items.staged = None
    originals = list(base.items)
    ids = {item.id for item in originals}
    applies = {p: probe_expectations(base.rubric, p) for p in probes}
    items: list[Item] = []
    variants: list[ProbeVariantRow] = []
    skips: list[ProbeSkipRow] = []
    oversized: list[str] = []
    window = (
        context_window(config.judge) if config.judge and base.rubric.method == "scores" else None
    )
    for original in originals:
        items.append(original)
        for probe in probes:
            expectations = applies[probe]
            if isinstance(expectations, str):  # no attribute of the rubric measures it
                skips.append({"original_id": original.id, "probe": probe, "reason": expectations})
                continue
            made = make_variant(original, probe, config.seed)
            if isinstance(made, ProbeSkip):
                skips.append({"original_id": original.id, "probe": probe, "reason": made.reason})
                continue
            if made.item.id in ids:
                raise ConfigError(
                    f"item id {made.item.id!r} is both an original and the {probe} variant of "
                    f"{original.id!r}; rename it (ids containing '~' are reserved for variants)",
                    setting="data",
                )
            if window is not None and config.judge is not None:
                problem = oversized_item(
                    made.item, base.rubric, config.judge, config.data or "", window
                )
                if problem is not None:
                    oversized.append(f"{problem} ({probe} variant)")
                    continue
            items.append(made.item)
            variants.append(
                {
                    "item_id": made.item.id,
                    "original_id": original.id,
                    "probe": probe,
                    "seed": config.seed,
                    "edit": made.edit.to_dict(),
                }
            )
    if oversized:
        raise InputError(oversized)
    run = PreparedRun(config, base.rubric, ListItems(items), base.shots, personas=base.personas)
    return PreparedProbe(run, list(probes), len(originals), variants, skips)


def create_probe_run(store: RunStore, probe: PreparedProbe) -> str:
    """Store a prepared probe run: its variants and skips, then the run and its items.

    The probe rows go first, under the run id the run then takes, so a stored run is never
    without them (a crash in between leaves rows of no run, which no read meets).

    Args:
        store: The run store.
        probe: The prepared probe run.
    """
    if probe.run.run_id is None:
        probe.run.run_id = new_run_id()
    write_probe_rows(store, probe.run.run_id, probe.variants, probe.skips)
    return create_run(store, probe.run)
