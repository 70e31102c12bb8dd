"""Property-based tests (hypothesis) of the two parsers that see untrusted bytes: the judge-reply
parser and the input loader.

Reply parser: any text gives either a judgment that satisfies the rubric or JudgmentParseError,
never another exception; a valid judgment is read back exactly whatever prose, fences or
reasoning surround it. Input loader: any valid items round-trip through JSONL and CSV; any
corrupted line gives InputError naming that line, never another exception.
"""

from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clinjudge.inputs import InputError, load_items
from clinjudge.rubrics import Item, JudgmentParseError, load_rubric, parse_judgment

PDSQI9 = load_rubric("pdsqi9")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FILE_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
LIKERT = [a.key for a in PDSQI9.attributes if a.max == 5 and a.gate is None]


@st.composite
def valid_scores(draw: st.DrawFn) -> dict[str, int | None]:
    """A judgment PDSQI-9 accepts: Likert 1-5, binaries 0/1, synthesized null iff no abstraction."""
    scores: dict[str, int | None] = {}
    for attribute in PDSQI9.attributes:
        if attribute.gate is None:
            scores[attribute.key] = draw(st.sampled_from(sorted(attribute.values)))
    gate = PDSQI9.attribute("synthesized").gate
    assert gate is not None
    closed = scores[gate.attribute] == gate.null_when
    scores["synthesized"] = None if closed else draw(st.integers(1, 5))
    return scores


def _score_form(value: int | None, draw: st.DrawFn) -> Any:
    if value is None:
        return draw(st.sampled_from([None, "NA", "n/a"]))
    return draw(
        st.sampled_from(
            [value, float(value), str(value), {"score": value, "explanation": "because"}]
        )
    )


_PROSE = st.text(
    alphabet=st.characters(blacklist_characters="{}", blacklist_categories=("Cs",)), max_size=80
)


@SETTINGS
@given(scores=valid_scores(), before=_PROSE, after=_PROSE, data=st.data())
def test_valid_judgment_is_read_back_exactly(
    scores: dict[str, int | None], before: str, after: str, data: st.DataObject
) -> None:
    reply = {key: _score_form(value, data.draw) for key, value in scores.items()}
    body = json.dumps(reply, indent=data.draw(st.sampled_from([None, 2])))
    wrapper = data.draw(st.sampled_from(["@@", "```json\n@@\n```", "<think>hmm {}</think>@@"]))
    text = f"{before}\n{wrapper.replace('@@', body)}\n{after}"
    parsed = parse_judgment(text, PDSQI9)
    assert parsed.values == scores


def _check_judgment_or_error(text: str) -> None:
    try:
        parsed = parse_judgment(text, PDSQI9)
    except JudgmentParseError as exc:
        assert str(exc)  # always a reason
        return
    assert list(parsed.values) == PDSQI9.keys
    for attribute in PDSQI9.attributes:
        value = parsed.values[attribute.key]
        assert value is None or value in attribute.values
        assert value is not None or attribute.nullable
    assert PDSQI9.gate_violation(parsed.values) is None


@SETTINGS
@given(text=st.text(max_size=400))
def test_any_text_is_a_valid_judgment_or_a_parse_error(text: str) -> None:
    _check_judgment_or_error(text)


_JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-10, 10)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from([*PDSQI9.keys, "score", "scores", "rationale", "x"]), inner
        )
    ),
    max_leaves=20,
)


@SETTINGS
@given(reply=st.dictionaries(st.sampled_from([*PDSQI9.keys, "scores", "rationale"]), _JSONISH))
def test_json_with_rubric_keys_is_valid_or_a_parse_error(reply: dict[str, Any]) -> None:
    _check_judgment_or_error(json.dumps(reply))


@SETTINGS
@given(scores=valid_scores(), key=st.sampled_from(LIKERT), bad=st.sampled_from([0, 6, -1, 9, 2.5]))
def test_off_scale_value_is_always_rejected(
    scores: dict[str, int | None], key: str, bad: float
) -> None:
    try:
        parse_judgment(json.dumps({**scores, key: bad}), PDSQI9)
    except JudgmentParseError as exc:
        assert key in str(exc)
    else:
        raise AssertionError(f"{key}={bad} was accepted")


# -- the input loader ---------------------------------------------------------------------------

_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40
).filter(lambda t: t.strip() != "")
_ITEM = st.builds(
    lambda i, notes, summary, specialty: Item(
        id=f"id-{i}", notes=notes, summary=summary, specialty=specialty
    ),
    st.integers(0, 10**6),
    st.lists(_TEXT, min_size=1, max_size=3),
    _TEXT,
    _TEXT,
)
_ITEMS = st.lists(_ITEM, min_size=1, max_size=6, unique_by=lambda item: item.id)


@FILE_SETTINGS
@given(items=_ITEMS)
def test_valid_items_round_trip_through_jsonl_and_csv(items: list[Item]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        jsonl = Path(folder) / "items.jsonl"
        jsonl.write_text(
            "".join(json.dumps(i.model_dump(exclude_none=True)) + "\n" for i in items),
            encoding="utf-8",
        )
        assert load_items(jsonl, PDSQI9) == items
        table = Path(folder) / "items.csv"
        with table.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["id", "notes", "summary", "specialty"])
            for item in items:
                notes = json.dumps([n.text for n in item.notes])
                writer.writerow([item.id, notes, item.summary, item.specialty])
        assert load_items(table, PDSQI9) == items


@FILE_SETTINGS
@given(items=_ITEMS, position=st.integers(0, 5), garbage=st.text(max_size=60), data=st.data())
def test_a_corrupted_line_is_named_or_harmless(
    items: list[Item], position: int, garbage: str, data: st.DataObject
) -> None:
    lines = [json.dumps(i.model_dump(exclude_none=True)) for i in items]
    position = min(position, len(lines))
    # Corrupt one line: replace it by arbitrary text, or cut it short.
    if data.draw(st.booleans()) and position < len(lines):
        lines[position] = lines[position][: data.draw(st.integers(0, len(lines[position]) - 1))]
    else:
        lines.insert(position, garbage.replace("\n", " ").replace("\r", " "))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "items.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        try:
            loaded = load_items(path, PDSQI9)
        except InputError as exc:
            assert exc.problems
            assert all(p.startswith(str(path)) for p in exc.problems)
            if lines[position].strip():
                assert any(f":line {position + 1}" in p for p in exc.problems), exc.problems
            return
    # Accepted only when the damaged line was blank or still a valid, distinct item.
    assert all(isinstance(item, Item) for item in loaded)
    assert len({item.id for item in loaded}) == len(loaded)
