"""Decoding constrained to a JSON Schema for the in-process model (``hf/``), with llguidance.

llguidance compiles a schema into a grammar in milliseconds and computes a step's token mask in
tens of microseconds (docs/models.md compares it with xgrammar, outlines-core and
lm-format-enforcer). Replies are written compactly (``", "`` and ``": "`` separators, no free
whitespace), so a small model cannot pad a reply with blank lines until it runs out of tokens.

Fitting the cap: within ``reserve`` tokens of its cap (about the tokens of a minimal complete
reply), each step follows the reply's grammar on a copy to find its shortest completion; once
only that many tokens (and a small margin) are left, the reply is steered that way: the keys the
grammar forces, the open string and brackets closed, the model choosing only among values. A long
rationale is cut short, but the JSON completes within ``max_tokens``.

Imported only when an ``hf/`` model runs: it needs llguidance, numpy and torch (the ``prm`` extra).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import llguidance
import numpy as np
import torch

JSON_OPTIONS: dict[str, Any] = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}
"""How replies are laid out: one fixed separator each, no free whitespace."""

GENERIC_OBJECT: dict[str, Any] = {"type": "object"}
"""The schema of JSON mode (``json_output=True`` without a schema): any JSON object."""

RESERVE_MARGIN = 8
"""Tokens added to a minimal reply's length: the string being written and its closing quote."""

_UNBOUNDED_RESERVE = 32
"""Reserve for schemas whose minimal reply cannot be worked out (``$ref``, JSON mode)."""

STEER_MARGIN = 2
"""Tokens kept beyond the shortest completion found, for values the model writes longer."""

_PROBE_LIMIT = 4096


class ConstraintError(ValueError):
    """A reply schema that the constraint library cannot compile."""


def compile_grammar(schema: dict[str, Any] | None, tokenizer: llguidance.LLTokenizer) -> str:
    """An llguidance grammar for replies following ``schema`` (any JSON object when None).

    Args:
        schema: The JSON Schema of the reply.
        tokenizer: The model's tokenizer, as llguidance sees it.

    Raises:
        ConstraintError: llguidance does not support the schema.
    """
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            # llguidance's stubs name a TypedDict; ours is the same plain mapping.
            schema if schema is not None else GENERIC_OBJECT,
            defaults=JSON_OPTIONS,  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise ConstraintError(f"reply schema not usable for constrained decoding: {exc}") from exc
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
    if is_error:
        raise ConstraintError(
            f"reply schema not usable for constrained decoding: {'; '.join(messages)}"[:500]
        )
    return grammar


@dataclass(frozen=True)
class GateRule:
    """A rubric gate: ``gated`` is null exactly when ``gate`` equals ``null_when``.

    Args:
        gated: Key of the gated attribute (``synthesized``).
        gate: Key of the attribute that decides (``abstraction``).
        null_when: The gate's value that makes ``gated`` null.
    """

    gated: str
    gate: str
    null_when: int


def _value_slot(prop: dict[str, Any]) -> dict[str, Any]:
    """The schema of an attribute's value: the property itself, or its ``score`` when the
    property is ``{"explanation", "score"}``."""
    inner = prop.get("properties")
    if prop.get("type") == "object" and isinstance(inner, dict) and "score" in inner:
        return inner["score"]
    return prop


def _restricted(slot: dict[str, Any], keep: Any) -> dict[str, Any] | None:
    """A value schema limited to the enum values ``keep`` accepts (None: nothing left)."""
    values = [v for v in slot.get("enum", []) if keep(v)]
    if not values:
        return None
    restricted = {k: v for k, v in slot.items() if k not in ("enum", "type")}
    restricted["enum"] = values
    kinds = sorted({"null" if v is None else "integer" for v in values})
    restricted["type"] = kinds[0] if len(kinds) == 1 else kinds
    return restricted


def _with_slots(schema: dict[str, Any], slots: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A copy of an object schema whose attributes' value schemas are replaced."""
    copy = json.loads(json.dumps(schema))
    for key, slot in slots.items():
        prop = copy["properties"][key]
        target = _value_slot(prop)
        target.clear()
        target.update(slot)
    return copy


def apply_gates(schema: dict[str, Any], gates: Sequence[GateRule]) -> dict[str, Any]:
    """The schema with the rubric's gates written in, for local decoding.

    A strict-mode rubric schema cannot say "``synthesized`` is null exactly when
    ``abstraction`` is 0" (no ``anyOf`` there), so it allows null wherever a gate may ask for
    it and the parser checks the gate. Locally nothing stops us: each gate becomes an
    ``anyOf`` of the object with the gate closed (the gated value null) and open (a score), so
    a constrained reply never breaks a gate. Schemas without both keys are returned as they are.

    Args:
        schema: An object schema (a rubric's reply schema, the chair's decision schema...).
        gates: The rubric's gates.
    """
    for rule in gates:
        properties = schema.get("properties")
        if schema.get("type") != "object" or not isinstance(properties, dict):
            return schema
        if rule.gated not in properties or rule.gate not in properties:
            continue
        gated = _value_slot(properties[rule.gated])
        gate = _value_slot(properties[rule.gate])
        closed_gate = _restricted(gate, lambda v, r=rule: v == r.null_when)
        open_gate = _restricted(gate, lambda v, r=rule: v is not None and v != r.null_when)
        scored = _restricted(gated, lambda v: v is not None)
        if closed_gate is None or open_gate is None or scored is None:
            continue  # not an enum of the expected shape: leave the check to the parser
        variants = [
            _with_slots(schema, {rule.gate: closed_gate, rule.gated: {"type": "null"}}),
            _with_slots(schema, {rule.gate: open_gate, rule.gated: scored}),
        ]
        schema = {"anyOf": variants}
    return schema


class _Unbounded(Exception):
    """The schema's minimal reply cannot be worked out."""


def _minimal(schema: Any) -> str:
    """The longest of the shortest replies a schema allows (compact JSON): what is left to write
    in the worst case once the reply has to close."""
    if not isinstance(schema, dict) or "$ref" in schema or "not" in schema:
        raise _Unbounded
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return max((json.dumps(v) for v in schema["enum"]), key=len, default="null")
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return max((_minimal(s) for s in schema[key]), key=len, default="null")
    kinds = schema.get("type", "object")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if "null" in kinds and len(kinds) > 1:
        kinds.remove("null")  # the other type is longer; null costs one token
    kind = kinds[0] if kinds else "object"
    if kind == "object":
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        parts = [f"{json.dumps(k)}: {_minimal(properties.get(k, {}))}" for k in required]
        return "{" + ", ".join(parts) + "}"
    if kind == "array":
        items = [_minimal(schema.get("items", {}))] * int(schema.get("minItems", 0))
        return "[" + ", ".join(items) + "]"
    if kind == "string":
        return json.dumps("x" * int(schema.get("minLength", 0)))
    if kind == "boolean":
        return "false"
    if kind in ("integer", "number"):
        return json.dumps(schema.get("minimum", 0))
    return "null"


def closing_reserve(schema: dict[str, Any] | None, tokenizer: Any) -> int:
    """Tokens to keep for closing a reply: a minimal complete reply's tokens plus a margin.

    Args:
        schema: The reply schema (None: JSON mode, any object).
        tokenizer: The model's Hugging Face tokenizer.
    """
    if schema is None:
        return _UNBOUNDED_RESERVE
    try:
        text = _minimal(schema)
    except _Unbounded:
        return _UNBOUNDED_RESERVE
    return len(tokenizer(text, add_special_tokens=False)["input_ids"]) + RESERVE_MARGIN


@dataclass
class Closers:
    """Token masks that end a reply fastest, in order of preference: an empty string (``""``), a
    lone quote (opens a string at a value, closes one inside it), a quote with closing brackets
    (``"}``: ends a string and its object), closing brackets alone (``}``, ``]}``).

    A lone quote comes before ``"}`` because at the start of a string value ``"}`` would open the
    string and write ``}`` into it.

    Args:
        groups: Bitmasks (llguidance layout), most preferred first.
    """

    groups: list[np.ndarray]

    @classmethod
    def of(cls, tokenizer: llguidance.LLTokenizer, vocab_size: int) -> Closers:
        """Masks for a tokenizer.

        Args:
            tokenizer: The model's tokenizer, as llguidance sees it.
            vocab_size: Width of the model's logits.
        """
        words = (vocab_size + 31) // 32
        groups = [np.zeros(words, dtype=np.uint32) for _ in range(4)]
        for token in range(min(tokenizer.vocab_size, vocab_size)):
            if tokenizer.is_special_token(token):
                continue
            text = tokenizer.decode_bytes([token])
            if not text or text.strip(b'"}]'):
                continue
            if text == b'""':
                group = 0
            elif text == b'"':
                group = 1
            elif text.startswith(b'"') and text.count(b'"') == 1:
                group = 2
            elif b'"' not in text:
                group = 3
            else:
                continue
            groups[group][token // 32] |= np.uint32(1 << (token % 32))
        return cls([g.view(np.int32) for g in groups])


@dataclass
class RowState:
    """One reply being generated in a batch.

    Args:
        cap: Most tokens the reply may hold (``max_tokens``), its end token not counted.
        matcher: The grammar's state; None for a free-text reply.
        reserve: Tokens before the cap from which the constraint checks, at each step, whether
            the shortest completion still fits (see :func:`closing_reserve`).
    """

    cap: int
    matcher: llguidance.LLMatcher | None = None
    reserve: int = 0
    generated: list[int] = field(default_factory=list)
    done: bool = False
    finish_reason: str = "stop"
    steered: bool = False
    """The reply was closed early to fit its cap."""
    error: str | None = None


def first_token(mask: np.ndarray) -> int | None:
    """The lowest token id a bitmask allows, or None.

    Args:
        mask: A bitmask in llguidance's layout (int32 words, bit ``i % 32`` of word ``i // 32``).
    """
    words = np.flatnonzero(mask)
    if not words.size:
        return None
    word = int(words[0])
    bits = int(mask[word]) & 0xFFFFFFFF
    return word * 32 + (bits & -bits).bit_length() - 1


def tokens_to_close(matcher: llguidance.LLMatcher, closers: Closers, scratch: np.ndarray) -> int:
    """Tokens of the shortest way to a complete reply from the matcher's state, found by
    following it on a copy: forced tokens, then closing tokens, else the first allowed token.

    Args:
        matcher: The reply's grammar state (left unchanged).
        closers: The tokenizer's closing tokens.
        scratch: A bitmask row to compute masks into.
    """
    probe = matcher.deep_copy()
    count = 0
    while not probe.is_accepting() and count < _PROBE_LIMIT:
        forced = probe.compute_ff_tokens()
        if forced:
            if not probe.consume_tokens(forced):
                return _PROBE_LIMIT
            count += len(forced)
            continue
        probe.unsafe_compute_mask_ptr(scratch.ctypes.data, scratch.nbytes)
        token = next(
            (t for g in closers.groups if (t := first_token(scratch & g)) is not None),
            first_token(scratch),
        )
        if token is None or not probe.consume_token(token):
            return _PROBE_LIMIT
        count += 1
    return count


def one_hot(token: int, words: int) -> np.ndarray:
    """A bitmask (llguidance layout) allowing one token.

    Args:
        token: The token id.
        words: 32-bit words in the mask.
    """
    mask = np.zeros(words, dtype=np.uint32)
    mask[token // 32] = np.uint32(1 << (token % 32))
    return mask.view(np.int32)


class ConstrainedBatch:
    """A transformers logits processor that keeps each row of a batch to its own grammar and cap.

    Rows end with an end token: when their grammar is complete (then the only token it allows),
    or when they reach their cap (``finish_reason`` ``length``; a constrained row reaches it only
    if its reserve was too small).

    Args:
        rows: One state per row of the batch, in order.
        vocab_size: Width of the logits.
        closers: The tokenizer's closing tokens.
        eos_id: The end token forced where a row must stop.
        eos_ids: Every token that ends a reply.
        on_first_step: Called once the prompts have been read, before the first token is chosen
            (the engine lowers the CPU threads for decoding there).
    """

    def __init__(
        self,
        rows: Sequence[RowState],
        vocab_size: int,
        closers: Closers,
        eos_id: int,
        eos_ids: Sequence[int],
        on_first_step: Callable[[], None] | None = None,
    ):
        self.rows = list(rows)
        self._closers = closers
        self._eos_ids = set(eos_ids)
        words = (vocab_size + 31) // 32
        self._masks = np.full((len(self.rows), words), -1, dtype=np.int32)
        self._eos_only = one_hot(eos_id, words)
        self._scratch = np.zeros(words, dtype=np.int32)
        self._shifts: torch.Tensor | None = None
        self._started = False
        self.first_step_at: float | None = None
        """``time.perf_counter()`` at the first step (the prompt has been read)."""
        self.steps = 0
        self._on_first_step = on_first_step

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        last = input_ids[:, -1].tolist() if self._started else [None] * len(self.rows)
        if not self._started:
            self.first_step_at = time.perf_counter()
            if self._on_first_step is not None:
                self._on_first_step()
        self._started = True
        self.steps += 1
        masked = False
        for index, (row, token) in enumerate(zip(self.rows, last, strict=True)):
            mask = self._masks[index]
            if not row.done and token is not None:
                self.take(row, token)
            if row.done:
                mask[:] = -1  # transformers pads finished rows whatever their scores
                continue
            masked |= self.fill(row, mask)
        return self._apply(scores) if masked else scores

    def take(self, row: RowState, token: int) -> None:
        """Follow a row with the token sampled for it at the previous step (the paged engine
        calls this per request, the padded batch per row).

        Args:
            row: The reply's state.
            token: The token sampled for it.
        """
        if token in self._eos_ids:
            row.done = True
            return
        row.generated.append(token)
        if row.matcher is not None and not row.matcher.consume_token(token):
            # Never expected (the mask allowed it); stop the row rather than emit invalid JSON.
            row.error = row.matcher.get_error() or "the grammar refused a token"
            row.done = True

    def fill(self, row: RowState, mask: np.ndarray) -> bool:
        """Write a row's allowed tokens into ``mask``; False when every token is allowed.

        Args:
            row: The reply's state.
            mask: Its bitmask row (llguidance layout), written in place.
        """
        matcher = row.matcher
        if len(row.generated) >= row.cap:
            row.finish_reason = "stop" if matcher and matcher.is_accepting() else "length"
            mask[:] = self._eos_only
            return True
        if matcher is None:
            mask[:] = -1
            return False
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        if not mask.any():  # an error state allows nothing: end the row, reported as an error
            row.error = matcher.get_error() or "the grammar allows no token"
            mask[:] = self._eos_only
        elif len(row.generated) >= row.cap - row.reserve and self._must_close(row):
            self._steer(row, mask)
        return True

    def _must_close(self, row: RowState) -> bool:
        """Whether the row has only the tokens left that its shortest completion needs."""
        if row.steered:
            return True
        assert row.matcher is not None
        needed = tokens_to_close(row.matcher, self._closers, self._scratch)
        return len(row.generated) + needed + STEER_MARGIN >= row.cap

    def _steer(self, row: RowState, mask: np.ndarray) -> None:
        """Narrow a row's mask to the fastest way to a complete reply."""
        matcher = row.matcher
        assert matcher is not None
        row.steered = True
        if matcher.is_accepting():
            mask[:] = self._eos_only
            return
        forced = matcher.compute_ff_tokens()
        if forced:  # the grammar fixes what comes next (a key): its canonical tokens
            mask[:] = one_hot(forced[0], mask.shape[0])
            return
        for group in self._closers.groups:
            narrowed = mask & group
            if narrowed.any():
                mask[:] = narrowed
                return
        # Otherwise a choice among values (a score, true or false): the model picks.

    def _apply(self, scores: torch.Tensor) -> torch.Tensor:
        if self._shifts is None or self._shifts.device != scores.device:
            self._shifts = torch.arange(32, dtype=torch.int32, device=scores.device)
        bits = torch.from_numpy(self._masks).to(scores.device)
        allowed = ((bits.unsqueeze(-1) >> self._shifts) & 1).bool().reshape(bits.shape[0], -1)
        return scores.masked_fill(~allowed[:, : scores.shape[-1]], float("-inf"))
