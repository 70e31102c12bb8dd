"""closing_bracket: the one brace scanner shared by rubric and DocLens reply parsing."""

from __future__ import annotations

import ast
import json

from hypothesis import given
from hypothesis import strategies as st

from clinjudge.rubrics import closing_bracket

# Strings full of brackets and quotes: the scanner must skip what is inside them.
_TEXT = st.text(alphabet="ab{}[]\"'\\ :,", max_size=8)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=12,
)
_CONTAINERS = st.lists(_VALUES, max_size=3) | st.dictionaries(_TEXT, _VALUES, max_size=3)


@given(_CONTAINERS, st.sampled_from(["", "Here: ", "x {"]), st.sampled_from(["", " done }", "]"]))
def test_finds_the_end_of_any_json_value_in_prose(value: object, before: str, after: str) -> None:
    encoded = json.dumps(value)
    text = before + encoded + after
    end = closing_bracket(text, len(before))
    assert end == len(before) + len(encoded)
    assert json.loads(text[len(before) : end]) == value


@given(_CONTAINERS)
def test_single_quotes_read_python_literals(value: object) -> None:
    text = repr(value) + " and more"
    end = closing_bracket(text, 0, single_quotes=True)
    assert end is not None
    assert ast.literal_eval(text[:end]) == value


def test_apostrophes_are_not_quotes() -> None:
    text = "{claim: the patient's dose} isn't it"
    # The quote after a letter opens no string, so the object closes at its brace.
    assert closing_bracket(text, 0, single_quotes=True) == text.index("}") + 1


def test_unclosed_or_single_quoted_without_the_option() -> None:
    assert closing_bracket('{"a": [1, 2}', 0) is None
    assert closing_bracket('{"a": "}"', 0) is None
    # Without single_quotes a '}' inside single quotes closes the object.
    assert closing_bracket("{'a': '}'}", 0) == 8
