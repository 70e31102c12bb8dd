"""PRM scoring throughput (SPEC section 7).

(a) CPU, a small Llama-style PRM (a few million parameters) with a byte-level BPE tokenizer
    trained here on synthetic clinical text (nothing downloaded), saved to disk and loaded like a
    checkpoint: scoring every step of chains of 10 steps in one forward pass per chain (chains
    batched by the scorer), against re-encoding each step's prefix (one forward pass per step,
    the naive way). Both go through the same scorer; the per-prefix scores must equal the
    single-pass ones (causal attention). Torch runs on ``--threads`` threads (default 2, the
    cores of a small machine; more threads than cores inflates the ratio). Target: >= 5x.
(b) GPU only: a randomly initialised model with Llama-3.1-8B's shape in bf16 scores 64 notes of
    ~4k tokens (Med-PRM format, full render/tokenize/batch path). Reports tokens/s and model FLOP
    utilisation = 2 x params x tokens / time / peak, also without the embedding and head (the
    honest figure: the scorer runs two rows of the head). Target: >= 40% on an H100. Skipped, with a
    message, when CUDA is absent (``--shape tiny --device cpu`` runs the same code as a check).
(c) ``--ray``: the same chains scored in this process and through ``score_on_ray`` (a local Ray,
    one replica, the model loaded from disk by the replica), one run each: tokens/s of both,
    their ratio (Ray / one process) end to end (Ray's start-up apart, reported on its own) and
    in forward time, and whether the scores are equal to the last bit. On CPU with the tiny
    model the figure is Ray's fixed overhead (actor start, model load, transport); on a GPU
    (``--device cuda --ray-shape llama-3.1-8b``) the target is >= 0.9x.

Usage: python bench/prm_throughput.py [--part a|b|both] [--chains 16] [--threads 2] [--notes 64]
       python bench/prm_throughput.py --ray [--device cpu] [--ray-chains 96] [--ray-shape tiny]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from tokenizers import (  # noqa: E402
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    processors,
    trainers,  # noqa: E402
)
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from clinjudge.prm_bridge import Chain, Step, TransformersPRM, make_format  # noqa: E402
from tests.prm_bridge._tiny import CHAT_TEMPLATE, build_tokenizer  # noqa: E402

# Dense bf16 peak (no sparsity), by device name fragment.
PEAK_TFLOPS = {"H100 PCIe": 756.0, "H100": 989.4, "H200": 989.4, "A100": 312.0, "L40S": 362.0}
LLAMA_31_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
}
SMALL_SHAPE = {  # ~7M parameters with the 4,096-token BPE vocabulary
    "hidden_size": 256,
    "intermediate_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 8192,
}
TINY_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 8192,
}

SENTENCE = "The patient reports chest pain on exertion relieved by rest, so angina is likely. "


WORDS = [
    "patient",
    "reports",
    "chest",
    "pain",
    "dyspnea",
    "exertion",
    "rest",
    "angina",
    "troponin",
    "negative",
    "ecg",
    "sinus",
    "rhythm",
    "hypertension",
    "diabetes",
    "metformin",
    "lisinopril",
    "insulin",
    "glucose",
    "hba1c",
    "creatinine",
    "renal",
    "function",
    "follow",
    "up",
    "clinic",
    "cardiology",
    "referral",
    "stress",
    "test",
    "echocardiogram",
    "ejection",
    "fraction",
    "normal",
    "assessment",
    "plan",
    "continue",
    "monitor",
    "titrate",
    "dose",
    "daily",
    "twice",
    "mg",
    "history",
    "allergies",
    "none",
    "known",
    "fever",
    "cough",
    "sputum",
    "pneumonia",
    "antibiotics",
    "amoxicillin",
    "chest",
    "x-ray",
    "infiltrate",
    "lobe",
    "right",
    "left",
    "abdominal",
    "pain",
    "nausea",
    "vomiting",
    "appendicitis",
    "ct",
    "scan",
    "surgery",
    "consult",
    "discharged",
    "stable",
    "home",
    "the",
    "a",
    "an",
    "of",
    "on",
    "in",
    "for",
    "with",
    "by",
    "to",
    "and",
    "or",
    "so",
    "is",
    "was",
    "are",
    "likely",
    "relieved",
    "reasoning",
    "case",
    "step",
    "because",
    "therefore",
    "which",
    "suggests",
    "given",
    "without",
    "after",
    "before",
    "since",
    "shows",
    "denies",
    "presents",
]  # noqa: SIM905


def _corpus(lines: int, seed: int = 0) -> list[str]:
    """Synthetic clinical sentences with numbers and punctuation, for training the tokenizer."""
    import random

    rng = random.Random(seed)
    out = []
    for n in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 18))]
        if rng.random() < 0.5:
            words.insert(rng.randrange(len(words)), f"{rng.randint(1, 250)}/{rng.randint(40, 120)}")
        text = " ".join(words).capitalize()
        out.append(f"{text}, so {rng.choice(WORDS)} is likely. Case {n}: Reasoning {n % 20}.")
    return out


def build_bpe_tokenizer(
    special: list[str], pieces: list[str], vocab_size: int = 4096, extra_text: list[str] = ()
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (GPT-2/Llama-3 style) trained on synthetic clinical text,
    with the preset's special tokens and label pieces, a BOS post-processor and a chat
    template, so it goes through the same path as a real checkpoint's tokenizer."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator([*_corpus(20_000), *extra_text], trainer=trainer)
    core.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", core.token_to_id("<s>"))]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        unk_token="<unk>",
    )  # fmt: skip
    if special:
        tokenizer.add_special_tokens({"additional_special_tokens": special})
    if pieces:
        tokenizer.add_tokens(pieces)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _chain(n: int, steps: int, question_chars: int, step_chars: int) -> Chain:
    question = (f"Case {n}: " + SENTENCE * (question_chars // len(SENTENCE) + 1))[:question_chars]
    texts = [
        (f"Reasoning {k} for case {n}: " + SENTENCE * (step_chars // len(SENTENCE) + 1))[
            :step_chars
        ]
        for k in range(steps)
    ]
    return Chain(id=f"c{n}", steps=[Step(text=t) for t in texts], question=question)


def _median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def part_a(args: argparse.Namespace) -> None:
    """Single pass versus per-prefix re-encoding on CPU."""
    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    tokenizer = build_bpe_tokenizer([" ки"], [" +", " -"])
    torch.manual_seed(0)
    config = LlamaConfig(**SMALL_SHAPE, vocab_size=len(tokenizer), pad_token_id=0)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        LlamaForCausalLM(config).save_pretrained(tmp)
        scorer = TransformersPRM(tmp, make_format("medprm"), device="cpu")
    chains = [_chain(n, 10, args.question_chars, args.step_chars) for n in range(args.chains)]
    prefixes = [
        c.model_copy(update={"steps": c.steps[:k], "candidate": f"p{k}"})
        for c in chains
        for k in range(1, len(c.steps) + 1)
    ]

    def single():
        return scorer.score(chains)

    def per_prefix_naive():
        return [scorer.score([p])[0] for p in prefixes]

    def per_prefix_batched():
        return scorer.score(prefixes)

    single()  # warm-up
    t_single, full = _median_time(single, args.repeats)
    t_naive, naive = _median_time(per_prefix_naive, args.repeats)
    t_batched, _ = _median_time(per_prefix_batched, args.repeats)
    flat_full = [s.score for r in full for s in r.steps]
    flat_prefix = [r.steps[-1].score for r in naive]
    diff = max(abs(a - b) for a, b in zip(flat_full, flat_prefix, strict=True))
    tokens = sum(r.n_tokens for r in full)
    prefix_tokens = sum(r.n_tokens for r in naive)
    import os

    print(f"## (a) CPU, {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} torch threads "
          f"(interop {torch.get_num_interop_threads()}) on {os.cpu_count()} cores")  # fmt: skip
    print(
        f"model: Llama {SMALL_SHAPE['num_hidden_layers']} layers x {SMALL_SHAPE['hidden_size']}, "
        f"{sum(p.numel() for p in scorer.model.parameters()) / 1e6:.2f}M params, float32, SDPA; "
        f"byte-level BPE tokenizer, {len(tokenizer)} tokens, trained here"
    )
    print(
        f"{args.chains} chains x 10 steps, {tokens / args.chains:.0f} tokens per chain; "
        f"per-prefix inputs hold {prefix_tokens / tokens:.2f}x the tokens"
    )
    print(
        f"| method | forward passes | seconds (median of {args.repeats}) | single pass speed-up |"
    )
    print("|---|---|---|---|")
    print(f"| single pass per chain (batched) | {args.chains} | {t_single:.3f} | 1.00x |")
    print(
        f"| per-prefix, one pass per step | {len(prefixes)} | {t_naive:.3f} | "
        f"{t_naive / t_single:.2f}x |"
    )
    print(
        f"| per-prefix, batched | {len(prefixes)} rows | {t_batched:.3f} | "
        f"{t_batched / t_single:.2f}x |"
    )
    print(f"max |single - per-prefix| step score difference: {diff:.2e}")


def _peak(name: str, override: float | None) -> float | None:
    if override:
        return override
    for fragment, tflops in PEAK_TFLOPS.items():  # the more specific fragment comes first
        if fragment in name:
            return tflops
    return None


def part_b(args: argparse.Namespace) -> None:
    """A random Llama-3.1-8B-shaped PRM in bf16 on GPU: tokens/s and FLOP utilisation."""
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("## (b) skipped: CUDA is not available on this machine (needs a GPU; "
              "`--shape tiny --device cpu` exercises the same code path).")  # fmt: skip
        return
    shape = LLAMA_31_8B if args.shape == "llama-3.1-8b" else TINY_SHAPE
    tokenizer = build_tokenizer([" ки"], [" +", " -"])
    config = LlamaConfig(**{"vocab_size": len(tokenizer), **shape}, pad_token_id=0)
    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    attn = args.attn
    if attn == "auto":
        import importlib.util

        attn = "flash_attention_2" if cuda and importlib.util.find_spec("flash_attn") else "sdpa"
    config._attn_implementation = attn
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(args.device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    embedding = model.model.embed_tokens.weight.numel() + model.lm_head.weight.numel()
    device_name = torch.cuda.get_device_name() if cuda else platform.processor() or "cpu"
    print(f"## (b) {device_name}, torch {torch.__version__}, {attn}, {dtype}")
    print(f"model: random {args.shape} shape, {params / 1e9:.3f}B params "
          f"({(params - embedding) / 1e9:.3f}B without embeddings and head)")  # fmt: skip
    # ~4k tokens per note: the character tokenizer makes one token per character
    chains = [
        _chain(n, 20, args.note_tokens - 2260 + (n * 37) % 400 - 200, 90) for n in range(args.notes)
    ]
    peak = _peak(device_name, args.peak_tflops)
    print("| batch tokens | notes | tokens | seconds | tokens/s | MFU (all params) | "
          "MFU (no embeddings) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for batch_tokens in args.batch_tokens:
        scorer = TransformersPRM.from_model(
            model, tokenizer, make_format("medprm"), batch_tokens=batch_tokens
        )
        try:
            scorer.score(chains[: max(1, args.notes // 8)])  # warm-up (kernels, allocator)
            if cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
            results = scorer.score(chains)
            if cuda:
                torch.cuda.synchronize()
            seconds = time.perf_counter() - started
        except torch.OutOfMemoryError:
            print(f"| {batch_tokens} | out of memory | | | | | |")
            torch.cuda.empty_cache()
            continue
        tokens = sum(r.n_tokens for r in results)
        rate = tokens / seconds
        if peak:
            mfu = f"{2 * params * rate / (peak * 1e12):.1%}"
            mfu_core = f"{2 * (params - embedding) * rate / (peak * 1e12):.1%}"
        else:
            mfu = mfu_core = "n/a (pass --peak-tflops)"
        print(f"| {batch_tokens} | {len(results)} | {tokens} | {seconds:.2f} | {rate:,.0f} | "
              f"{mfu} | {mfu_core} |")  # fmt: skip
    if peak:
        print(f"peak used: {peak} TFLOPS (dense bf16)")


def _save_ray_model(path: Path, shape: str, device: str) -> None:
    """A random checkpoint of ``shape`` with the Med-PRM character tokenizer, saved to disk."""
    special, pieces = [" ки"], [" +", " -"]
    tokenizer = build_tokenizer(special, pieces)
    dims = {"tiny": TINY_SHAPE, "small": SMALL_SHAPE, "llama-3.1-8b": LLAMA_31_8B}[shape]
    config = LlamaConfig(**{**dims, "vocab_size": max(len(tokenizer), 128)})
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # an 8B shape is built in bf16 directly, not via fp32
    try:
        # On a GPU the random weights are drawn there: an 8B shape takes minutes on a CPU.
        with torch.device(device):
            model = LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(previous)
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)


def _child_command(args: argparse.Namespace, folder: str, out: Path) -> list[str]:
    return [
        sys.executable, __file__, "--ray-child", folder, "--ray-child-out", str(out),
        "--ray-chains", str(args.ray_chains), "--question-chars", str(args.question_chars),
        "--step-chars", str(args.step_chars), "--threads", str(args.threads),
        "--device", args.device, "--ray-batch-tokens", str(args.ray_batch_tokens),
    ]  # fmt: skip


def ray_child(args: argparse.Namespace) -> None:
    """The one-process path in a fresh process (imports, device start, load, scoring), as a
    user's ``judge prm score`` meets it; writes the scores for the parent to compare."""
    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    chains = [_chain(n, 10, args.question_chars, args.step_chars) for n in range(args.ray_chains)]
    scorer = TransformersPRM(
        args.ray_child, make_format("medprm"), device=args.device,
        batch_tokens=args.ray_batch_tokens,
    )  # fmt: skip
    results = scorer.score(chains)
    Path(args.ray_child_out).write_text(
        json.dumps({
            "scores": [[s.score for s in r.steps] for r in results],
            "tokens": sum(r.n_tokens for r in results),
            "forward_s": sum(r.latency_s for r in results),
        })
    )  # fmt: skip


def _ray_scores(args: argparse.Namespace, folder: str, chains: list[Chain]) -> tuple:
    import ray

    from clinjudge.prm_bridge import RayOptions, ScorerSpec, score_on_ray

    started = time.perf_counter()
    ray.init(num_cpus=max(args.threads, 1), include_dashboard=False, log_to_driver=False)
    init_s = time.perf_counter() - started
    try:
        spec = ScorerSpec(
            folder, make_format("medprm"), device=args.device, batch_tokens=args.ray_batch_tokens
        )
        options = RayOptions(replicas=1, batch_size=args.ray_batch)
        results: dict[int, Any] = {}
        started = time.perf_counter()
        for part in score_on_ray(chains, spec, options):
            results.update(part)
        ray_s = time.perf_counter() - started
    finally:
        ray.shutdown()
    return init_s, ray_s, [results[i] for i in range(len(chains))], ray.__version__


def part_ray_fresh(args: argparse.Namespace) -> None:
    """Ray against the one-process path run as a fresh process: both pay one process start,
    imports, the device's start and the model load once (Ray's ``ray.init`` reported apart)."""
    hf_logging.set_verbosity_error()
    chains = [_chain(n, 10, args.question_chars, args.step_chars) for n in range(args.ray_chains)]
    with tempfile.TemporaryDirectory() as folder:
        _save_ray_model(Path(folder), args.ray_shape, args.device)
        out = Path(folder) / "child.json"
        started = time.perf_counter()
        subprocess.run(_child_command(args, folder, out), check=True)
        child_s = time.perf_counter() - started
        child = json.loads(out.read_text())
        init_s, ray_s, ray_results, version = _ray_scores(args, folder, chains)
    tokens = child["tokens"]
    forward_ray = sum(r.latency_s for r in ray_results)
    equal = child["scores"] == [[s.score for s in r.steps] for r in ray_results]
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"## (c) Ray against a fresh one-process run, {device}, {args.ray_shape} model, "
          f"ray {version}, {len(chains)} chains, {tokens:,} tokens")  # fmt: skip
    print("| path | seconds | tokens/s | forward s | forward tokens/s |")
    print("|---|---|---|---|---|")
    print(f"| one process, fresh (start, imports, load, scoring) | {child_s:.2f} | "
          f"{tokens / child_s:,.0f} | {child['forward_s']:.2f} | "
          f"{tokens / child['forward_s']:,.0f} |")  # fmt: skip
    print(f"| Ray, 1 replica (actor start, imports, load, scoring; ray.init {init_s:.1f} s "
          f"apart) | {ray_s:.2f} | {tokens / ray_s:,.0f} | {forward_ray:.2f} | "
          f"{tokens / forward_ray:,.0f} |")  # fmt: skip
    print(f"ratio Ray / one process, tokens/s end to end: {child_s / ray_s:.2f}x; with "
          f"ray.init: {child_s / (ray_s + init_s):.2f}x; in forward time: "
          f"{child['forward_s'] / forward_ray:.2f}x; "
          f"scores equal to the last bit: {equal}")  # fmt: skip


def part_ray(args: argparse.Namespace) -> None:
    hf_logging.set_verbosity_error()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("## (c) Ray: skipped, CUDA is not available (pass --device cpu)")
        return
    fmt = make_format("medprm")
    # The replica gets --threads CPUs, and Ray gives its torch as many threads: the same here.
    torch.set_num_threads(args.threads)
    chains = [_chain(n, 10, args.question_chars, args.step_chars) for n in range(args.ray_chains)]
    with tempfile.TemporaryDirectory() as folder:
        _save_ray_model(Path(folder), args.ray_shape, args.device)
        started = time.perf_counter()
        scorer = TransformersPRM(
            folder, fmt, device=args.device, batch_tokens=args.ray_batch_tokens
        )
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        scorer.score(chains[:2])  # warm-up, as the replica's first batch is not
        warm_s = time.perf_counter() - started
        started = time.perf_counter()
        single = scorer.score(chains)
        single_s = time.perf_counter() - started
        del scorer
        init_s, ray_s, ray_results, version = _ray_scores(args, folder, chains)
    tokens = sum(r.n_tokens for r in single)
    forward_single = sum(r.latency_s for r in single)
    forward_ray = sum(r.latency_s for r in ray_results)  # type: ignore[attr-defined]
    equal = all(
        [s.score for s in a.steps] == [s.score for s in b.steps]  # type: ignore[attr-defined]
        for a, b in zip(single, ray_results, strict=True)
    )
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"## (c) Ray overhead, {device}, {args.ray_shape} model, ray {version}, "
          f"{len(chains)} chains, {tokens:,} tokens")  # fmt: skip
    print("| path | seconds | tokens/s | forward s | forward tokens/s |")
    print("|---|---|---|---|---|")
    print(
        f"| one process (model load {load_s:.1f} s apart) | {single_s:.2f} | "
        f"{tokens / single_s:,.0f} | {forward_single:.2f} | {tokens / forward_single:,.0f} |"
    )
    print(f"| Ray, 1 replica (actor start and model load included; ray.init {init_s:.1f} s "
          f"apart) | {ray_s:.2f} | {tokens / ray_s:,.0f} | {forward_ray:.2f} | "
          f"{tokens / forward_ray:,.0f} |")  # fmt: skip
    # Both paths as a user meets them: the model loaded, warmed up and every chain scored.
    single_total = load_s + warm_s + single_s
    print(f"| one process, model load and warm-up included | {single_total:.2f} | "
          f"{tokens / single_total:,.0f} | | |")  # fmt: skip
    print(f"ratio Ray / one process, both with model load: {single_total / ray_s:.2f}x")
    print(f"ratio Ray / one process, tokens/s end to end: {single_s / ray_s:.2f}x; "
          f"in forward time: {forward_single / forward_ray:.2f}x; "
          f"scores equal to the last bit: {equal}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["a", "b", "both"], default="both")
    parser.add_argument("--chains", type=int, default=16)
    parser.add_argument("--question-chars", type=int, default=400)
    parser.add_argument("--step-chars", type=int, default=80)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="(a): torch threads")
    parser.add_argument("--notes", type=int, default=64)
    parser.add_argument("--note-tokens", type=int, default=4096)
    parser.add_argument("--shape", choices=["llama-3.1-8b", "tiny"], default="llama-3.1-8b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--attn", default="auto")
    parser.add_argument("--batch-tokens", type=int, nargs="+", default=[16384, 32768, 65536])
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--ray", action="store_true", help="(c) only: Ray vs one process")
    parser.add_argument("--ray-chains", type=int, default=96)
    parser.add_argument("--ray-shape", choices=["tiny", "small", "llama-3.1-8b"], default="tiny")
    parser.add_argument("--ray-batch", type=int, default=32, help="(c): chains per Ray batch")
    parser.add_argument("--ray-batch-tokens", type=int, default=16384)
    parser.add_argument(
        "--ray-fresh-process", action="store_true",
        help="(c): the one-process path as a fresh process, so both pay start-up and loading",
    )  # fmt: skip
    parser.add_argument("--ray-child", help=argparse.SUPPRESS)
    parser.add_argument("--ray-child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ray_child:
        ray_child(args)
        return
    if args.ray and args.ray_fresh_process:
        part_ray_fresh(args)
        return
    if args.ray:
        part_ray(args)
        return
    if args.part in ("a", "both"):
        part_a(args)
    if args.part in ("b", "both"):
        part_b(args)


if __name__ == "__main__":
    main()
