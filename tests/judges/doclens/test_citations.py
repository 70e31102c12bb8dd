"""Citation parsing: numbered source units, statement splitting, uncited policy and cap."""

from __future__ import annotations

import pytest

from clinjudge.judges import DocLensSettings
from clinjudge.judges.doclens._citations import (
    assign_citations,
    citation_numbers,
    output_statements,
    remove_citations,
    source_units,
    split_statements,
)
from clinjudge.rubrics import SourceNote

NOTE = """HISTORY OF PRESENT ILLNESS
Martha is a 50-year-old female who presents for her annual exam [4]. Dr. Smith saw her a year ago [4][5]. She takes lisinopril 20 mg daily.
Her BP was 120/80 [7, 8] She reports a 2.5 kg weight gain [9-11].
1. New infarcts in the left lobe. [0] 2. No hemorrhage. [1][2]
RESULTS:
Chest x-ray is normal."""  # noqa: E501


def test_split_statements_attaches_runs_before_or_after_the_stop() -> None:
    statements = split_statements(NOTE)
    assert [(s.text, s.written) for s in statements] == [
        ("Martha is a 50-year-old female who presents for her annual exam.", (4,)),
        ("Dr. Smith saw her a year ago.", (4, 5)),
        ("She takes lisinopril 20 mg daily.", ()),
        ("Her BP was 120/80", (7, 8)),
        ("She reports a 2.5 kg weight gain.", (9, 10, 11)),
        ("1. New infarcts in the left lobe.", (0,)),
        ("2. No hemorrhage.", (1, 2)),
        ("Chest x-ray is normal.", ()),
    ]


def test_citation_numbers_dedupe_in_written_order() -> None:
    assert citation_numbers("a [3][1] b [3, 2] c [5-6] d [Note 2] e [9–8]") == [3, 1, 2, 5, 6, 9, 8]
    assert remove_citations("Pain [12][13]. Grade 3/6 murmur [30] [x].") == (
        "Pain. Grade 3/6 murmur [x]."
    )


def test_uncited_policies_and_cap() -> None:
    statements = split_statements("A one. B two [3][1][2]. C three. D four.")
    borrowed = assign_citations(statements, "borrow_next", max_citations=2)
    assert [s.citations for s in borrowed] == [(3, 1), (3, 1), (), ()]
    assert [s.borrowed for s in borrowed] == [True, False, False, False]
    zero = assign_citations(statements, "zero", max_citations=10)
    assert [s.citations for s in zero] == [(), (3, 1, 2), (), ()]


@pytest.mark.parametrize(
    ("mode", "base", "expected"),
    [
        ("lines", 0, {0: "[doctor] hi", 1: "[patient] cough", 2: "[doctor] any fever"}),
        ("lines", 1, {1: "[doctor] hi", 2: "[patient] cough", 3: "[doctor] any fever"}),
        ("notes", 1, {1: "[doctor] hi [patient] cough", 2: "[doctor] any fever"}),
    ],
)
def test_source_units_numbering(mode: str, base: int, expected: dict[int, str]) -> None:
    notes = [
        SourceNote(id="1", text="[doctor] hi\n\n[patient]   cough"),
        SourceNote(id="2", text="[doctor] any fever"),
    ]
    settings = DocLensSettings(source_units=mode, citation_base=base)  # type: ignore[arg-type]
    assert source_units(notes, settings).units == expected


def test_source_units_read_existing_markers_automatically() -> None:
    text = "[0] i have chronic renal disease. [1] is this true? [3] skipped two"
    units = source_units([SourceNote(id="1", text=text)], DocLensSettings()).units
    assert units == {0: "i have chronic renal disease.", 1: "is this true?", 3: "skipped two"}


def test_output_statements_use_settings() -> None:
    settings = DocLensSettings(uncited="zero", max_citations=1)
    got = output_statements("Fever [2][1]. Cough.", settings)
    assert [(s.text, s.citations) for s in got] == [("Fever.", (2,)), ("Cough.", ())]
