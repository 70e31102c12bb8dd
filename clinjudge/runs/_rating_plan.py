"""`judge rate plan`: a seeded sample of a run's items assigned to named raters, with overlap
for inter-rater agreement, stored so the same seed gives the same plan.

Overlap is either a number of raters per item (``2``: every item by two raters, rotating so
each rater gets a fair share) or a share of items rated by every rater (``20%``: the others
by one rater each). Strata (``score``: quartiles of the judge's mean final score; ``vendor``)
sample each stratum in proportion to its size.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from clinjudge.errors import UserError
from clinjudge.runs._rating_store import PlanRecord, plan_candidates, save_plan, stored_run_rubric
from clinjudge.runs._store import RunStore

if TYPE_CHECKING:  # numpy loads with the first plan, not with the store
    import numpy as np

STRATA = ("", "score", "vendor")
_OVERLAP = re.compile(r"^(?:(\d+)|(\d+(?:\.\d+)?)%)$")


class PlanError(UserError):
    """A rating plan that cannot be made as asked."""


def parse_overlap(text: str, n_raters: int) -> tuple[int | None, float | None]:
    """(raters per item, None) or (None, share of items rated by all) from ``2`` or ``20%``.

    Args:
        text: The overlap as written.
        n_raters: How many raters the plan has.

    Raises:
        PlanError: Neither form, or more raters per item than there are raters.
    """
    match = _OVERLAP.match(text.strip())
    if match is None:
        raise PlanError(
            f"overlap {text!r}: write raters per item (2) or a share rated by all (20%)",
            setting="overlap",
        )
    if match.group(1) is not None:
        k = int(match.group(1))
        if not 1 <= k <= n_raters:
            raise PlanError(
                f"overlap {k}: raters per item must be 1 to {n_raters} (the raters named)",
                setting="overlap",
            )
        return k, None
    share = float(match.group(2)) / 100
    if not 0 <= share <= 1:
        raise PlanError(f"overlap {text!r}: a share is 0% to 100%", setting="overlap")
    return None, share


def _strata_keys(candidates: Sequence[dict[str, Any]], strata: str) -> list[str]:
    import numpy as np

    if strata == "vendor":
        return [str(c["vendor"] or "") for c in candidates]
    if strata == "score":
        scores = np.array([c["score"] for c in candidates], dtype=float)
        edges = np.quantile(scores, [0.25, 0.5, 0.75]) if len(scores) else []
        return [f"q{int(np.searchsorted(edges, s, side='right'))}" for s in scores]
    return [""] * len(candidates)


def _sample(keys: list[str], size: int, rng: np.random.Generator) -> list[int]:
    """Indices of a sample of ``size``, each stratum in proportion (largest remainder)."""
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    total = len(keys)
    exact = {k: size * len(v) / total for k, v in groups.items()}
    counts = {k: int(x) for k, x in exact.items()}
    for k in sorted(exact, key=lambda k: (counts[k] - exact[k], k))[: size - sum(counts.values())]:
        counts[k] += 1
    chosen: list[int] = []
    for key in sorted(groups):
        members = groups[key]
        chosen += rng.choice(members, size=min(counts[key], len(members)), replace=False).tolist()
    rng.shuffle(chosen)  # raters meet the strata mixed, not one after another
    return [int(i) for i in chosen]


def make_assignments(
    item_ids: Sequence[str],
    raters: Sequence[str],
    *,
    per_item: int | None,
    share_all: float | None,
    rng: np.random.Generator,
) -> list[tuple[str, str, int]]:
    """(rater, item, position) rows for items in the order given.

    Args:
        item_ids: Sampled items, in the order raters meet them.
        raters: Rater names.
        per_item: Raters per item (rotating), or None.
        share_all: Share of items every rater rates (the rest by one each), or None.
        rng: The plan's random generator (which items all raters share).
    """
    n = len(item_ids)
    by_rater: dict[str, list[str]] = {r: [] for r in raters}
    if per_item is not None:
        for i, item in enumerate(item_ids):
            for j in range(per_item):
                by_rater[raters[(i * per_item + j) % len(raters)]].append(item)
    else:
        shared = set(rng.choice(n, size=round((share_all or 0) * n), replace=False).tolist())
        turn = 0
        for i, item in enumerate(item_ids):
            if i in shared:
                for rater in raters:
                    by_rater[rater].append(item)
            else:
                by_rater[raters[turn % len(raters)]].append(item)
                turn += 1
    return [(r, item, pos) for r, items in by_rater.items() for pos, item in enumerate(items, 1)]


def plan_rating(
    store: RunStore,
    run_id: str,
    raters: Sequence[str],
    *,
    size: int | None = None,
    overlap: str = "2",
    strata: str = "",
    seed: int = 0,
    items: Sequence[str] | None = None,
    replace: bool = False,
) -> tuple[PlanRecord, list[tuple[str, str, int]]]:
    """Make and store a rating plan of a run.

    Args:
        store: The run store (opened for writing).
        run_id: Run id or unique part of it.
        raters: Rater names (distinct).
        size: Items to sample (None: every item, or every item of ``items``).
        overlap: ``K`` raters per item or ``P%`` of items rated by all.
        strata: ``score``, ``vendor`` or empty.
        seed: The sample's seed.
        items: Items chosen already (``judge audit plan --out``), else sampled here.
        replace: Replace an existing plan.

    Raises:
        PlanError: Bad raters, overlap, strata, size or items.
    """
    names = [r.strip() for r in raters if r.strip()]
    if not names or len(set(names)) != len(names):
        raise PlanError("name the raters once each: --raters alice,bob", setting="raters")
    bad = [r for r in names if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}", r)]
    if bad:
        raise PlanError(
            f"rater name(s) {bad}: letters, digits and _ . @ - only (at most 64)",
            setting="raters",
        )
    if strata not in STRATA:
        raise PlanError(f"strata {strata!r}: say score or vendor", setting="strata")
    per_item, share = parse_overlap(overlap, len(names))
    full_id, rubric = stored_run_rubric(store, run_id)
    candidates = plan_candidates(store, full_id)
    if strata == "score":
        candidates = [c for c in candidates if c["score"] is not None]
    known = [str(c["item_id"]) for c in candidates]
    if items is not None:
        missing = sorted(set(items) - set(known))
        if missing:
            raise PlanError(
                f"{len(missing)} item(s) are not in run {full_id}, e.g. {missing[0]!r}",
                setting="items",
            )
        wanted = set(items)
        keep = [i for i, c in enumerate(candidates) if c["item_id"] in wanted]
        candidates = [candidates[i] for i in keep]
    if not candidates:
        raise PlanError(f"run {full_id} has no items to rate", setting="run")
    size = len(candidates) if size is None else size
    if not 1 <= size <= len(candidates):
        raise PlanError(
            f"size {size}: the run has {len(candidates)} item(s) to sample from",
            setting="size",
        )
    import numpy as np

    rng = np.random.default_rng(seed)
    chosen = _sample(_strata_keys(candidates, strata), size, rng)
    item_ids = [str(candidates[i]["item_id"]) for i in chosen]
    rows = make_assignments(item_ids, names, per_item=per_item, share_all=share, rng=rng)
    plan = PlanRecord(
        run_id=full_id, rubric=rubric.name, seed=seed, size=size, overlap=overlap.strip(),
        strata=strata, raters=names,
    )  # fmt: skip
    save_plan(store, plan, rows, replace=replace)
    return plan, rows
