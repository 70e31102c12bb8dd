"""The model behind ``hf/<path>``: loaded once per process, run one batch at a time.

One :class:`LocalModel` per (source, device, dtype) serves every client that names it (a panel's
members, the chair), so the weights are loaded once and their requests share batches. Each
batch is one ``generate`` call in the model's own worker thread:

* prompts are the model's chat template applied to the conversation, tokenized by its tokenizer
  (the token counts recorded are these);
* the prompt prefix that requests share (the system message with the rubric, a persona) is
  computed once and its key/value cache reused, by later batches too; rows of a batch are laid
  out as [pad][prefix][pad][rest of the prompt], which the attention mask and the position ids
  derived from it make exact;
* decoding follows each request's JSON Schema through llguidance
  (:mod:`clinjudge.judges.clients._hf_constraint`), with its own ``max_tokens``.

torch, transformers and llguidance are imported here, and this module only when an ``hf/``
model is used.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import llguidance
import llguidance.hf
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    GenerationConfig,
    LogitsProcessorList,
    StaticCache,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.utils import logging as hf_logging

from clinjudge._util import torch_device
from clinjudge.judges.clients._hf_constraint import (
    Closers,
    ConstrainedBatch,
    ConstraintError,
    RowState,
    closing_reserve,
    compile_grammar,
)
from clinjudge.judges.clients._hf_options import resolve_engine
from clinjudge.judges.clients._hf_source import ModelSource, hub_revision
from clinjudge.judges.clients._settings import ModelConfigError

log = logging.getLogger(__name__)

PREFIX_MIN_TOKENS = 64
"""Shortest shared prompt prefix worth caching."""
PREFIX_ENTRIES = 4
"""Prefixes kept (each holds its key/value cache; SmolLM2's 2,300-token rubric prefix ~100 MB)."""
DECODE_THREADS_ENV = "CLINJUDGE_HF_DECODE_THREADS"
"""CPU threads while decoding (see :func:`decode_threads`)."""
STATIC_CACHE = True
"""Preallocate each batch's key/value cache (False: let it grow, as transformers does)."""
RECENT_PROMPTS = 16
"""Prompts remembered for finding a prefix shared with a later request."""


@dataclass
class GenerationRequest:
    """One chat request for the local model.

    Args:
        messages: OpenAI-style ``{"role", "content"}`` dicts.
        max_tokens: Most tokens the reply may hold.
        schema: JSON Schema the reply must follow; None with ``json_mode`` means any JSON object.
        json_mode: Constrain the reply to JSON (always true when ``schema`` is set).
        temperature: Sampling temperature; 0 or None decodes greedily.
        top_p: Nucleus sampling mass.
        seed: Seeds torch's generator for the batch (reproducible for the same batch).
    """

    messages: list[dict[str, str]]
    max_tokens: int
    schema: dict[str, Any] | None = None
    json_mode: bool = False
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    cancelled: bool = False
    """Set when the caller stopped waiting: the batch stops decoding this row."""

    @property
    def sampling(self) -> tuple[bool, float | None, float | None, int | None]:
        """The settings a batch must share (one ``generate`` call samples all rows alike)."""
        sample = bool(self.temperature)
        return (sample, self.temperature if sample else None, self.top_p, self.seed)


@dataclass
class GenerationResult:
    """What the model wrote for one request.

    Args:
        text: The reply.
        finish_reason: ``stop`` (complete) or ``length`` (cut at ``max_tokens``).
        prompt_tokens: Prompt tokens, counted by the model's tokenizer.
        completion_tokens: Tokens generated (the end token included when the model wrote it).
        steered: The constraint closed the reply early to fit ``max_tokens``.
        batch_size: Requests decoded in the same ``generate`` call.
        generate_s: Seconds of that call (shared by its batch).
    """

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    steered: bool = False
    batch_size: int = 1
    generate_s: float = 0.0


class LocalModelError(RuntimeError):
    """The model cannot be loaded or cannot serve a request."""


def resolve_device(device: str) -> str:
    """``auto``: the first CUDA GPU when there is one, else the CPU.

    Args:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (any torch device string).
    """
    return torch_device.resolve_device(device, torch, LocalModelError)


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """``auto``: bfloat16 on a GPU, float32 on the CPU.

    Args:
        dtype: ``auto``, ``bfloat16``, ``float16`` or ``float32``.
        device: The resolved device.
    """
    return torch_device.resolve_dtype(dtype, device, torch, LocalModelError)  # type: ignore[no-any-return]


class _Cancelled(StoppingCriteria):
    """Stops the rows whose callers stopped waiting; asked once per step, it also reports
    each step as the model's progress."""

    def __init__(
        self, requests: Sequence[GenerationRequest], stepped: Callable[[], None] | None = None
    ):
        self._requests = list(requests)
        self._stepped = stepped

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> Any:
        if self._stepped is not None:
            self._stepped()
        done = [request.cancelled for request in self._requests]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def decode_threads() -> int:
    """CPU threads for decoding: ``CLINJUDGE_HF_DECODE_THREADS``, else half of torch's (at
    least one).

    Reading a prompt is a few large matrix products that keep every thread busy; a decoding step
    is hundreds of small ones, each ending in a barrier where all threads wait for the slowest.
    On a machine whose cores are shared, one thread descheduled at a barrier stalls the step: on
    the 2-core development machine under a load of 3, SmolLM2 decoded 3 rows at 0.3-0.5 s per
    step on one thread and 4 s per step on two, while the prompts took as long either way.
    """
    configured = os.environ.get(DECODE_THREADS_ENV)
    if configured:
        try:
            return max(1, int(configured))
        except ValueError as exc:
            raise LocalModelError(f"{DECODE_THREADS_ENV}={configured!r} must be a number") from exc
    return max(1, torch.get_num_threads() // 2)


def _quiet_gguf_progress() -> None:
    """Silence the GGUF loader's progress bar, which ignores transformers' progress setting."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        return
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None and not isinstance(bar, functools.partial):
        gguf_utils.tqdm = functools.partial(bar, disable=True)


@dataclass
class _Prefix:
    """A cached prompt prefix: its tokens and per-layer (keys, values), batch size 1."""

    tokens: tuple[int, ...]
    layers: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    limit = min(len(a), len(b))
    index = 0
    # Compare in blocks first: prompts share thousands of tokens.
    while index + 256 <= limit and a[index : index + 256] == b[index : index + 256]:
        index += 256
    while index < limit and a[index] == b[index]:
        index += 1
    return index


class LocalModel:
    """A causal LM and its tokenizer in this process, with a worker thread for its batches.

    Args:
        source: Where the files are.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``auto`` (bfloat16 on GPU, float32 on CPU), ``bfloat16``, ``float16``, ``float32``.
        prefix_cache: Reuse the key/value cache of shared prompt prefixes (the ``padded``
            engine; the ``paged`` one shares complete pages of a prefix itself).
        engine: How batches are decoded: ``padded`` (one ``generate`` call over padded rows)
            or ``paged`` (transformers' continuous batching, :mod:`._hf_paged`).
    """

    def __init__(
        self,
        source: ModelSource,
        *,
        device: str = "auto",
        dtype: str = "auto",
        prefix_cache: bool = True,
        engine: str = "padded",
    ):
        self.source = source
        self.requested_device = device
        self.requested_dtype = dtype
        self.prefix_cache = prefix_cache
        self.engine = resolve_engine(engine)
        self._paged: Any = None
        """The ``paged`` engine's decoder (created when the model loads)."""
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clinjudge-hf")
        self._load_lock = threading.Lock()
        self._loaded: Future[None] | None = None
        self.tokenizer: Any = None
        self.model: Any = None
        self.device = "cpu"
        self.decode_threads: int | None = None
        """CPU threads while decoding (None: torch's setting throughout)."""
        self.load_s = 0.0
        self.progress_at = time.monotonic()
        """``time.monotonic()`` of the last sign of work (a batch begun, a layer's forward
        pass, a token decoded): the deadlines of this model's calls follow it (#39)."""
        self.watched_layers = 0
        """Decoder layers that report progress (0: only batches and steps do)."""
        self._prefixes: OrderedDict[tuple[int, ...], _Prefix] = OrderedDict()
        self._recent: deque[list[int]] = deque(maxlen=RECENT_PROMPTS)

    # -- loading -----------------------------------------------------------------------------

    def start_loading(self) -> Future[None]:
        """Load in the worker thread (once); the future completes when the model is ready."""
        with self._load_lock:
            if self._loaded is None:
                self._loaded = self.executor.submit(self._load)
            return self._loaded

    def progress_age(self) -> float:
        """Seconds since the model last made progress; 0 while it loads (a load is one long
        step, bounded by its own reads)."""
        if self._loaded is not None and not self._loaded.done():
            return 0.0
        return time.monotonic() - self.progress_at

    def _progressed(self) -> None:
        self.progress_at = time.monotonic()  # a float written whole: read from the loop's thread

    def _stepped(self) -> None:
        """A decoding step ended (a token for every row still going)."""
        self._progressed()

    def _watch_layers(self, model: Any) -> None:
        """Every decoder layer's forward pass reports progress: reading a batch of long prompts
        on a CPU is one forward pass of minutes, and its calls must not time out meanwhile."""
        layers = list(getattr(getattr(model, "get_decoder", lambda: None)(), "layers", ()) or ())
        self.watched_layers = len(layers)
        for layer in layers:
            # A microsecond per layer and step, next to milliseconds of its matrix products.
            layer.register_forward_hook(lambda *_: self._progressed())

    @property
    def ready(self) -> bool:
        """Whether the model is loaded."""
        return self._loaded is not None and self._loaded.done() and not self._loaded.exception()

    def _load(self) -> None:
        started = time.perf_counter()
        hf_logging.disable_progress_bar()
        _quiet_gguf_progress()
        self.device = resolve_device(self.requested_device)
        dtype = resolve_dtype(self.requested_dtype, self.device)
        args: dict[str, Any] = {}
        if self.source.local:
            args["local_files_only"] = True  # a path never reaches the hub
        else:
            try:
                # The commit the response cache keys this model by (the one loaded, should
                # the repository move on meanwhile).
                args["revision"] = hub_revision(self.source)
            except ModelConfigError as exc:
                raise LocalModelError(str(exc)) from exc
        if self.source.gguf_file:
            args["gguf_file"] = self.source.gguf_file
        try:
            tokenizer = AutoTokenizer.from_pretrained(self.source.location, **args)
            model = AutoModelForCausalLM.from_pretrained(self.source.location, dtype=dtype, **args)
        except (OSError, ValueError, ImportError, KeyError) as exc:
            raise LocalModelError(f"{self.source.model}: cannot load the model: {exc}") from exc
        # transformers wraps `to` with functools.wraps; its stub then wants the model first.
        model.to(self.device)  # type: ignore[arg-type]
        model.eval()
        self._watch_layers(model)
        if not getattr(tokenizer, "is_fast", False):
            raise LocalModelError(f"hf/{self.source}: a fast (Rust) tokenizer is needed")
        self.tokenizer = tokenizer
        self.model = model
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.eos_ids = self._eos_ids()
        self.pad_id = next((i for i in (tokenizer.pad_token_id, *self.eos_ids) if i is not None), 0)
        # A fast tokenizer in practice (transformers' GGUF and checkpoint loads give one).
        self.llg_tokenizer = llguidance.hf.from_tokenizer(
            tokenizer,  # type: ignore[arg-type]
            n_vocab=self.vocab_size,
            eos_token=self.eos_ids,  # any of them ends a complete reply
        )
        self.closers = Closers.of(self.llg_tokenizer, self.vocab_size)
        self.context_length = int(
            getattr(model.config, "max_position_embeddings", None) or 1_000_000
        )
        forward = inspect.signature(model.forward).parameters
        # transformers 5 renamed past_key_values to cache.
        self._cache_arg = "cache" if "cache" in forward else "past_key_values"
        if self.prefix_cache and not self._full_attention():
            self.prefix_cache = False
        if self.engine == "paged":
            from clinjudge.judges.clients._hf_paged import PagedDecoder

            self.prefix_cache = False  # the paged cache shares a prefix's pages instead
            self._paged = PagedDecoder(model, self.vocab_size, self.closers, self.eos_ids)
        if self.device == "cpu":
            self.decode_threads = decode_threads()
        self.load_s = time.perf_counter() - started

    def _eos_ids(self) -> list[int]:
        ids: list[int] = []
        if self.tokenizer.eos_token_id is not None:
            ids.append(int(self.tokenizer.eos_token_id))
        configured = self.model.generation_config.eos_token_id
        for value in configured if isinstance(configured, list) else [configured]:
            if value is not None and int(value) not in ids:
                ids.append(int(value))
        if not ids:
            raise LocalModelError(f"hf/{self.source}: the tokenizer has no end-of-text token")
        return ids

    def _full_attention(self) -> bool:
        """Prefix reuse is exact only where every layer attends to the whole context."""
        config = self.model.config
        kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
        sliding = getattr(config, "sliding_window", None) and getattr(
            config, "use_sliding_window", True
        )
        return kinds == {"full_attention"} and not sliding

    # -- prompts -----------------------------------------------------------------------------

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of a conversation through the model's chat template, ready for the reply.

        Args:
            messages: ``{"role", "content"}`` dicts.
        """
        tokenizer = self.tokenizer
        if not getattr(tokenizer, "chat_template", None):
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
            return list(tokenizer(text)["input_ids"])
        try:
            text = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:  # noqa: BLE001 - jinja raises for templates without system
            if not messages or messages[0]["role"] != "system" or len(messages) < 2:
                raise LocalModelError(f"hf/{self.source}: chat template failed: {exc}") from exc
            # Templates that refuse a system turn (Gemma) get it at the top of the first turn.
            merged = [
                {
                    "role": messages[1]["role"],
                    "content": f"{messages[0]['content']}\n\n{messages[1]['content']}",
                },
                *messages[2:],
            ]
            text = tokenizer.apply_chat_template(merged, add_generation_prompt=True, tokenize=False)
        # The template writes the special tokens (BOS) itself.
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_tokens(self, text: str) -> int:
        """Tokens of a text by the model's tokenizer.

        Args:
            text: Any text.
        """
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    # -- prefix cache ------------------------------------------------------------------------

    def _cached_prefix(self, ids: list[int]) -> _Prefix | None:
        best: _Prefix | None = None
        for prefix in self._prefixes.values():
            n = len(prefix.tokens)
            longer = best is None or n > len(best.tokens)
            if n < len(ids) and longer and tuple(ids[:n]) == prefix.tokens:
                best = prefix
        if best is not None:
            self._prefixes.move_to_end(best.tokens)
        return best

    def _new_prefix(self, ids: list[int], others: Sequence[list[int]]) -> tuple[int, ...] | None:
        """The longest prefix ``ids`` shares with another prompt, if worth caching."""
        shared = max((_common_length(ids, other) for other in others), default=0)
        shared = min(shared, len(ids) - 1)  # at least one token is left to run
        return tuple(ids[:shared]) if shared >= PREFIX_MIN_TOKENS else None

    def _new_cache(self) -> Any:
        try:
            return DynamicCache(config=self.model.config)
        except TypeError:  # transformers 4 builds it empty
            return DynamicCache()

    def _compute_prefix(self, tokens: tuple[int, ...]) -> _Prefix:
        cache = self._new_cache()
        ids = torch.tensor([tokens], device=self.device)
        self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self._cache_arg: cache})
        layers = getattr(cache, "layers", None)
        if layers is not None:
            pairs = [(layer.keys, layer.values) for layer in layers]
        else:  # transformers 4
            pairs = list(zip(cache.key_cache, cache.value_cache, strict=True))
        prefix = _Prefix(tokens, pairs)
        self._prefixes[tokens] = prefix
        while len(self._prefixes) > PREFIX_ENTRIES:
            self._prefixes.popitem(last=False)
        return prefix

    def _prefixes_for(self, prompts: list[list[int]]) -> list[_Prefix | None]:
        found: list[_Prefix | None] = []
        for index, ids in enumerate(prompts):
            prefix = self._cached_prefix(ids)
            if prefix is None:
                others = [p for i, p in enumerate(prompts) if i != index] + list(self._recent)
                tokens = self._new_prefix(ids, others)
                if tokens is not None:
                    prefix = self._prefixes.get(tokens) or self._compute_prefix(tokens)
            found.append(prefix)
        self._recent.extend(prompts)
        return found

    def _generation_cache(self, length: int) -> Any:
        """A preallocated cache for a batch of ``length`` positions (prompt and reply): written
        in place, where a growing cache copies all of itself at every step (on a CPU that copy
        took half of each decoding step with 4,000-token prompts)."""
        if STATIC_CACHE:
            try:
                return StaticCache(config=self.model.config, max_cache_len=length)
            except TypeError:  # transformers 4 wants more arguments: grow instead
                pass
        return self._new_cache()

    def _batch_cache(self, prefixes: list[_Prefix | None], width: int, length: int) -> Any:
        """One cache for the batch: each row's prefix right-aligned in ``width`` positions."""
        cache = self._generation_cache(length)
        template = next(p for p in prefixes if p is not None).layers
        for layer, (keys0, values0) in enumerate(template):
            keys, values = [], []
            for prefix in prefixes:
                shape = list(keys0.shape)
                shape[2] = width
                k = keys0.new_zeros(shape)
                v = values0.new_zeros([*shape[:3], values0.shape[3]])
                if prefix is not None:
                    n = len(prefix.tokens)
                    k[:, :, width - n :] = prefix.layers[layer][0]
                    v[:, :, width - n :] = prefix.layers[layer][1]
                keys.append(k)
                values.append(v)
            cache.update(torch.cat(keys), torch.cat(values), layer)
        return cache

    # -- generation --------------------------------------------------------------------------

    def run_batch(
        self, requests: list[GenerationRequest]
    ) -> list[GenerationResult | BaseException]:
        """Decode a batch (called in the worker thread; every request shares ``sampling``).

        Args:
            requests: The batch.
        """
        self._progressed()  # reading the prompts may take a while before the first token
        results: list[GenerationResult | BaseException | None] = [None] * len(requests)
        rows: list[RowState] = []
        prompts: list[list[int]] = []
        live: list[int] = []
        for index, request in enumerate(requests):
            if request.cancelled:
                results[index] = LocalModelError("cancelled before decoding")
                continue
            try:
                prompt, row = self._prepare(request)
            except (ConstraintError, LocalModelError) as exc:
                results[index] = exc
                continue
            prompts.append(prompt)
            rows.append(row)
            live.append(index)
        if live:
            started = time.perf_counter()
            with torch.inference_mode():
                replies = self._generate([requests[i] for i in live], prompts, rows)
            seconds = time.perf_counter() - started
            for index, prompt, row, reply in zip(live, prompts, rows, replies, strict=True):
                results[index] = self._result(row, reply, len(prompt), len(live), seconds)
        return [r if r is not None else LocalModelError("no result") for r in results]

    def _prepare(self, request: GenerationRequest) -> tuple[list[int], RowState]:
        prompt = self.encode_chat(request.messages)
        if len(prompt) + request.max_tokens > self.context_length:
            raise LocalModelError(
                f"prompt of {len(prompt)} tokens plus max_tokens {request.max_tokens} exceeds "
                f"the model's context of {self.context_length} tokens"
            )
        row = RowState(cap=request.max_tokens)
        if request.schema is not None or request.json_mode:
            grammar = compile_grammar(request.schema, self.llg_tokenizer)
            row.matcher = llguidance.LLMatcher(self.llg_tokenizer, grammar)
            if row.matcher.is_error():
                raise ConstraintError(f"reply schema not usable: {row.matcher.get_error()}")
            row.reserve = closing_reserve(request.schema, self.tokenizer)
            # A cap below a minimal reply's length cannot hold a usable reply: raise it to that.
            row.cap = max(row.cap, row.reserve)
        return prompt, row

    def _generate(
        self, requests: list[GenerationRequest], prompts: list[list[int]], rows: list[RowState]
    ) -> list[list[int]]:
        """One ``generate`` call; returns each row's new tokens (end token and padding kept)."""
        if self._paged is not None:
            return self._generate_paged(requests, prompts, rows)
        started = time.perf_counter()
        prefixes: list[_Prefix | None] = [None] * len(prompts)
        if self.prefix_cache:
            prefixes = self._prefixes_for(prompts)
        prefixed = time.perf_counter()
        heads = [len(p.tokens) if p else 0 for p in prefixes]
        head_width = max(heads)
        tail_width = max(len(ids) - n for ids, n in zip(prompts, heads, strict=True))
        input_ids, mask = [], []
        for ids, n in zip(prompts, heads, strict=True):
            tail = len(ids) - n
            pad_head, pad_tail = head_width - n, tail_width - tail
            input_ids.append(
                [self.pad_id] * pad_head + ids[:n] + [self.pad_id] * pad_tail + ids[n:]
            )
            mask.append([0] * pad_head + [1] * n + [0] * pad_tail + [1] * tail)
        sample, temperature, top_p, seed = requests[0].sampling
        config = GenerationConfig(
            max_new_tokens=max(row.cap for row in rows) + 1,  # + the end token
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=top_p if sample else None,
            top_k=None,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids,
            # On a GPU, transformers compiles the forward pass for a static cache, once per
            # cache length; every batch here has its own length, so it would compile again
            # and again (an 8B model on an H200 spent most of each 64-item batch compiling).
            disable_compile=True,
        )
        threads = torch.get_num_threads()
        decoding_threads = self.decode_threads or threads

        def decoding() -> None:  # called once the prompts have been read
            if decoding_threads != threads:
                torch.set_num_threads(decoding_threads)

        processor = ConstrainedBatch(
            rows, self.vocab_size, self.closers, self.eos_ids[0], self.eos_ids, decoding
        )
        length = head_width + tail_width + config.max_new_tokens
        kwargs: dict[str, Any] = {
            self._cache_arg: (
                self._batch_cache(prefixes, head_width, length)
                if head_width
                else self._generation_cache(length)
            )
        }
        if seed is not None:
            torch.manual_seed(seed)
        try:
            output = self.model.generate(
                input_ids=torch.tensor(input_ids, device=self.device),
                attention_mask=torch.tensor(mask, device=self.device),
                generation_config=config,
                logits_processor=LogitsProcessorList([processor]),
                stopping_criteria=StoppingCriteriaList([_Cancelled(requests, self._stepped)]),
                **kwargs,
            )
        finally:
            torch.set_num_threads(threads)
        ended = time.perf_counter()
        read = processor.first_step_at or ended
        log.debug(
            "hf/%s: batch of %d, prefixes %.1f s, prompts (%d cached + %d tokens wide) %.1f s, "
            "%d steps %.1f s",
            self.source,
            len(rows),
            prefixed - started,
            head_width,
            tail_width,
            read - prefixed,
            processor.steps,
            ended - read,
        )
        sequences = output.sequences if hasattr(output, "sequences") else output
        return [list(map(int, seq)) for seq in sequences[:, len(input_ids[0]) :].tolist()]

    def _generate_paged(
        self, requests: list[GenerationRequest], prompts: list[list[int]], rows: list[RowState]
    ) -> list[list[int]]:
        """The batch through the ``paged`` engine: each row's new tokens (end token kept)."""
        threads = torch.get_num_threads()
        decoding_threads = self.decode_threads or threads

        def decoding() -> None:  # in the decoding thread, once a reply token is due
            if decoding_threads != threads:
                torch.set_num_threads(decoding_threads)

        try:
            replies: list[list[int]] = self._paged.decode(
                requests[0].sampling,
                prompts,
                rows,
                self._polled(requests, rows),
                decoding,
            )
        finally:
            torch.set_num_threads(threads)
        log.debug("hf/%s: paged batch of %d, %.1f s", self.source, len(rows), self._paged.steps_s)
        return replies

    def _polled(
        self, requests: list[GenerationRequest], rows: list[RowState]
    ) -> Callable[[int], bool]:
        """The paged engine's question, asked at every poll, whether request ``i``'s caller
        left; a poll that finds the replies longer than the last one did reports progress."""
        seen = -1

        def cancelled(index: int) -> bool:
            nonlocal seen
            tokens = sum(len(row.generated) for row in rows)
            if tokens != seen:
                seen = tokens
                self._progressed()
            return requests[index].cancelled

        return cancelled

    def _result(
        self, row: RowState, reply: list[int], prompt_tokens: int, batch: int, seconds: float
    ) -> GenerationResult | BaseException:
        """A row's result from its new tokens (up to the first end token) and its state."""
        if row.error is not None:
            return LocalModelError(f"constrained decoding failed: {row.error}")
        ends = [i for i, token in enumerate(reply) if token in self.eos_ids]
        content = reply[: ends[0]] if ends else reply
        # An end token forced at the cap, before the JSON was complete, is a cut reply.
        ended = bool(ends) and row.finish_reason == "stop"
        return GenerationResult(
            text=self.tokenizer.decode(content, skip_special_tokens=True),
            finish_reason="stop" if ended else "length",
            prompt_tokens=prompt_tokens,
            completion_tokens=len(content) + (1 if ended else 0),
            steered=row.steered,
            batch_size=batch,
            generate_s=seconds,
        )
