"""What one model call asks for, passed explicitly from a workflow to the model.

A workflow (or the runner's call function, or the magentic workflow's agents' client) builds a
:class:`CallConfig` and hands it to :meth:`JudgeModel.generate`; batch request lines
are built from the same object (``request_line``), so a reply schema or a token cap reaches
every request the same way. Nothing rides on the context.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clinjudge.judges.clients._structured import ReplySchema


@dataclass(frozen=True, slots=True)
class CallConfig:
    """The settings of one model call on top of the model's own (``ModelSettings``).

    Args:
        schema: The JSON Schema the reply must follow (the endpoint and
            ``structured_output`` decide how it is asked for); None asks for none.
        max_tokens: Cap on generated tokens instead of the model's ``max_tokens`` (a repair
            of a reply cut at the limit); None keeps the model's own.
        variation: Tells repeated samples apart (the simulated judge scores by it; it keys
            the response cache).
        temperature: Sampling temperature instead of the model's; None keeps the model's.
        seed: Sampling seed instead of the model's; None keeps the model's.
        stop: Stop sequences; None sends none.
        json_output: True asks for a JSON object (JSON mode); the settings' ``json_mode``
            applies otherwise.
        tools: Tools offered to the model (agents in group chats), each
            ``{"name", "description", "parameters"}``.
        extra: Further request arguments, sent as they are; with ``temperature``, ``seed``
            and ``stop`` they are the parts of the response-cache key beyond the model's
            settings, the messages, the tools, the JSON mode and the variation.
    """

    schema: ReplySchema | None = None
    max_tokens: int | None = None
    variation: str = ""
    temperature: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] | None = None
    json_output: Any = None
    tools: Sequence[Any] = ()
    extra: Mapping[str, Any] | None = None

    def request_args(self) -> dict[str, Any]:
        """The request arguments this call adds to the model's settings (a new dict; the
        schema is not among them: each client sends it in its endpoint's own form)."""
        args = dict(self.extra) if self.extra else {}
        if self.temperature is not None:
            args["temperature"] = self.temperature
        if self.seed is not None:
            args["seed"] = self.seed
        if self.stop is not None:
            args["stop"] = list(self.stop)
        return args

    def varied(self, variation: str) -> CallConfig:
        """This call for one sample: the same settings under ``variation``.

        Args:
            variation: The sample's variation (the runner's, per agent).
        """
        if variation == self.variation:
            return self
        return CallConfig(
            self.schema,
            self.max_tokens,
            variation,
            self.temperature,
            self.seed,
            self.stop,
            self.json_output,
            self.tools,
            self.extra,
        )

    def capped(self, max_tokens: int | None) -> CallConfig:
        """This call with another cap on generated tokens (None: the model's own).

        Args:
            max_tokens: The new cap.
        """
        if max_tokens == self.max_tokens:
            return self
        return CallConfig(
            self.schema,
            max_tokens,
            self.variation,
            self.temperature,
            self.seed,
            self.stop,
            self.json_output,
            self.tools,
            self.extra,
        )


PLAIN_CALL = CallConfig()
"""A call with nothing beyond the model's settings (no schema, the model's own cap)."""
