"""Refuse items whose prompt cannot fit the judge model's context window, before any call.

A note far beyond the context would fail at the provider on every sample (after paying for the
attempt with some providers); checking up front turns it into an input error that names the file,
the item and the field. The window comes from litellm's bundled model map (``max_input_tokens``);
models it does not know (local servers) are not checked.
"""

from __future__ import annotations

from clinjudge.judges import ModelSettings, count_message_tokens
from clinjudge.judges.clients import provider_for
from clinjudge.rubrics import Item, Rubric, render_messages


def context_window(settings: ModelSettings) -> int | None:
    """Input tokens the model accepts, when its provider knows (the bundled model map).

    Args:
        settings: The model's settings (``price_as`` names the model behind a deployment).
    """
    return provider_for(settings).context_window(settings)


def oversized_item(
    item: Item, rubric: Rubric, settings: ModelSettings, source: str, limit: int
) -> str | None:
    """The problem of one item whose rendered prompt exceeds ``limit`` tokens, if it does.

    Args:
        item: The item.
        rubric: The rubric (the prompt is rendered with it).
        settings: The judge model's settings (named in the message).
        source: The input file, for messages.
        limit: The model's context window (:func:`context_window`).
    """
    # Cheap bound first: a token is at least one character of text, almost always more.
    size = len(item.summary) + sum(len(n.text) for n in item.notes)
    if size < limit:
        return None
    tokens = count_message_tokens([t.content for t in render_messages(item, rubric)])
    if tokens <= limit:
        return None
    longest = max(range(len(item.notes)), key=lambda i: len(item.notes[i].text), default=None)
    field = "summary"
    if longest is not None and len(item.notes[longest].text) > len(item.summary):
        field = f"notes.{longest}.text"
    return (
        f"{source}: item {item.id!r}: field {field}: the prompt is {tokens} tokens, "
        f"beyond the {limit}-token context window of {settings.model}"
    )
