"""Tiny Llama-style PRM checkpoints built and saved inside the tests (no downloads).

The tokenizer is character-level (every printable ASCII character is a token) plus the preset's
special tokens and label pieces, with a BOS post-processor and a small chat template, so it goes
through the same ``AutoTokenizer``/``AutoModelForCausalLM`` path as a real checkpoint.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tests.requirements import optional_module

# Stand-ins when the `prm` extra is absent: a test that builds a model skips (fails under CI),
# and the modules that import this one still collect.
torch = optional_module("torch")
tokenizers = optional_module("tokenizers")
transformers = optional_module("transformers")

HIDDEN = 32
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}[end]"
    "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
)
RESERVED = [f"<|reserved_special_token_{n}|>" for n in range(1, 9)]


def build_tokenizer(special: list[str], pieces: list[str]) -> transformers.PreTrainedTokenizerFast:
    """A character-level fast tokenizer with ``special`` tokens and extra ``pieces``."""
    words = ["<pad>", "<s>", "</s>", "<unk>"] + [chr(c) for c in range(32, 127)]
    vocab = {w: i for i, w in enumerate(words)}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Split(pattern="", behavior="isolated")
    core.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", vocab["<s>"])]
    )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    if special:
        tokenizer.add_special_tokens({"additional_special_tokens": special})
    if pieces:
        tokenizer.add_tokens(pieces)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(vocab_size: int, seed: int = 0) -> transformers.LlamaForCausalLM:
    """A randomly initialised 2-layer Llama."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab_size,
        max_position_embeddings=2048,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return transformers.LlamaForCausalLM(config).eval()


PRESET_TOKENS: dict[str, tuple[list[str], list[str]]] = {
    "medprm": ([" ки"], [" +", " -"]),
    "math-shepherd": ([], [" ки"]),
    "prm-clinic": (RESERVED, []),
}


def save_tiny(
    path: Path, preset: str, seed: int = 0
) -> tuple[transformers.PreTrainedTokenizerFast, transformers.LlamaForCausalLM]:
    """Build and save a tiny checkpoint for ``preset`` under ``path``."""
    special, pieces = PRESET_TOKENS[preset]
    tokenizer = build_tokenizer(special, pieces)
    model = build_model(len(tokenizer), seed)
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return tokenizer, model


def isolate_positions(model: transformers.LlamaForCausalLM) -> None:
    """Zero every layer's output projections: the final hidden state at a position is then
    the RMS-normalised embedding of the token at that position."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)


def save_exact_medprm(path: Path, a: float = 1.7, seed: int = 1) -> float:
    """A Med-PRM-style checkpoint whose P(+) at every tag is sigmoid(a / sqrt(1 + eps));
    returns that probability."""
    import math

    tokenizer, model = save_tiny(path, "medprm", seed=seed)
    isolate_positions(model)
    tag = tokenizer.convert_tokens_to_ids(" ки")
    plus = tokenizer(" +", add_special_tokens=False)["input_ids"][0]
    minus = tokenizer(" -", add_special_tokens=False)["input_ids"][0]
    u = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(HIDDEN)])
    with torch.no_grad():
        model.model.embed_tokens.weight[tag] = u
        model.lm_head.weight[plus] = a * u / HIDDEN
        model.lm_head.weight[minus] = 0.0
    model.save_pretrained(path)
    return 1 / (1 + math.exp(-a / math.sqrt(1 + model.config.rms_norm_eps)))


def set_kind_logits(
    model: transformers.LlamaForCausalLM, tokenizer: Any, logits: dict[int, float]
) -> None:
    """Give the '+' label logit ``logits[n]`` at reserved kind token n (one hidden dimension
    each), and 0 everywhere else; call after :func:`isolate_positions`.

    Args:
        model: A tiny PRM-Clinic-shaped model.
        tokenizer: Its tokenizer.
        logits: Reserved token number (1-based) to the '+' logit read at it.
    """
    plus = tokenizer.convert_tokens_to_ids(RESERVED[6])
    with torch.no_grad():
        model.lm_head.weight.zero_()
        for dim, (n, logit) in enumerate(logits.items()):
            onehot = torch.zeros(HIDDEN)
            onehot[dim] = math.sqrt(HIDDEN)
            model.model.embed_tokens.weight[tokenizer.convert_tokens_to_ids(RESERVED[n - 1])] = (
                onehot
            )
            model.lm_head.weight[plus, dim] = logit / math.sqrt(HIDDEN)
