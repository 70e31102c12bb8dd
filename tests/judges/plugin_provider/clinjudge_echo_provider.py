"""A third-party provider as an installed package would ship it: one module, found by
clinjudge through the ``clinjudge.providers`` entry point of this folder's ``.dist-info``.

``echo/<name>`` models answer every request with each rubric attribute at the top of its scale.
The provider is written in the plain form: one ``generate`` method, no AutoGen client.
"""

from __future__ import annotations

import json
from typing import Any

from clinjudge.judges.clients import Completion, Generation, Provider


class EchoProvider(Provider):
    """The plugin: its name comes from the entry point (``echo``)."""

    async def generate(self, call: Generation) -> Completion:
        """The best score of every attribute (None where a gate asks for it)."""
        attributes = call.rubric.attributes
        values: dict[str, Any] = {a.key: a.max for a in attributes}
        for attribute in attributes:
            gate = attribute.gate
            if gate is not None and values[gate.attribute] == gate.null_when:
                values[attribute.key] = None
        values["rationale"] = "echo provider"
        return Completion(json.dumps(values), prompt_tokens=10, completion_tokens=5)
