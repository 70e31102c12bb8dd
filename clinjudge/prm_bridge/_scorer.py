"""The in-process backend: a causal-LM PRM run with transformers and torch.

One forward pass per chain, batched with right padding. Under causal attention a real token
never sees the pads after it, so no attention mask is passed: SDPA then takes its fused causal
kernel (on an H100, 19% more tokens/s than with a mask). Only the hidden states at the score
positions go through the output head (two rows of it for a pair softmax), so a batch never
materialises a [batch, length, vocabulary] logits tensor. bf16 with flash attention (or SDPA) on
GPU, float32 on CPU. torch and transformers are imported lazily: ``import clinjudge`` works
without the ``prm`` extra.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clinjudge._util import torch_device
from clinjudge.errors import UserError
from clinjudge.prm_bridge._backend import DEFAULT_BATCH_TOKENS, PRMModelError, PRMScorer
from clinjudge.prm_bridge._presets import PRMFormat
from clinjudge.prm_bridge._render import Encoded

INSTALL_HINT = "the PRM bridge needs torch and transformers: pip install 'clinjudge[prm]'"


class PRMDependencyError(UserError, ImportError):
    """torch or transformers is missing."""


def require_torch() -> Any:
    """Import torch, or fail with the install hint."""
    try:
        import torch
    except ImportError as exc:
        raise PRMDependencyError(INSTALL_HINT) from exc
    return torch


def local_model(model: str, what: str = "the model") -> str:
    """``model`` as transformers should get it; a name that reads as a local path (absolute,
    ``./``, ``../``, ``~``, or with a folder that exists here, or more folders than a hub id's
    ``org/name``) must exist, or transformers answers with a message about hub id syntax.

    Args:
        model: A checkpoint folder or a hub id.
        what: What is being loaded, for the message.

    Raises:
        PRMModelError: The local path does not exist.
    """
    path = Path(model).expanduser()
    parts = model.replace(os.sep, "/").split("/")
    local = (
        Path(model).is_absolute()
        or model.startswith(("./", "../", "~"))
        or model in (".", "..")
        or len(parts) > 2
        or (len(parts) == 2 and Path(parts[0]).is_dir())
    )
    if not local:
        return model
    if not path.exists():
        raise PRMModelError(
            f"{model}: cannot load {what}: no such file or folder (a local model must be a "
            "checkpoint folder; a hub model is named org/name)"
        )
    return str(path)


def load_tokenizer(model: str) -> Any:
    """The tokenizer of a checkpoint directory or hub id."""
    model = local_model(model, "the tokenizer")
    try:
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise PRMDependencyError(INSTALL_HINT) from exc
    hf_logging.disable_progress_bar()
    try:
        return AutoTokenizer.from_pretrained(model)
    except (OSError, ValueError) as exc:
        raise PRMModelError(f"{model}: cannot load the tokenizer: {exc}") from exc


def resolve_device(device: str) -> str:
    """``auto`` means CUDA when available, else CPU."""
    return torch_device.resolve_device(device, require_torch(), PRMModelError)


def resolve_dtype(dtype: str, device: str) -> Any:
    """``auto`` means bfloat16 on GPU and float32 on CPU."""
    return torch_device.resolve_dtype(dtype, device, require_torch(), PRMModelError)


def resolve_attention(attn: str, device: str, dtype: Any) -> str:
    """``auto`` means flash attention 2 on GPU in 16-bit when installed, else SDPA."""
    torch = require_torch()
    if attn != "auto":
        return attn
    half = dtype in (torch.bfloat16, torch.float16)
    if device.startswith("cuda") and half and importlib.util.find_spec("flash_attn"):
        return "flash_attention_2"
    return "sdpa"


class TransformersPRM(PRMScorer):
    """A causal-LM PRM loaded in this process.

    Args:
        model: Checkpoint directory or hub id.
        fmt: The PRM format.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``auto``, ``bfloat16``, ``float16`` or ``float32``.
        attn: ``auto``, ``sdpa``, ``flash_attention_2`` or ``eager``.
        batch_tokens: Padded tokens per forward pass.
        max_length: Token limit; default the format's, else the model's context length.
    """

    def __init__(
        self,
        model: str,
        fmt: PRMFormat,
        *,
        device: str = "auto",
        dtype: str = "auto",
        attn: str = "auto",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        max_length: int | None = None,
    ):
        tokenizer = load_tokenizer(model)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.attn = resolve_attention(attn, self.device, self.dtype)
        self._setup(self._load(model), tokenizer, fmt, model, batch_tokens, max_length)

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any,
        fmt: PRMFormat,
        *,
        name: str = "in-memory",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        max_length: int | None = None,
    ) -> TransformersPRM:
        """Wrap a causal LM already loaded (on its device, in its dtype)."""
        scorer = cls.__new__(cls)
        parameter = next(model.parameters())
        scorer.device, scorer.dtype = str(parameter.device), parameter.dtype
        scorer.attn = getattr(model.config, "_attn_implementation", "unknown")
        scorer._setup(model.eval(), tokenizer, fmt, name, batch_tokens, max_length)
        return scorer

    def _setup(
        self,
        model: Any,
        tokenizer: Any,
        fmt: PRMFormat,
        name: str,
        batch_tokens: int,
        max_length: int | None,
    ) -> None:
        self.model = model
        limit = max_length or getattr(model.config, "max_position_embeddings", None)
        super().__init__(fmt, tokenizer, name, max_length=limit, batch_tokens=batch_tokens)
        vocab = model.get_output_embeddings().weight.shape[0]
        for token_id in (self.plus_id, self.minus_id):
            if token_id >= vocab:
                raise PRMModelError(f"{name}: label id {token_id} is outside the {vocab} logits")
        self.pad_id = next(
            (i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None), 0
        )
        self._prepare_head()

    def _load(self, model: str) -> Any:
        from transformers import AutoModelForCausalLM

        try:
            loaded = AutoModelForCausalLM.from_pretrained(
                local_model(model), dtype=self.dtype, attn_implementation=self.attn
            )
        except (OSError, ValueError, ImportError) as exc:
            raise PRMModelError(f"{model}: cannot load the model: {exc}") from exc
        # transformers wraps `to` with functools.wraps; its stub then wants the model as the
        # first argument of the bound call.
        loaded.to(self.device)  # type: ignore[arg-type]
        loaded.eval()
        return loaded

    def _prepare_head(self) -> None:
        head = self.model.get_output_embeddings()
        rows = [self.plus_id, self.minus_id]
        self._head = head
        self._pair_weight = head.weight[rows].detach().float()
        bias = getattr(head, "bias", None)
        self._pair_bias = None if bias is None else bias[rows].detach().float()
        config = self.model.config
        self._softcap = getattr(config, "final_logit_softcapping", None)
        self._logit_scale = getattr(config, "logit_scale", None)
        try:
            self._decoder = self.model.get_decoder()
        except (AttributeError, NotImplementedError):
            self._decoder = None
        if self._decoder is self.model:  # no separable body: fall back to full logits
            self._decoder = None

    def _hidden(self, ids: Any) -> Any:
        out = self._decoder(input_ids=ids, use_cache=False)
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

    def _finish(self, logits: Any) -> Any:
        if self._logit_scale:
            logits = logits * self._logit_scale
        if self._softcap:
            logits = (logits / self._softcap).tanh() * self._softcap
        return logits

    def _forward(self, batch: Sequence[Encoded]) -> list[list[float]]:
        torch = require_torch()
        width = max(len(e.input_ids) for e in batch)
        # Right padding: every score position lies before its row's pads (see module docstring).
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        rows: list[int] = []
        cols: list[int] = []
        for r, enc in enumerate(batch):
            ids[r, : len(enc.input_ids)] = torch.tensor(enc.input_ids, dtype=torch.long)
            kept = [p for p in enc.positions if p is not None]
            rows.extend([r] * len(kept))
            cols.extend(kept)
        ids = ids.to(self.device)
        with torch.inference_mode():
            plus = self._plus_probs(ids, rows, cols, torch)
        values = plus.tolist()
        out: list[list[float]] = []
        start = 0
        for enc in batch:
            count = sum(p is not None for p in enc.positions)
            out.append(values[start : start + count])
            start += count
        return out

    def _plus_probs(self, ids: Any, rows: list[int], cols: list[int], torch: Any):
        index_r = torch.tensor(rows, dtype=torch.long, device=self.device)
        index_c = torch.tensor(cols, dtype=torch.long, device=self.device)
        if self._decoder is None:  # models without a separable head: full logits
            logits = self.model(input_ids=ids).logits[index_r, index_c]
            logits = logits.float()
            if self.format.softmax == "pair":
                logits = logits[:, [self.plus_id, self.minus_id]]
                return torch.softmax(logits, dim=-1)[:, 0].cpu()
            return torch.softmax(logits, dim=-1)[:, self.plus_id].cpu()
        hidden = self._hidden(ids)[index_r, index_c]
        if self.format.softmax == "pair":
            logits = hidden.float() @ self._pair_weight.T
            if self._pair_bias is not None:
                logits = logits + self._pair_bias
            return torch.softmax(self._finish(logits), dim=-1)[:, 0].cpu()
        logits = self._finish(self._head(hidden).float())
        return torch.softmax(logits, dim=-1)[:, self.plus_id].cpu()
