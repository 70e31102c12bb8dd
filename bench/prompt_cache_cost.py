"""What provider prompt caching saves on the demo's 7-sample PDSQI-9 run (issue #22, part 2).

Renders every prompt of the demo run (clinjudge/demo/pdsqi9_demo.jsonl, 10 items, ``--samples
7``) with the real renderer, counts tokens with tiktoken (o200k_base, offline: litellm's bundled
encodings), and prices the run at published list prices with and without the provider's prompt
cache, through the same estimate ``judge run --dry-run`` prints:

* OpenAI (gpt-4o-mini, gpt-4.1): prefixes of 1,024+ tokens are cached on their own; a request
  whose prompt repeats an earlier one (the same item's next sample) or shares its system prompt
  (another item) reads that prefix at the cached-input price (50% of input for gpt-4o-mini, 25%
  for gpt-4.1), in 128-token steps.
* Anthropic (claude-sonnet-4-5): clinjudge marks the system prompt with ``cache_control``; the
  first request writes it (1.25x input), every later one reads it (0.1x input).

Two prompt layouts: the demo's own (5 shots drawn per item and sample, so each sample's prompt
differs after the system prompt) and zero-shot (every sample of an item repeats the whole
prompt). Output tokens are taken as 150 per call (a PDSQI-9 reply with a short rationale), the
same with and without caching. Prices come from litellm's bundled price map, the published list
prices (checked against openai.com/api/pricing and Anthropic's pricing page in
tests/judges/clients/test_prompt_cache.py). The cached share is an estimate: each request is
assumed to find the earlier ones' prefixes still cached.

Usage: python bench/prompt_cache_cost.py [--samples 7] [--output-tokens 150]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from clinjudge import estimate  # noqa: E402 - after the offline environment is set
from clinjudge.judges import ModelSettings, token_prices  # noqa: E402

DEMO = ROOT / "clinjudge" / "demo"
MODELS = ("openai/gpt-4o-mini", "openai/gpt-4.1", "anthropic/claude-sonnet-4-5")
LAYOUTS = {"demo (5 shots per sample)": 5, "zero-shot": 0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--output-tokens", type=int, default=150)
    args = parser.parse_args(argv)
    header = (
        f"{'layout':<27} {'model':<28} {'calls':>5} {'prompt tok':>10} {'cached':>8} "
        f"{'share':>6} {'writes':>6} {'no cache $':>10} {'cached $':>9} {'saving':>7}"
    )
    print(f"demo PDSQI-9 run, {args.samples} samples, {args.output_tokens} output tokens/call")
    print(header)
    print("-" * len(header))
    for layout, shots in LAYOUTS.items():
        for model in MODELS:
            prices = token_prices(ModelSettings(model=model))
            assert prices is not None, model
            est = estimate(
                str(DEMO / "pdsqi9_demo.jsonl"),
                model=model,
                samples=args.samples,
                shots=shots,
                shot_pool=str(DEMO / "pdsqi9_shots.jsonl") if shots else None,
                seed=0,
            )
            cached = est.cached_input_tokens or 0
            writes = est.cache_write_tokens
            completion = est.prompts * args.output_tokens
            plain = prices.cost(est.prompt_tokens, completion)
            with_cache = prices.cost(est.prompt_tokens, completion, cached, writes)
            print(
                f"{layout:<27} {model:<28} {est.prompts:>5} {est.prompt_tokens:>10,} "
                f"{cached:>8,} {cached / est.prompt_tokens:>6.0%} {writes:>6,} "
                f"{plain:>10.4f} {with_cache:>9.4f} {1 - with_cache / plain:>7.0%}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
