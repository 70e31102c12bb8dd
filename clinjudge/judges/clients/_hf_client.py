"""The ``hf/`` provider: a causal LM run in the judge's own process through transformers.

``--model hf/<path>`` loads a local checkpoint folder, a GGUF file (or a folder holding one)
and ``--model hf-hub/<org>/<name>`` a hub repository (the one form that downloads), once per
process, and answers every agent that names it: requests in flight together are decoded in one
batch, on a GPU when there is one, and every reply that has a JSON Schema (or asks for JSON) is
decoded under that constraint, so it is valid JSON of that shape. Tokens are counted by the
model's tokenizer and cost nothing.

This module is light: torch, transformers and llguidance (the ``prm`` extra) are imported the
first time a request is sent (:mod:`clinjudge.judges.clients._hf_engine`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from clinjudge.judges.clients._client import Generation, ModelClient
from clinjudge.judges.clients._completion import Completion
from clinjudge.judges.clients._faults import ProviderFault
from clinjudge.judges.clients._hf_options import ENGINE_ENV as ENGINE_ENV
from clinjudge.judges.clients._hf_options import ENGINES as ENGINES
from clinjudge.judges.clients._hf_options import resolve_engine
from clinjudge.judges.clients._hf_source import (
    HUB_PROVIDER,
    ModelSource,
    files_signature,
    resolve_source,
)
from clinjudge.judges.clients._settings import ModelConfigError, ModelSettings
from clinjudge.rubrics import Rubric

if TYPE_CHECKING:
    from clinjudge.judges.clients._hf_batcher import MicroBatcher
    from clinjudge.judges.clients._hf_engine import (
        GenerationRequest,
        GenerationResult,
        LocalModel,
    )

DEVICE_ENV = "CLINJUDGE_HF_DEVICE"
"""Device of ``hf/`` models when the settings name none: ``auto`` (default), ``cpu``, ``cuda``."""
DTYPE_ENV = "CLINJUDGE_HF_DTYPE"
"""Weights' dtype: ``auto`` (bfloat16 on GPU, float32 on CPU), ``bfloat16``, ``float32``..."""
MAX_BATCH_ENV = "CLINJUDGE_HF_MAX_BATCH"
"""Most requests per batch (default 8 on CPU, 32 on GPU)."""
WINDOW_ENV = "CLINJUDGE_HF_BATCH_WINDOW_MS"
"""How long a batch's first request waits for others to join (default 10 ms)."""

DEFAULT_MAX_TOKENS = 400
DEFAULT_WINDOW_MS = 10.0
INSTALL_HINT = "hf/ models need torch, transformers and llguidance: pip install 'clinjudge[prm]'"

HF_MODEL_INFO: dict[str, Any] = {
    "vision": False,
    "function_calling": False,
    "json_output": True,
    "structured_output": True,
    "family": "unknown",
    "multiple_system_messages": False,
}
"""What an in-process model can do, as agents ask: JSON and schemas (decoded under them), no
tools."""

_ENGINES: dict[tuple[ModelSource, str, str, str], tuple[tuple[object, ...], LocalModel]] = {}
"""The loaded model of each (source, device, dtype, engine), with its files' stat identity
then."""
_BATCHERS: dict[int, MicroBatcher[GenerationRequest, GenerationResult]] = {}
_ENGINES_LOCK = threading.Lock()


def local_model(
    source: ModelSource, device: str = "auto", dtype: str = "auto", engine: str = "padded"
) -> LocalModel:
    """The process-wide model for a source, device and dtype (created unloaded); a new one
    when the files changed since (replaced weights are never answered by the old model, whose
    replies the response cache would then keep under the new files' key).

    Args:
        source: Where the files are.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``auto``, ``bfloat16``, ``float16`` or ``float32``.
        engine: ``padded`` or ``paged``.

    Raises:
        ProviderFault: torch, transformers or llguidance is not installed (not retryable).
        OSError: The model's files cannot be read.
    """
    _require_extra()
    from clinjudge.judges.clients._hf_engine import LocalModel

    key = (source, device, dtype, engine)
    signature = files_signature(source)
    with _ENGINES_LOCK:
        known = _ENGINES.get(key)
        if known is None or known[0] != signature:
            loaded = LocalModel(source, device=device, dtype=dtype, engine=engine)
            known = _ENGINES[key] = (signature, loaded)
        return known[1]


def _require_extra() -> None:
    missing = [m for m in ("torch", "transformers", "llguidance") if not _installed(m)]
    if missing:
        raise ProviderFault(f"{INSTALL_HINT} (missing: {', '.join(missing)})", retryable=False)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _batcher(engine: LocalModel) -> MicroBatcher[GenerationRequest, GenerationResult]:
    """The model's batcher: every client of the model shares it, so their requests share
    batches."""
    from clinjudge.judges.clients._hf_batcher import MicroBatcher

    with _ENGINES_LOCK:
        batcher = _BATCHERS.get(id(engine))
        if batcher is None:
            configured = _env_int(MAX_BATCH_ENV)

            async def loaded() -> None:
                # Requests that arrive while the model loads share the first batch.
                await asyncio.wrap_future(engine.start_loading())
                if configured is None:
                    created.max_batch = batch_size_for(engine)

            window_ms = float(os.environ.get(WINDOW_ENV) or DEFAULT_WINDOW_MS)
            created: MicroBatcher[GenerationRequest, GenerationResult] = MicroBatcher(
                engine.run_batch,
                engine.executor,
                max_batch=configured or 8,
                window_s=window_ms / 1000,
                group=lambda request: request.sampling,
                before_batch=loaded,
                on_cancel=_cancel,
            )
            batcher = _BATCHERS[id(engine)] = created
        return batcher


def batch_size_for(engine: LocalModel) -> int:
    """Most requests per batch of a loaded model: ``CLINJUDGE_HF_MAX_BATCH``, else 8 on a CPU
    and 32 on a GPU.

    Args:
        engine: The model (loaded: its device is known).
    """
    return _env_int(MAX_BATCH_ENV) or (8 if engine.device == "cpu" else 32)


def _cancel(request: GenerationRequest) -> None:
    request.cancelled = True


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if not value:
        return None
    try:
        number = int(value)
    except ValueError as exc:
        raise ModelConfigError(f"{name}={value!r} must be a whole number") from exc
    if number < 1:
        raise ModelConfigError(f"{name}={value!r} must be at least 1")
    return number


def _chat(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Chat-format messages as plain role/content turns for a chat template (a tool's result
    is read as the user's)."""
    turns = []
    for message in messages:
        role = message["role"] if message["role"] in ("system", "user", "assistant") else "user"
        turns.append({"role": role, "content": str(message.get("content") or "")})
    return turns


class HFClient(ModelClient):
    """The client of a causal LM run in this process (``hf/<path>``,
    ``hf-hub/<org>/<name>``).

    Args:
        model: What follows ``hf/``: a checkpoint folder, a ``.gguf`` file or a folder with one
            ``.gguf``; with ``hub``, a hub repository id (``org/name`` or
            ``org/name/file.gguf``).
        max_tokens: Cap on generated tokens per reply (a call's ``max_tokens`` overrides it).
        temperature: Sampling temperature; 0 or None decodes greedily.
        top_p: Nucleus sampling mass.
        seed: Seeds each batch's sampling.
        device: ``auto`` (a CUDA GPU when there is one), ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``auto`` (bfloat16 on GPU, float32 on CPU), ``bfloat16``, ``float16``, ``float32``.
        engine: ``padded`` or ``paged`` (None: ``CLINJUDGE_HF_ENGINE``, else ``padded``).
        rubric: The run's rubric: its gates (``synthesized`` null exactly when ``abstraction``
            is 0) are written into reply schemas that carry both keys, which strict-mode
            schemas cannot say, so constrained replies never break them.
        hub: ``model`` is a hub repository, downloaded when loaded (``hf-hub/``); otherwise
            only local files are read.

    Raises:
        ModelConfigError: ``model`` names no model.
    """

    def __init__(
        self,
        model: str,
        *,
        max_tokens: int | None = DEFAULT_MAX_TOKENS,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        device: str = "auto",
        dtype: str = "auto",
        engine: str | None = None,
        rubric: Rubric | None = None,
        hub: bool = False,
    ):
        self.model_info = HF_MODEL_INFO
        self.source = resolve_source(model, hub=hub)
        self.max_tokens = max_tokens or DEFAULT_MAX_TOKENS
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.device = device
        self.dtype = dtype
        self.hf_engine = resolve_engine(engine)
        self._engine: LocalModel | None = None
        """The model of the latest call (whose progress bounds the calls in flight)."""
        self.gates = [
            (a.key, a.gate.attribute, a.gate.null_when)
            for a in (rubric.attributes if rubric is not None else [])
            if a.gate is not None
        ]

    @property
    def engine(self) -> LocalModel:
        """The shared in-process model (loaded on the first request)."""
        return local_model(self.source, self.device, self.dtype, self.hf_engine)

    async def generate(self, call: Generation) -> Completion:
        """Decode one request with the requests in flight beside it.

        Args:
            call: The request (no tools: the model is run without function calling).
        """
        if call.config.tools:
            raise ProviderFault(
                "hf/ models are run without tools (function calling)", retryable=False
            )
        request = self._request(call)
        try:
            result = await self._generate(request)
        except ProviderFault:
            raise
        except Exception as exc:  # noqa: BLE001 - load and decoding failures are not retried
            raise ProviderFault(f"{self.source.model}: {exc}"[:500], retryable=False) from exc
        return Completion(
            result.text,
            result.prompt_tokens,
            result.completion_tokens,
            "stop" if result.finish_reason == "stop" else "length",
        )

    def _request(self, call: Generation) -> GenerationRequest:
        """The generation request of one call: its chat, cap, schema (gated) and sampling.

        Raises:
            ProviderFault: torch, transformers or llguidance is not installed (not retryable).
        """
        _require_extra()
        from clinjudge.judges.clients._hf_engine import GenerationRequest

        args: Mapping[str, Any] = call.args
        reply = call.reply_schema
        schema = dict(reply.schema_) if reply is not None else None
        cap = args.get("max_tokens") or args.get("max_completion_tokens") or self.max_tokens
        if schema is not None and self.gates:
            from clinjudge.judges.clients._hf_constraint import GateRule, apply_gates

            schema = apply_gates(schema, [GateRule(*gate) for gate in self.gates])
        seed = args.get("seed")
        return GenerationRequest(
            messages=_chat(call.messages),
            max_tokens=int(cap),
            schema=schema,
            json_mode=schema is not None or call.mode == "json_object",
            temperature=args.get("temperature", self.temperature),
            top_p=args.get("top_p", self.top_p),
            seed=seed if isinstance(seed, int) else self.seed,
        )

    async def _generate(self, request: GenerationRequest) -> GenerationResult:
        """Decode one request with the requests in flight beside it (in this process; the
        Ray client sends the batch to a replica instead)."""
        engine = self._engine = self.engine
        return await _batcher(engine).submit(request)

    def progress_age(self) -> float | None:
        """Seconds since this client's model last made progress (None before its first call):
        the calls of a model in this process time out when it stops, not when it is slow (#39).
        """
        engine = self._engine
        return engine.progress_age() if engine is not None else None


def client_options(settings: ModelSettings, rubric: Rubric | None = None) -> dict[str, Any]:
    """The arguments of an in-process client for an ``hf/`` or ``hf-hub/`` model's settings
    besides its model (device and dtype: the settings' when they have them, else
    ``CLINJUDGE_HF_DEVICE`` / ``CLINJUDGE_HF_DTYPE``, else ``auto``; the engine likewise, else
    ``CLINJUDGE_HF_ENGINE``, else ``padded``); the provider (``providers/hf.py``) picks the
    local client or the Ray one.

    Args:
        settings: Model and sampling settings.
        rubric: The run's rubric (its gates constrain replies).
    """
    device = getattr(settings, "device", None) or os.environ.get(DEVICE_ENV) or "auto"
    dtype = getattr(settings, "dtype", None) or os.environ.get(DTYPE_ENV) or "auto"
    engine = resolve_engine(settings.engine)
    options: dict[str, Any] = {
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "seed": settings.seed,
        "device": str(device),
        "dtype": str(dtype),
        "engine": engine,
        "rubric": rubric,
        "hub": settings.provider == HUB_PROVIDER,
    }
    return options
