"""What every PRM backend shares: label ids, encoding, batching and the scored results.

A backend implements one method, ``_forward``: P(correct) at the score positions of a batch of
encoded chains. Everything else (rendering, truncation, batching by a token budget, aggregates,
flags, errors per candidate) lives here, so the in-process and the served backends score the
same token ids in the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from clinjudge.errors import ClinJudgeError
from clinjudge.prm_bridge._aggregate import DEFAULT_THRESHOLD, all_aggregates
from clinjudge.prm_bridge._presets import PRMFormat
from clinjudge.prm_bridge._render import Encoded, PRMInputError, encode
from clinjudge.prm_bridge._segment import Chain

DEFAULT_BATCH_TOKENS = 16384


class PRMModelError(ClinJudgeError, RuntimeError):
    """The model or tokenizer cannot be loaded, or does not follow the format."""


class StepScore(BaseModel):
    """One scored step.

    Args:
        index: 1-based position in the chain.
        kind: Step kind.
        text: Step text.
        score: P(correct); None when the step was cut by truncation.
        flagged: Score below the threshold.
        label: Gold label, when the input had one.
        error_type: Gold error type, when the input had one.
    """

    index: int
    kind: str
    text: str
    score: float | None
    flagged: bool | None
    label: int | None = None
    error_type: str | None = None


class ChainScore(BaseModel):
    """One scored candidate.

    Args:
        id: Input id.
        candidate: Candidate name.
        steps: Step scores.
        aggregates: Every candidate-level aggregate of the step scores.
        n_tokens: Tokens in the model input.
        truncated: Whether anything was cut to fit.
        warnings: What was changed to make the input fit or safe.
        error: Why the candidate could not be scored (then ``steps`` have no scores).
        latency_s: This candidate's share of its batch's forward time.
    """

    id: str
    candidate: str
    steps: list[StepScore]
    aggregates: dict[str, float | None] = Field(default_factory=dict)
    n_tokens: int = 0
    truncated: bool = False
    warnings: list[str] = Field(default_factory=list)
    error: str | None = None
    latency_s: float = 0.0

    @property
    def flagged_steps(self) -> list[StepScore]:
        """Steps scored below the threshold."""
        return [s for s in self.steps if s.flagged]


def special_token_check(fmt: PRMFormat, tokenizer: Any, model: str) -> None:
    """Every special string of the format must be one token of this tokenizer."""
    for token in fmt.special_tokens:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise PRMModelError(
                f"{model}: the tokenizer does not hold {token!r} as one token "
                f"({len(ids)} tokens); this checkpoint does not follow preset {fmt.name!r}"
            )


def _label_id(fmt: PRMFormat, tokenizer: Any, text: str, explicit: int | None, model: str):
    if explicit is not None:
        return explicit
    if fmt.label_lookup == "token":
        token_id = tokenizer.convert_tokens_to_ids(text)
        unknown = token_id is None or (
            token_id == tokenizer.unk_token_id and text != tokenizer.unk_token
        )
        if unknown:
            raise PRMModelError(f"{model}: label token {text!r} is not in the vocabulary")
        return int(token_id)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise PRMModelError(f"{model}: label {text!r} encodes to no token")
    return int(ids[0] if fmt.label_lookup == "first" else ids[-1])


def label_ids(fmt: PRMFormat, tokenizer: Any, model: str) -> tuple[int, int]:
    """Token ids of the correct and the erroneous label."""
    plus = _label_id(fmt, tokenizer, fmt.plus, fmt.plus_id, model)
    minus = _label_id(fmt, tokenizer, fmt.minus, fmt.minus_id, model)
    if plus == minus:
        raise PRMModelError(f"{model}: labels {fmt.plus!r} and {fmt.minus!r} share token {plus}")
    return plus, minus


def token_batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Indices grouped so that rows x longest row stays within the budget (longest first)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        widest = lengths[current[0]] if current else lengths[index]
        if current and (len(current) + 1) * widest > batch_tokens:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def _steps(chain: Chain, scores: Sequence[float | None], threshold: float) -> list[StepScore]:
    return [
        StepScore(
            index=n,
            kind=step.kind,
            text=step.text,
            score=score,
            flagged=(None if score is None else score < threshold),
            label=step.label,
            error_type=step.error_type,
        )
        for n, (step, score) in enumerate(zip(chain.steps, scores, strict=True), start=1)
    ]


@dataclass
class _Ticket:
    """One caller's encoded chains waiting for a forward pass, and what came back."""

    encoded: list[Encoded]
    probs: list[list[float]] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    done: bool = False
    failure: Exception | None = None


class PRMScorer:
    """Base of the PRM backends: encode, batch, forward, collect.

    Args:
        fmt: The PRM format.
        tokenizer: A fast Hugging Face tokenizer.
        model_name: Name recorded with the results.
        max_length: Token limit when the format sets none.
        batch_tokens: Padded tokens per forward pass.
    """

    def __init__(
        self,
        fmt: PRMFormat,
        tokenizer: Any,
        model_name: str,
        *,
        max_length: int | None = None,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ):
        if not getattr(tokenizer, "is_fast", False):
            raise PRMModelError(f"{model_name}: a fast (Rust) tokenizer is needed for offsets")
        special_token_check(fmt, tokenizer, model_name)
        self.format = fmt
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_length = max_length
        self.batch_tokens = batch_tokens
        self.plus_id, self.minus_id = label_ids(fmt, tokenizer, model_name)
        self._lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()
        self._waiting: list[_Ticket] = []

    def encode(self, chain: Chain) -> Encoded:
        """Token ids and score positions of one chain."""
        return encode(self.format, self.tokenizer, chain, self.max_length)

    def _forward(self, batch: Sequence[Encoded]) -> list[list[float]]:
        """P(correct) at every non-None position of every chain of the batch."""
        raise NotImplementedError

    def score(
        self, chains: Sequence[Chain], threshold: float = DEFAULT_THRESHOLD
    ) -> list[ChainScore]:
        """Score chains: one forward pass per chain, batched; results in input order.

        A chain that cannot be encoded gets an ``error`` and no scores; the others go on.
        Safe to call from several threads: chains waiting while a forward pass runs are
        scored together in the next batches (whoever runs next scores everything waiting).

        Args:
            chains: The candidates.
            threshold: Steps scoring below it are flagged.
        """
        encoded: list[Encoded | None] = []
        errors: list[str | None] = []
        for chain in chains:
            try:
                with self._tokenizer_lock:  # the Rust tokenizer is not re-entrant
                    encoded.append(self.encode(chain))
                errors.append(None)
            except PRMInputError as exc:
                encoded.append(None)
                errors.append(str(exc))
        ticket = _Ticket([e for e in encoded if e is not None])
        with self._queue_lock:
            self._waiting.append(ticket)
        with self._lock:
            if not ticket.done:
                self._run_waiting()
        if ticket.failure is not None:
            raise ticket.failure
        probs = iter(ticket.probs)
        latency = iter(ticket.latency)
        return [
            self._result(
                chain,
                enc,
                error,
                None if enc is None else next(probs),
                0.0 if enc is None else next(latency),
                threshold,
            )  # fmt: skip
            for chain, enc, error in zip(chains, encoded, errors, strict=True)
        ]

    def _run_waiting(self) -> None:
        """Score every waiting ticket in shared batches (the forward lock is held)."""
        with self._queue_lock:
            tickets, self._waiting = self._waiting, []
        rows = [(t, i) for t in tickets for i in range(len(t.encoded))]
        for ticket in tickets:
            ticket.probs = [[] for _ in ticket.encoded]
            ticket.latency = [0.0 for _ in ticket.encoded]
        lengths = [len(t.encoded[i].input_ids) for t, i in rows]
        try:
            for group in token_batches(lengths, self.batch_tokens):
                started = time.perf_counter()
                results = self._forward([rows[g][0].encoded[rows[g][1]] for g in group])
                elapsed = time.perf_counter() - started
                tokens = sum(lengths[g] for g in group) or 1
                for g, result in zip(group, results, strict=True):
                    ticket, index = rows[g]
                    ticket.probs[index] = result
                    ticket.latency[index] = elapsed * lengths[g] / tokens
        except Exception as exc:  # every caller in this round learns of the failure
            for ticket in tickets:
                ticket.failure = exc
        finally:
            for ticket in tickets:
                ticket.done = True

    def _result(
        self,
        chain: Chain,
        enc: Encoded | None,
        error: str | None,
        probs: list[float] | None,
        latency: float,
        threshold: float,
    ) -> ChainScore:
        if enc is None or probs is None:
            steps = _steps(chain, [None] * len(chain.steps), threshold)
            return ChainScore(id=chain.id, candidate=chain.candidate, steps=steps, error=error)
        values = iter(probs)
        scores = [None if p is None else next(values) for p in enc.positions]
        return ChainScore(
            id=chain.id,
            candidate=chain.candidate,
            steps=_steps(chain, scores, threshold),
            aggregates=all_aggregates(scores, threshold),
            n_tokens=len(enc.input_ids),
            truncated=enc.truncated,
            warnings=enc.warnings,
            latency_s=latency,
        )
