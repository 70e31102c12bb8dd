"""Entailment by a Hugging Face sequence-classification NLI model (premise, hypothesis).

Any checkpoint whose config names an entailment label in ``id2label`` works (MNLI-style
three-way models, two-way entailment models). Long premises are cut into overlapping token
windows and the hypothesis is entailed if any window entails it (max over windows); DocLens's
compatibility mode instead keeps only the first N words of the premise (500 in DocLens).

torch and transformers come with the optional ``prm`` extra and are imported only when a model
is loaded; a model is loaded once per process and shared.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clinjudge.errors import ClinJudgeError

_LOCK = threading.Lock()
_CACHE: dict[tuple[str, str], NLIModel] = {}


class NLIError(ClinJudgeError, RuntimeError):
    """The NLI model cannot be loaded or used."""


def _entailment_index(id2label: dict[Any, str]) -> int:
    labels = {int(k): str(v).lower() for k, v in id2label.items()}
    exact = [i for i, name in labels.items() if name in ("entailment", "entailed", "entail")]
    if exact:
        return exact[0]
    partial = [i for i, name in labels.items() if "entail" in name and "not" not in name]
    if len(partial) == 1:
        return partial[0]
    raise NLIError(
        f"cannot find the entailment label in the model's id2label {labels}; the model config "
        "must name one label 'entailment'"
    )


def truncate_words(text: str, limit: int | None) -> str:
    """The first ``limit`` whitespace-separated words of a text (all of it when None)."""
    if limit is None:
        return text
    words = text.split()
    return text if len(words) <= limit else " ".join(words[:limit])


@dataclass
class NLIModel:
    """A loaded NLI model.

    Args:
        model: The torch model.
        tokenizer: Its tokenizer.
        entailment: Index of the entailment label.
        device: Torch device.
        max_length: Tokens per input.
        stride: Tokens shared by consecutive premise windows.
        batch_size: Inputs per forward pass.
        truncate: Keep only the first N premise words (DocLens mode); None chunks instead.
    """

    model: Any
    tokenizer: Any
    entailment: int
    device: str
    max_length: int
    stride: int = 128
    batch_size: int = 16
    truncate: int | None = None

    def _fit_hypothesis(self, hypothesis: str) -> str:
        ids = self.tokenizer(hypothesis, add_special_tokens=False)["input_ids"]
        room = self.max_length // 2
        return hypothesis if len(ids) <= room else self.tokenizer.decode(ids[:room])

    def _batch_probs(self, premises: list[str], hypotheses: list[str]) -> list[float]:
        import torch

        tok = self.tokenizer
        hypotheses = [self._fit_hypothesis(h) for h in hypotheses]
        args: dict[str, Any] = {
            "truncation": "only_first",
            "max_length": self.max_length,
            "padding": True,
            "return_tensors": "pt",
        }
        if self.truncate is None:
            longest = max(len(tok(h, add_special_tokens=False)["input_ids"]) for h in hypotheses)
            room = self.max_length - tok.num_special_tokens_to_add(pair=True) - longest
            args["return_overflowing_tokens"] = True
            args["stride"] = max(0, min(self.stride, room // 2))
        encoded = tok(premises, hypotheses, **args)
        owners = encoded.pop("overflow_to_sample_mapping", None)
        inputs = {k: v.to(self.device) for k, v in encoded.items() if k in tok.model_input_names}
        best = [0.0] * len(premises)
        rows = inputs["input_ids"].shape[0]
        for start in range(0, rows, self.batch_size):
            part = {k: v[start : start + self.batch_size] for k, v in inputs.items()}
            with torch.no_grad():
                logits = self.model(**part).logits.float()
            probs = torch.softmax(logits, dim=-1)[:, self.entailment].tolist()
            for offset, prob in enumerate(probs):
                owner = int(owners[start + offset]) if owners is not None else start + offset
                best[owner] = max(best[owner], prob)
        return best

    def entailment_probs(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
        """P(entailment) per (premise, hypothesis): the max over premise windows, or of the
        truncated premise in DocLens mode.

        Args:
            premises: Premise texts.
            hypotheses: Hypothesis texts, one per premise.
        """
        if len(premises) != len(hypotheses):
            raise ValueError("premises and hypotheses must pair up")
        cut = [truncate_words(p, self.truncate) or " " for p in premises]
        probs: list[float] = []
        for start in range(0, len(cut), self.batch_size):
            end = start + self.batch_size
            probs.extend(self._batch_probs(cut[start:end], list(hypotheses[start:end])))
        return probs


def load_nli(
    name: str,
    *,
    device: str = "cpu",
    max_length: int | None = None,
    stride: int = 128,
    batch_size: int = 16,
    truncate: int | None = None,
) -> NLIModel:
    """Load (once per process) an NLI checkpoint from a path or the Hugging Face hub.

    Args:
        name: Path or hub id of a sequence-classification checkpoint.
        device: Torch device.
        max_length: Tokens per input (default: the tokenizer's limit, at most 512).
        stride: Tokens shared by consecutive premise windows.
        batch_size: Inputs per forward pass.
        truncate: Keep only the first N premise words (DocLens mode).
    """
    with _LOCK:
        cached = _CACHE.get((name, device))
        if cached is None:
            cached = _CACHE[(name, device)] = _load(name, device)
    positions = getattr(cached.model.config, "max_position_embeddings", None) or 512
    tokenizer_limit = getattr(cached.tokenizer, "model_max_length", None) or 512
    limit = max_length or min(tokenizer_limit, positions, 512)
    return NLIModel(
        cached.model,
        cached.tokenizer,
        cached.entailment,
        device,
        limit,
        stride=stride,
        batch_size=batch_size,
        truncate=truncate,
    )


def _load(name: str, device: str) -> NLIModel:
    try:
        import torch  # noqa: F401
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
    except ImportError as exc:
        raise NLIError(
            "an NLI model needs torch and transformers: pip install 'clinjudge[prm]'"
        ) from exc
    local = Path(name).expanduser()
    if name.startswith(("/", "./", "../", "~")) and not local.is_dir():
        raise NLIError(f"cannot load NLI model {name!r}: no such directory")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModelForSequenceClassification.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise NLIError(f"cannot load NLI model {name!r}: {exc}") from exc
    try:
        model.eval().to(device)
    except (RuntimeError, AssertionError, ValueError) as exc:
        raise NLIError(f"cannot move NLI model {name!r} to device {device!r}: {exc}") from exc
    entailment = _entailment_index(model.config.id2label)
    return NLIModel(model, tokenizer, entailment, device, 512)
