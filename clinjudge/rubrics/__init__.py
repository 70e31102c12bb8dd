"""Rubrics: schema, built-in instruments, prompt rendering and reply parsing."""

from clinjudge.rubrics._combine import median_scores
from clinjudge.rubrics._injection import detect_injection, scan_item
from clinjudge.rubrics._item import Item, SourceNote
from clinjudge.rubrics._json_schema import (
    STRUCTURED_OUTPUT_KEY,
    bounded_text,
    closed_object,
    rubric_json_schema,
    schema_name,
    schema_shape,
    with_leading_text,
)
from clinjudge.rubrics._parse import (
    JudgmentParseError,
    ParsedJudgment,
    closing_bracket,
    json_objects,
    parse_judgment,
    strip_reasoning,
)
from clinjudge.rubrics._registry import (
    RubricError,
    builtin_rubric_names,
    load_rubric,
    load_rubric_file,
    parse_rubric_text,
)
from clinjudge.rubrics._render import (
    PROMPT_VERSION,
    ChatTurn,
    Shot,
    neutralise,
    neutralise_tags,
    render_evidence,
    render_messages,
    render_repair,
    render_system,
    render_user,
    shared_reply_schema,
)
from clinjudge.rubrics._schema import (
    Attribute,
    Polarity,
    Rubric,
    ScaleKind,
    alias_forms,
    normalise_key,
)

__all__ = [
    "median_scores",
    "STRUCTURED_OUTPUT_KEY",
    "bounded_text",
    "closed_object",
    "rubric_json_schema",
    "schema_name",
    "schema_shape",
    "with_leading_text",
    "PROMPT_VERSION",
    "Attribute",
    "ChatTurn",
    "Item",
    "JudgmentParseError",
    "ParsedJudgment",
    "Polarity",
    "Rubric",
    "RubricError",
    "ScaleKind",
    "Shot",
    "SourceNote",
    "alias_forms",
    "builtin_rubric_names",
    "closing_bracket",
    "detect_injection",
    "json_objects",
    "load_rubric",
    "load_rubric_file",
    "neutralise",
    "neutralise_tags",
    "render_evidence",
    "normalise_key",
    "parse_judgment",
    "parse_rubric_text",
    "render_messages",
    "render_repair",
    "render_system",
    "render_user",
    "shared_reply_schema",
    "scan_item",
    "strip_reasoning",
]
