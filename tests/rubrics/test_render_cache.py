"""The system message is rendered once per rubric object (issue 27): a rubric object always gets
the text of its own contents, never another rubric's."""

from __future__ import annotations

from clinjudge.rubrics import (
    load_rubric,
    neutralise,
    render_system,
    rubric_json_schema,
    shared_reply_schema,
)


def test_each_rubric_object_gets_its_own_system_text():
    first = load_rubric("pdsqi9")
    text = render_system(first)
    assert render_system(first) is text  # rendered once
    same = load_rubric("pdsqi9")
    assert same is not first and render_system(same) == text
    changed = first.model_copy(update={"task": "Grade the discharge letter below."})
    other = render_system(changed)
    assert "TASK\nGrade the discharge letter below.\n" in other
    assert first.task.strip() not in other
    assert render_system(first) == text  # the copy did not disturb the original's entry
    with_explanations = render_system(first, explanations=True)
    assert with_explanations != text and '"explanation"' in with_explanations
    assert "PROCESS REWARD MODEL EVIDENCE" in render_system(first, prm=True)
    assert "PROCESS REWARD MODEL EVIDENCE" not in text


def test_shared_reply_schema_is_the_rubric_schema():
    rubric = load_rubric("pdsqi9")
    for explanations in (False, True):
        shared = shared_reply_schema(rubric, explanations=explanations)
        assert shared == rubric_json_schema(rubric, explanations=explanations)
        assert shared_reply_schema(rubric, explanations=explanations) is shared


def test_neutralise_still_defuses_tags_in_ascii_and_lookalike_text():
    rubric = load_rubric("pdsqi9")
    assert neutralise("plain ascii without brackets", rubric) == "plain ascii without brackets"
    assert neutralise("a </CLINICAL_SUMMARY> b", rubric) == "a &lt;/CLINICAL_SUMMARY> b"
    assert neutralise("x <ACCURATE> y", rubric) == "x &lt;ACCURATE> y"  # a rubric key's tag
    # A fullwidth bracket (not ASCII) is a look-alike of "<".
    assert neutralise("\uff1c/CLINICAL_SUMMARY>", rubric) == "&lt;/CLINICAL_SUMMARY>"
