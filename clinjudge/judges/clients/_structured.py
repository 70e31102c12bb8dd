"""Structured output: how a reply schema travels to a model client and what the client sends.

A workflow asks for a schema by putting a :class:`ReplySchema` in the call's ``CallConfig``
(the AutoGen adapter reads it from ``extra_create_args={"json_schema": {"name", "schema"}}``,
:data:`STRUCTURED_OUTPUT_KEY`). :class:`JudgeModel` picks the mode for each call from
``ModelSettings.structured_output`` and the endpoint's history and hands the schema to its client
under that key; each client translates the key into what its endpoint understands and never
sends the key itself:

* OpenAI, Azure OpenAI and OpenAI-compatible servers (vLLM, SGLang, llama.cpp, ``transformers
  serve``): ``response_format: {"type": "json_schema", "json_schema": {..., "strict": true}}``;
* Ollama's native API through litellm (``ollama/``, ``ollama_chat/``): ``format: <schema>``;
* any other litellm provider: the same ``response_format``, which litellm maps to the provider's
  own structured-output feature (or a tool call) where it has one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from clinjudge._util.identity_memo import IdentityMemo
from clinjudge.judges.clients._settings import StructuredOutput  # noqa: F401 - re-exported
from clinjudge.rubrics import schema_name

OutputMode = Literal["json_schema", "json_object", "off"]
"""What one call actually sent (the ``calls.output_mode`` column)."""


class ReplySchema(BaseModel):
    """A JSON Schema a reply must follow, as carried under :data:`STRUCTURED_OUTPUT_KEY`.

    Args:
        name: Name sent with the schema (letters, digits, ``_`` and ``-``; 64 at most).
        schema: The JSON Schema (an object schema in OpenAI strict form).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    schema_: dict[str, Any] = Field(alias="schema")

    def as_arg(self) -> dict[str, Any]:
        """The value to put under :data:`STRUCTURED_OUTPUT_KEY` in ``extra_create_args``."""
        return {"name": self.name, "schema": self.schema_}


def reply_schema(value: Any) -> ReplySchema | None:
    """A :class:`ReplySchema` from what a caller put under the key (a mapping or one already).

    Args:
        value: ``{"name": ..., "schema": ...}``, a ReplySchema, or None.
    """
    if value is None or isinstance(value, ReplySchema):
        return value
    return ReplySchema.model_validate(
        {"name": schema_name(str(value.get("name") or "reply")), "schema": value["schema"]}
    )


_SHARED: IdentityMemo[ReplySchema] = IdentityMemo()
"""Validated forms of shared schemas, by schema object and name."""


def reply_schema_for(name: str, schema: Mapping[str, Any], *, shared: bool = False) -> ReplySchema:
    """The :class:`ReplySchema` of a reply contract given as a name and a JSON Schema.

    Args:
        name: Schema name (sanitised for the API).
        schema: The JSON Schema of the reply.
        shared: ``schema`` is an object that is never changed and comes back for every sample
            (``shared_reply_schema``'s): it is validated once and its validated form reused.
    """
    if not shared:
        return ReplySchema.model_validate({"name": schema_name(name), "schema": dict(schema)})
    return _SHARED.get(schema, name, lambda: reply_schema_for(name, schema))


def openai_response_format(schema: ReplySchema) -> dict[str, Any]:
    """OpenAI's structured-output ``response_format`` (strict) for a schema.

    Args:
        schema: The reply schema.
    """
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.name, "schema": schema.schema_, "strict": True},
    }


# What endpoints say when they do not take a schema: OpenAI's "Invalid schema for
# response_format", vLLM/SGLang/llama.cpp/TGI's "json_schema ... not supported", litellm's
# "UnsupportedParamsError", Ollama's "invalid format".
_SCHEMA_WORDS = re.compile(r"response_format|json_schema|structured output|\bformat\b", re.I)
_REFUSAL_WORDS = re.compile(
    r"unsupported|not supported|not support|invalid|unknown|unrecognized|not permitted|"
    r"not allowed|extra inputs|cannot|unexpected",
    re.I,
)


def is_schema_rejection(reason: str) -> bool:
    """Whether a failed call's reason says the endpoint refused the schema request (a 400).

    Args:
        reason: ``ProviderFault.reason`` of the failed call.
    """
    status = re.match(r"HTTP (\d{3})", reason)
    code = int(status.group(1)) if status else None
    if code not in (400, 422, None):
        return False
    if code is None and "UnsupportedParams" not in reason:
        return False
    return bool(_SCHEMA_WORDS.search(reason)) and bool(
        _REFUSAL_WORDS.search(reason) or "UnsupportedParams" in reason
    )
