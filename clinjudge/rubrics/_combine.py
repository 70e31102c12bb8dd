"""How several scorings of one text combine: the median, attribute by attribute.

The median of an even number of values is the mean of the middle two. A gated attribute
(PDSQI-9 ``synthesized``) is null when its gate's combined value equals the gate's null value;
a tie on a binary gate (0.5) counts as "needed".
"""

from __future__ import annotations

import statistics

from clinjudge.rubrics._schema import Rubric


def median_scores(
    rubric: Rubric, samples: list[dict[str, float | None]]
) -> dict[str, float | None]:
    """Each attribute's median over samples, with a gated attribute nulled by its gate.

    Args:
        rubric: The rubric (attributes and gates).
        samples: Each sample's values by attribute key (None where missing).
    """
    finals: dict[str, float | None] = {}
    for attribute in rubric.attributes:
        numbers = [v for s in samples if (v := s.get(attribute.key)) is not None]
        finals[attribute.key] = statistics.median(numbers) if numbers else None
    for attribute in rubric.attributes:
        gate = attribute.gate
        if gate is not None and finals.get(gate.attribute) == gate.null_when:
            finals[attribute.key] = None
    return finals
