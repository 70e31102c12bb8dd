"""DocLens metric arithmetic on hand-built cases."""

from __future__ import annotations

import pytest

from clinjudge.judges.doclens import Tally
from clinjudge.judges.doclens._metrics import citation_tallies, claim_tally, counted_citations


def test_claim_tally_counts_failures_as_not_entailed() -> None:
    tally = claim_tally(["entailed", "failed", "not_entailed", "entailed"])
    assert (tally.hits, tally.total, tally.failed) == (2, 4, 1)
    assert tally.value == 0.5  # 2/4, not 2/3: the failure stays in the denominator
    assert claim_tally([]).value is None
    with pytest.raises(ValueError, match="unknown verdict"):
        claim_tally(["yes"])


def test_tallies_pool_by_adding_parts() -> None:
    pooled = Tally(2, 3) + Tally(2, 2, 1)
    assert (pooled.hits, pooled.total, pooled.failed, pooled.value) == (4, 5, 1, 0.8)


def test_necessary_citation_rule() -> None:
    # s is entailed by [1, 2, 3] together. 1 entails s alone: counts. 2 does not, and the
    # others (1, 3) still entail s without it: irrelevant, does not count. 3 does not entail
    # alone, and without it (1, 2) s is no longer entailed: necessary, counts.
    alone = {1: True, 2: False, 3: False}
    without = {1: True, 2: True, 3: False}
    assert counted_citations([1, 2, 3], True, alone, without) == [1, 3]
    # Not jointly entailed: no citation counts, whatever the rest says.
    assert counted_citations([1, 2, 3], False, alone, without) == []
    # A single citation counts exactly when it entails.
    assert counted_citations([7], True, {}, {}) == [7]
    # Two citations that only entail together: both are necessary.
    assert counted_citations([4, 5], True, {4: False, 5: False}, {4: False, 5: False}) == [4, 5]


def test_citation_recall_and_precision() -> None:
    # Statement 1: entailed, 2 citations, 1 counts. Statement 2: not entailed, its 3
    # citations stay in the precision denominator. Statement 3: uncited (0 citations) and
    # not entailed. Statement 4: failed with 1 citation.
    recall, precision = citation_tallies(
        ["entailed", "not_entailed", "not_entailed", "failed"], [2, 3, 0, 1], [1, 3, 0, 1]
    )
    assert (recall.hits, recall.total, recall.failed) == (1, 4, 1)
    assert recall.value == 0.25
    # Counted citations of non-entailed statements are ignored: 1 / (2 + 3 + 0 + 1).
    assert (precision.hits, precision.total, precision.failed) == (1, 6, 1)
    assert precision.value == pytest.approx(1 / 6)


def test_citation_tallies_validate_inputs() -> None:
    with pytest.raises(ValueError, match="one entry per statement"):
        citation_tallies(["entailed"], [1, 2], [1])
    with pytest.raises(ValueError, match="more counted"):
        citation_tallies(["entailed"], [1], [2])
    recall, precision = citation_tallies([], [], [])
    assert recall.value is None and precision.value is None
