"""How several scorings of one text combine: the median, attribute by attribute.

The median of an even number of values is the mean of the middle two. A gated attribute
(PDSQI-9 ``synthesized``) is null when its gate's combined value equals the gate's null value;
a tie on a binary gate (0.5) counts as "needed".
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

from clinjudge.rubrics._reducers import DEFAULT_REDUCER, get_reducer
from clinjudge.rubrics._schema import Rubric


def median_scores(
    rubric: Rubric,
    samples: Sequence[Mapping[str, float | None]],
    middle: Callable[[list[float]], float] = statistics.median,
) -> dict[str, float | None]:
    """Each attribute's median over samples, with a gated attribute nulled by its gate.

    Args:
        rubric: The rubric (attributes and gates).
        samples: Each sample's values by attribute key (None where missing).
        middle: The median to take (``statistics.median_low`` keeps values on the scale).
    """
    finals: dict[str, float | None] = {}
    for attribute in rubric.attributes:
        numbers = [v for s in samples if (v := s.get(attribute.key)) is not None]
        finals[attribute.key] = middle(numbers) if numbers else None
    for attribute in rubric.attributes:
        gate = attribute.gate
        if gate is not None and finals.get(gate.attribute) == gate.null_when:
            finals[attribute.key] = None
    return finals


def combine_scores(
    rubric: Rubric, samples: Sequence[Mapping[str, float | None]], reducer: str = DEFAULT_REDUCER
) -> dict[str, float | None]:
    """Each attribute reduced over samples by a registered reducer, with the gate rule.

    Whether a gate nulls the attribute it gates always follows the samples' median (the
    majority of a binary gate), whatever the reducer: the reducer gives the values of the
    attributes left standing. With ``median`` this is :func:`median_scores`.

    Args:
        rubric: The rubric (attributes and gates).
        samples: Each sample's values by attribute key (None where missing).
        reducer: The registered reducer's name (``rubrics.reducer_names()``).
    """
    medians = median_scores(rubric, samples)
    if reducer == DEFAULT_REDUCER:
        return medians
    reduce = get_reducer(reducer)
    finals: dict[str, float | None] = {}
    for key, median in medians.items():
        numbers = [v for s in samples if (v := s.get(key)) is not None]
        # median is None exactly when no sample gave a number or the gate nulled it.
        finals[key] = None if median is None else reduce(numbers)
    return finals
