"""One JSON Schema per rubric: the single source of the reply contract.

The schema drives three things: the prompt's OUTPUT FORMAT text, the parser's validation of every
value, and the structured-output request a client sends (``response_format`` ``json_schema``,
Ollama ``format``, constrained decoding of local models). It is written for OpenAI's strict mode,
the strictest consumer: every property required, ``additionalProperties: false`` on every object,
nullable values as ``"type": [..., "null"]``, no ``oneOf``/``if``/``$ref``. Gates (``synthesized``
is null exactly when ``abstraction`` is 0) cannot be said in strict mode, so the schema allows null
wherever a gate may ask for it and the parser checks the gate itself.
"""

from __future__ import annotations

import json
import re
from typing import Any

from clinjudge.rubrics._schema import Attribute, Rubric, ScaleKind

RATIONALE_MAX_LENGTH = 1200
"""Longest overall rationale a reply may carry (characters); bounds cost and truncation."""
EXPLANATION_MAX_LENGTH = 600
"""Longest per-attribute explanation a reply may carry (characters)."""
RATIONALE_KEY = "rationale"
"""The key of the overall rationale in replies without per-attribute explanations."""
STRUCTURED_OUTPUT_KEY = "json_schema"
"""Key of ``extra_create_args`` that carries a schema to our clients (never sent as is)."""

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


def scale_schema(scale: ScaleKind, low: int, high: int, nullable: bool) -> dict[str, Any]:
    """The schema of a value on a scale: an integer enum, with null where N/A is allowed.

    Args:
        scale: Likert, binary or proportion.
        low: Lowest valid value.
        high: Highest valid value.
        nullable: Whether null (not applicable) is a valid answer.
    """
    if scale is ScaleKind.proportion:
        # Proportions are computed (DocLens), never asked; described for completeness.
        kind: Any = ["number", "null"] if nullable else "number"
        return {"type": kind, "minimum": low, "maximum": high}
    allowed: list[int | None] = list(range(low, high + 1))
    if nullable:
        return {"type": ["integer", "null"], "enum": [*allowed, None]}
    return {"type": "integer", "enum": allowed}


def value_schema(attribute: Attribute) -> dict[str, Any]:
    """The schema of one attribute's value (see :func:`scale_schema`), described by its name.

    Args:
        attribute: The rubric attribute.
    """
    schema = scale_schema(attribute.scale, attribute.min, attribute.max, attribute.nullable)
    schema["description"] = attribute.name
    return schema


def bounded_text(max_length: int, description: str) -> dict[str, Any]:
    """A string property with a length bound.

    Args:
        max_length: Most characters allowed.
        description: What the text is for, shown to the model through the schema.
    """
    return {"type": "string", "maxLength": max_length, "description": description}


def closed_object(properties: dict[str, Any]) -> dict[str, Any]:
    """An object schema in strict form: every property required, nothing else allowed.

    Args:
        properties: Property schemas, in the order the model should write them.
    """
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def rubric_json_schema(
    rubric: Rubric,
    *,
    explanations: bool = False,
    rationale_max_length: int = RATIONALE_MAX_LENGTH,
    explanation_max_length: int = EXPLANATION_MAX_LENGTH,
) -> dict[str, Any]:
    """The JSON Schema of a judge's reply to a rubric.

    Without explanations every attribute key holds its score and one more key, ``rationale``,
    holds a short overall rationale; with explanations every key holds
    ``{"explanation": str, "score": value}``, explanation first.

    Args:
        rubric: The rubric.
        explanations: Ask for an explanation with every score.
        rationale_max_length: Bound on the overall rationale (characters).
        explanation_max_length: Bound on each per-attribute explanation (characters).
    """
    properties: dict[str, Any] = {}
    for attribute in rubric.attributes:
        value = value_schema(attribute)
        if explanations:
            properties[attribute.key] = closed_object(
                {
                    "explanation": bounded_text(
                        explanation_max_length,
                        "The evidence for the score, in one or two sentences.",
                    ),
                    "score": value,
                }
            )
        else:
            properties[attribute.key] = value
    if not explanations:
        properties[RATIONALE_KEY] = bounded_text(
            rationale_max_length,
            "The main reasons for the lowest scores, in at most three sentences.",
        )
    schema = closed_object(properties)
    schema["title"] = schema_name(rubric.name)
    return schema


def schema_name(text: str) -> str:
    """A schema name the OpenAI API accepts (letters, digits, ``_`` and ``-``; 64 at most).

    Args:
        text: Any label, e.g. a rubric name (``pdsqi9``) or a stage (``doclens_claims``).
    """
    return (_NAME_CHARS.sub("_", text).strip("_") or "reply")[:64]


def allowed_values(schema: dict[str, Any]) -> list[int | None] | None:
    """The enum of a value schema, or None when it is not an enum (a proportion).

    Args:
        schema: A value schema from :func:`value_schema`.
    """
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) else None


def score_schemas(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each attribute key's value schema, from a rubric's reply schema (either shape).

    Args:
        schema: A schema from :func:`rubric_json_schema`.
    """
    scores: dict[str, dict[str, Any]] = {}
    for key, prop in schema["properties"].items():
        if key == RATIONALE_KEY and prop.get("type") == "string":
            continue
        if prop.get("type") == "object":
            prop = prop["properties"]["score"]
        scores[key] = prop
    return scores


def with_leading_text(
    schema: dict[str, Any], key: str, max_length: int, description: str
) -> dict[str, Any]:
    """A copy of an object schema with one bounded text property put first.

    Reasoning written before the scores is what a model conditions the scores on, so a
    decision schema asks for it first (``reasoning`` of the magentic chair).

    Args:
        schema: An object schema from :func:`closed_object` (or :func:`rubric_json_schema`).
        key: The new property's key.
        max_length: Most characters it may hold.
        description: What the text is for.
    """
    properties = {key: bounded_text(max_length, description)}
    properties.update((k, v) for k, v in schema["properties"].items() if k != key)
    extended = closed_object(properties)
    if "title" in schema:
        extended["title"] = schema["title"]
    return extended


def _value_shape(schema: dict[str, Any]) -> str:
    types = schema.get("type")
    nullable = isinstance(types, list) and "null" in types
    enum = [v for v in schema.get("enum", []) if v is not None]
    if enum:
        numbers = sorted(v for v in enum if isinstance(v, int))
        if sorted(enum) == [0, 1] or len(enum) == 1:
            text = " or ".join(json.dumps(v) for v in sorted(enum, reverse=True))
        elif "description" in schema:
            text = f"<{schema['description']}>"
            text = f'"{text}"' if isinstance(enum[0], str) else text
        elif numbers and numbers == list(range(numbers[0], numbers[-1] + 1)):
            text = f"<integer {numbers[0]}-{numbers[-1]}>"
        else:
            text = "<one of " + ", ".join(json.dumps(v) for v in enum) + ">"
    elif "description" in schema:
        text = f"<{schema['description']}>"
    else:
        kind = types if isinstance(types, str) else next(t for t in types or [] if t != "null")
        text = f"<{kind}>"
    return f"{text} or null" if nullable else text


def schema_shape(schema: dict[str, Any]) -> str:
    """A one-line JSON template of a schema, for the prompt's OUTPUT FORMAT text.

    Strings show their description as a placeholder, scales their allowed values, arrays one
    item and an ellipsis: ``{"claims": ["<one atomic claim>", ...]}``.

    Args:
        schema: A schema built with :func:`closed_object`, :func:`bounded_text` and friends.
    """
    kind = schema.get("type")
    if kind == "object":
        inner = ", ".join(f'"{k}": {schema_shape(v)}' for k, v in schema["properties"].items())
        return "{" + inner + "}"
    if kind == "array":
        return f"[{schema_shape(schema['items'])}, ...]"
    if kind == "string" and "enum" not in schema:
        return f'"<{schema.get("description", "text").rstrip(".")}>"'
    return _value_shape(schema)
