"""DocLens metric arithmetic: pure functions over verdicts and citation counts.

Definitions (Xie et al., ACL 2024; SPEC §3.3):

- claim recall = entailed reference claims / reference claims (judged against the output);
- claim precision = entailed output claims / output claims (judged against the reference);
- citation recall = statements entailed by the union of their citations / statements;
- citation precision = counted citations / citations, where a citation c of statement s counts
  when s is entailed by all its citations together and (c alone entails s, or the citations
  without c do not). Citations of statements that are not entailed stay in the denominator.

A failed judgment counts as not entailed: it stays in every denominator and is reported as a
count, never dropped. A ratio with an empty denominator is undefined (None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

ENTAILED = "entailed"
NOT_ENTAILED = "not_entailed"
FAILED = "failed"
VERDICTS = (ENTAILED, NOT_ENTAILED, FAILED)


@dataclass(frozen=True)
class Tally:
    """A ratio with its parts.

    Args:
        hits: Numerator (entailed claims or statements, counted citations).
        total: Denominator (all claims, statements or citations).
        failed: Judgments in the denominator that failed (counted as not entailed).
    """

    hits: int
    total: int
    failed: int = 0

    @property
    def value(self) -> float | None:
        """hits / total, or None when there is nothing to count."""
        return self.hits / self.total if self.total else None

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.hits + other.hits, self.total + other.total, self.failed + other.failed)


def _check(verdict: str) -> str:
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}; expected one of {VERDICTS}")
    return verdict


def claim_tally(verdicts: Sequence[str]) -> Tally:
    """Claim recall or precision of one set of claims.

    Args:
        verdicts: One of ``entailed``, ``not_entailed``, ``failed`` per claim.
    """
    checked = [_check(v) for v in verdicts]
    return Tally(checked.count(ENTAILED), len(checked), checked.count(FAILED))


def counted_citations(
    citations: Sequence[int],
    joint: bool,
    alone: Mapping[int, bool],
    without: Mapping[int, bool],
) -> list[int]:
    """The citations of one statement that count towards citation precision.

    A citation counts when the statement is entailed by all its citations (``joint``) and the
    citation alone entails it or the other citations without it do not (it is necessary). With
    a single citation, ``joint`` decides.

    Args:
        citations: The statement's citations.
        joint: Whether all citations together entail the statement.
        alone: Per citation, whether it alone entails the statement.
        without: Per citation, whether the other citations (without it) entail the statement.
    """
    if not joint:
        return []
    if len(citations) == 1:
        return list(citations)
    return [c for c in citations if alone[c] or not without[c]]


def citation_tallies(
    verdicts: Sequence[str], n_citations: Sequence[int], n_counted: Sequence[int]
) -> tuple[Tally, Tally]:
    """Citation recall and precision over statements (vectorised).

    Args:
        verdicts: Per statement, whether its citations jointly entail it.
        n_citations: Per statement, how many citations it has (after the cap).
        n_counted: Per statement, how many of them count (only used when entailed).

    Returns:
        (citation recall, citation precision).
    """
    checked = np.array([_check(v) for v in verdicts], dtype=object)
    cited = np.asarray(n_citations, dtype=np.int64)
    counted = np.asarray(n_counted, dtype=np.int64)
    if not (len(checked) == len(cited) == len(counted)):
        raise ValueError("verdicts, n_citations and n_counted must have one entry per statement")
    if np.any(counted > cited):
        raise ValueError("a statement cannot have more counted citations than citations")
    entailed = checked == ENTAILED
    failed = checked == FAILED
    recall = Tally(int(entailed.sum()), len(checked), int(failed.sum()))
    precision = Tally(
        int(counted[entailed].sum()), int(cited.sum()), int((failed & (cited > 0)).sum())
    )
    return recall, precision
