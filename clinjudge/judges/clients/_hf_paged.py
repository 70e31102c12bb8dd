"""The ``paged`` engine of ``hf/`` models: transformers' continuous batching with paged attention.

The ``padded`` engine (:mod:`clinjudge.judges.clients._hf_engine`) decodes a batch as one
``generate`` call over rows padded to the longest prompt. Here the batch's requests go to
transformers' :class:`ContinuousBatchingManager` instead: prompts are laid end to end without
padding, the key/value cache is paged (a request holds pages, not a row of the longest length),
complete pages of a prompt prefix that requests share are computed once (its block sharing), and
a request that ends frees its pages and its place in the batch at once.

The schema constraint is the same llguidance state per request
(:class:`~clinjudge.judges.clients._hf_constraint.ConstrainedBatch`'s ``take``/``fill``). The
manager builds its logits processors from the generation config only and hands a custom one no
request ids; its per-request processor interface
(:class:`ContinuousBatchingLogitsProcessor`) does: ``prepare_tensor_args`` receives the batch's
requests in row order on the host before each forward pass, where each request's grammar follows
the token it just got and writes its mask; ``__call__`` masks the logits on the device from a
buffer that never moves (so it also runs inside a captured CUDA graph). Asynchronous batching is
off: it prepares a step before the previous step's tokens reach the host.

torch, transformers and llguidance are imported here, and this module only for ``engine: paged``.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import ContinuousBatchingConfig, GenerationConfig, LogitsProcessorList
from transformers.generation.continuous_batching.cb_logits_processors import (
    ContinuousBatchingLogitsProcessor,
    ContinuousBatchingLogitsProcessorList,
)

from clinjudge.judges.clients._hf_constraint import Closers, ConstrainedBatch, RowState, one_hot

log = logging.getLogger(__name__)

PAGE_TOKENS = 256
"""Tokens per page of the key/value cache (transformers' default)."""
POLL_S = 0.1
"""How often the waiting thread checks for cancelled requests."""
MIN_MASK_ROWS = 64
"""Rows of the device mask buffer at least (it grows for larger batches)."""
_IDS = itertools.count()


class GrammarMasks(ContinuousBatchingLogitsProcessor):
    """Keeps each request of a continuous batch to its own grammar and cap.

    Args:
        vocab_size: Width of the logits.
        closers: The tokenizer's closing tokens.
        eos_id: The end token forced where a reply must stop.
        eos_ids: Every token that ends a reply.
        device: Where the logits are.
    """

    supported_kwargs: dict[str, type] = {}
    ignored_kwargs: tuple[str, ...] = ()

    def __init__(
        self,
        vocab_size: int,
        closers: Closers,
        eos_id: int,
        eos_ids: Sequence[int],
        device: torch.device,
    ):
        self.rows: dict[str, RowState] = {}
        """The state of each request being decoded, by request id."""
        self.on_first_step: Callable[[], None] | None = None
        """Called (then cleared) when the first reply token is about to be chosen."""
        self._rules = ConstrainedBatch([], vocab_size, closers, eos_id, eos_ids)
        self._words = (vocab_size + 31) // 32
        self._eos_only = one_hot(eos_id, self._words)
        self._device = device
        self._host = np.full((0, self._words), -1, dtype=np.int32)
        self._masks = torch.full((0, self._words), -1, dtype=torch.int32, device=device)
        self._shifts = torch.arange(32, dtype=torch.int32, device=device)
        self._written = 0

    def fill_defaults(self, int32_tensor: torch.Tensor) -> None:
        """Zeros for the manager's argument slots (the masks are found by row position).

        Args:
            int32_tensor: The manager's argument row for this processor.
        """
        int32_tensor.fill_(0)

    def prepare_tensor_args(self, requests_with_new_token: list[Any]) -> torch.Tensor:
        """Advance each request's grammar by its last token and write its mask (on the host,
        before the forward pass).

        Args:
            requests_with_new_token: The manager's ``FutureRequestState`` of each logits row.
        """
        count = len(requests_with_new_token)
        self.reserve(count)
        for index, future in enumerate(requests_with_new_token):
            mask = self._host[index]
            row = self.rows.get(future.state.request_id)
            if row is None:  # a warm-up request, or one cancelled
                mask[:] = -1
                continue
            if self.on_first_step is not None:
                hook, self.on_first_step = self.on_first_step, None
                hook()
            for token in future.state.generated_tokens[len(row.generated) :]:
                if not row.done:
                    self._rules.take(row, int(token))
            if row.done:  # the grammar refused a token: end the reply, reported as an error
                mask[:] = self._eos_only
            elif not self._rules.fill(row, mask):
                mask[:] = -1
        # Rows the previous step used and this one does not allow every token again.
        self._host[count : self._written] = -1
        used = max(count, self._written)
        self._masks[:used].copy_(torch.from_numpy(self._host[:used]))
        self._written = count
        return torch.arange(count, dtype=torch.int32)

    def __call__(self, scores: torch.Tensor, tensor_arg: torch.Tensor) -> torch.Tensor:
        """Mask the logits of each row with its request's allowed tokens (device work only).

        Args:
            scores: ``[rows, vocab]`` logits.
            tensor_arg: The row indices written by :meth:`prepare_tensor_args`.
        """
        bits = self._masks[: scores.shape[0]]
        allowed = ((bits.unsqueeze(-1) >> self._shifts) & 1).bool().reshape(bits.shape[0], -1)
        return scores.masked_fill(~allowed[:, : scores.shape[-1]], float("-inf"))

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` masks. Reserved up front for the manager's largest batch: a buffer
        replaced later would leave a captured CUDA graph reading the old one.

        Args:
            rows: Logits rows of the largest batch.
        """
        if rows <= self._host.shape[0]:
            return
        size = max(rows, MIN_MASK_ROWS, 2 * self._host.shape[0])
        self._host = np.full((size, self._words), -1, dtype=np.int32)
        self._masks = torch.full((size, self._words), -1, dtype=torch.int32, device=self._device)
        self._written = 0


class _WithGrammar(ContinuousBatchingLogitsProcessorList):
    """The manager's processors (temperature, top-p) after the grammar's masks."""

    def __init__(self, grammar: GrammarMasks, others: LogitsProcessorList):
        super().__init__(LogitsProcessorList([grammar, *others]))
        self.tensors_required += 1  # the grammar's row indices (others take none unconverted)


@dataclass(frozen=True)
class _Shape:
    """What a manager is built for: sampling settings and, on the CPU, the cache's pages."""

    sampling: tuple[bool, float | None, float | None, int | None]
    pages: int | None


class PagedDecoder:
    """Decodes batches on one model with transformers' continuous batching.

    The manager and its cache live across batches (pages of a shared rubric prefix stay
    reusable); a batch with other sampling settings, or on the CPU one needing more pages than
    the cache holds, gets a new one.

    Args:
        model: The loaded causal LM.
        vocab_size: Width of its logits.
        closers: The tokenizer's closing tokens.
        eos_ids: Every token that ends a reply (the first is forced where a reply must stop).
    """

    def __init__(self, model: Any, vocab_size: int, closers: Closers, eos_ids: Sequence[int]):
        self.model = model
        self.eos_ids = list(eos_ids)
        self.grammar = GrammarMasks(vocab_size, closers, eos_ids[0], eos_ids, model.device)
        self._manager: Any = None
        self._shape: _Shape | None = None
        self.steps_s = 0.0
        """Seconds of the last batch, from its submission to its last reply."""
        self.attention = ""
        """The attention implementation the last batch ran with (the manager may pick flash
        attention on a GPU; ``sdpa`` builds a mask per step)."""

    def decode(
        self,
        sampling: tuple[bool, float | None, float | None, int | None],
        prompts: Sequence[list[int]],
        rows: Sequence[RowState],
        cancelled: Callable[[int], bool],
        on_first_step: Callable[[], None] | None = None,
    ) -> list[list[int]]:
        """Each prompt's new tokens (its end token kept when written).

        Args:
            sampling: ``GenerationRequest.sampling`` of the batch.
            prompts: Token ids of each prompt, chat template applied.
            rows: Each prompt's reply state (cap, grammar).
            cancelled: Whether the caller of request ``i`` stopped waiting.
            on_first_step: Called in the decoding thread before the first reply token.
        """
        manager = self._ready(sampling, prompts, rows)
        started = time.perf_counter()
        ids = [f"clinjudge-{next(_IDS)}" for _ in prompts]
        self.grammar.on_first_step = on_first_step
        # The loop's thread runs for one batch: a thread left running would keep the process
        # from exiting, and the model gets its own attention implementation back in between.
        manager.switch_to_cb_friendly_attn(
            self.model, manager.continuous_batching_config.auto_switch_to_flash
        )
        self.attention = str(self.model.config._attn_implementation)
        manager.start()
        try:
            for request_id, prompt, row in zip(ids, prompts, rows, strict=True):
                self.grammar.rows[request_id] = row
                added = manager.add_request(
                    input_ids=prompt,
                    request_id=request_id,
                    max_new_tokens=row.cap + 1,  # + the end token
                    eos_token_id=self.eos_ids,
                )
                if added is None:  # the manager refused it (it logged why)
                    raise RuntimeError("the continuous batching manager refused a request")
            replies = self._collect(manager, ids, cancelled)
        finally:
            manager.stop(block=True, keep_for_next_session=True)  # keeps the cache's pages
            for request_id in ids:
                self.grammar.rows.pop(request_id, None)
            self.grammar.on_first_step = None
        self.steps_s = time.perf_counter() - started
        return [replies.get(request_id, []) for request_id in ids]

    def close(self) -> None:
        """Let the manager and its cache go (the next batch starts a new one)."""
        if self._manager is not None:
            # The manager kept between batches is cached on the model, which lets it go here.
            self.model.destroy_cached_continuous_batching_manager()
            self._manager.destroy()
        self._manager = None
        self._shape = None

    def _collect(
        self, manager: Any, ids: list[str], cancelled: Callable[[int], bool]
    ) -> dict[str, list[int]]:
        """Wait for every request's reply; requests whose callers left are cancelled."""
        waiting = {request_id: index for index, request_id in enumerate(ids)}
        replies: dict[str, list[int]] = {}
        while waiting:
            for request_id, index in list(waiting.items()):
                if cancelled(index):
                    manager.cancel_request(request_id)
                    del waiting[request_id]
            output = manager.get_result(timeout=POLL_S)
            if output is None:
                if not manager.is_running():
                    raise RuntimeError("the continuous batching loop stopped")
                continue
            if output.request_id not in waiting or not output.is_finished():
                continue  # a request cancelled earlier, or a partial output
            del waiting[output.request_id]
            if output.error is not None:
                raise RuntimeError(f"continuous batching failed: {output.error}")
            replies[output.request_id] = [int(token) for token in output.generated_tokens]
        return replies

    def _ready(
        self,
        sampling: tuple[bool, float | None, float | None, int | None],
        prompts: Sequence[list[int]],
        rows: Sequence[RowState],
    ) -> Any:
        """A manager for this batch's sampling and size (the current one when it fits)."""
        pages = None
        if self.model.device.type == "cpu":
            # On the CPU transformers sizes the cache at 60% of the RAM; here it holds what the
            # batch needs (a request: its prompt, its cap and its end token, page-aligned).
            pages = sum(
                math.ceil((len(p) + r.cap + 2) / PAGE_TOKENS)
                for p, r in zip(prompts, rows, strict=True)
            )
        shape = _Shape(sampling, pages)
        current = self._shape
        fits = current is not None and (
            current.pages is None or (pages is not None and pages <= current.pages)
        )
        if current is not None and current.sampling == sampling and fits:
            return self._manager
        self.close()
        self._manager = self._start(sampling, pages)
        self._shape = shape
        return self._manager

    def _start(
        self, sampling: tuple[bool, float | None, float | None, int | None], pages: int | None
    ) -> Any:
        sample, temperature, top_p, seed = sampling
        generation = GenerationConfig(
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=top_p if sample else None,
            top_k=None,
            eos_token_id=self.eos_ids,
        )
        config = ContinuousBatchingConfig(
            page_size=PAGE_TOKENS,
            num_blocks=pages,
            use_async_batching=False,  # its host side runs a step ahead of the tokens
            max_memory_percent=None if pages is not None else 0.8,
            seed=seed,
        )
        manager = self.model.init_continuous_batching(
            generation_config=generation, continuous_batching_config=config
        )
        # The manager's own processors come from the generation config (temperature, top-p);
        # the grammar goes first, so sampling only ever sees allowed tokens.
        self.grammar.reserve(manager.continuous_batching_config.max_requests_per_batch or 1024)
        manager.logit_processor = _WithGrammar(
            self.grammar, manager.logit_processor.logits_processor
        )
        log.debug("paged engine: manager created (%s pages, sampling %s)", pages, sampling)
        return manager
