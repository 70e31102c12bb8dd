"""Speed of the agreement analysis against the same analysis done with pingouin.

Two synthetic studies: the paper's shape (100 items x 11 attributes, 8 human raters, 7 judge
samples per item and attribute; 12 blocks) and a smaller one (40 items x 7 attributes, 7 raters,
7 samples; 8 blocks). ``analyse_ratings`` runs the full analysis per
attribute and pooled: six ICCs with CIs, Krippendorff's alpha at three levels with
1000-resample bootstrap CIs, Gwet's AC2, the primary ICC(3,k) of human median vs judge median
(with its own alpha and AC2), Wilcoxon tests, difference counts, and the 1000-resample judge
substitution (7 raters) and added-rater bootstraps.

The reference does the same blocks with pingouin.intraclass_corr for every ICC (one call per
resampled matrix in the bootstraps) and krippendorff.alpha for every alpha (one call per
resample). Gwet's AC2 and Wilcoxon have no slow library counterpart and are computed the same
way in both. A pingouin call costs ~15 ms, so the full reference (~72,000 calls) would take
about 20 minutes: by default it runs the first ``--ref-boot`` resamples of every bootstrap,
times the fixed part and the per-resample part separately, and extrapolates linearly to 1000
resamples (the per-resample cost is constant). ``--ref-boot 1000`` runs it in full. The
reference's ICCs on the shared resamples are checked against ours.

Targets: ours <= 1 s at the paper's shape, and >= 20x faster than the reference. Prints the
ratios (reference / ours, paper shape / small shape).

Usage: python bench/agreement_speed.py [--ref-boot 10] [--repeats 3] [--shape paper|small|both]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clinjudge.analysis._agreement import RatingRecord, analyse_ratings  # noqa: E402
from clinjudge.analysis._stats import (  # noqa: E402
    bootstrap_indices,
    gwet_ac2,
    icc_values_batch,
    wilcoxon_paired,
)

SHAPES = {"paper": (100, 11, 8, 7), "small": (40, 7, 7, 7)}  # items, attributes, raters, samples
N_BOOT = 1000
SEED = 0
CATEGORIES = [1.0, 2.0, 3.0, 4.0, 5.0]
LEVELS = ("nominal", "ordinal", "interval")


def make_study(
    n_items: int, n_attributes: int, n_humans: int, n_samples: int, seed: int = 1
) -> list[RatingRecord]:
    """Synthetic ratings: a latent quality per (item, attribute), rater biases, rounding."""
    rng = np.random.default_rng(seed)
    bias = rng.normal(0, 0.3, n_humans)
    records = []
    for a in range(n_attributes):
        attribute = f"attr{a + 1}"
        for i in range(n_items):
            truth = rng.normal(3.4, 0.9)
            for h in range(n_humans):
                score = np.clip(np.rint(truth + bias[h] + rng.normal(0, 0.7)), 1, 5)
                records.append(
                    RatingRecord(
                        unit_id=f"item{i}",
                        rater_id=f"human{h}",
                        score=float(score),
                        attribute=attribute,
                    )
                )
            for _ in range(n_samples):
                score = np.clip(np.rint(truth + 0.3 + rng.normal(0, 0.5)), 1, 5)
                records.append(
                    RatingRecord(
                        unit_id=f"item{i}",
                        rater_id="judge",
                        score=float(score),
                        attribute=attribute,
                    )
                )
    return records


def blocks_of(records: list[RatingRecord]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Human matrix and judge median per attribute, plus the pooled (item, attribute) block."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    frame = pd.DataFrame([r.model_dump() for r in records])
    for attribute, part in frame.groupby("attribute", sort=False):
        humans = part[part.rater_id != "judge"].pivot_table(
            index="unit_id", columns="rater_id", values="score", sort=False
        )
        judge = part[part.rater_id == "judge"].groupby("unit_id", sort=False).score.median()
        out[str(attribute)] = (humans.to_numpy(), judge.loc[humans.index].to_numpy())
    out["pooled"] = (
        np.vstack([h for h, _ in out.values()]),
        np.concatenate([j for _, j in out.values()]),
    )
    return out


def _long(matrix: np.ndarray) -> pd.DataFrame:
    n, k = matrix.shape
    return pd.DataFrame(
        {
            "unit": np.repeat(np.arange(n), k),
            "rater": np.tile(np.arange(k), n),
            "score": matrix.ravel(),
        }
    )


def pg_icc3k(matrix: np.ndarray) -> float:
    import pingouin

    table = pingouin.intraclass_corr(_long(matrix), targets="unit", raters="rater", ratings="score")
    return float(table.set_index("Type").at["ICC(C,k)", "ICC"])


def reference_block(
    humans: np.ndarray, judge: np.ndarray, ref_boot: int
) -> tuple[float, float, list[float]]:
    """The block's analysis with pingouin/krippendorff; returns (fixed s, per-resample s,
    pingouin ICC3k of the base matrix on the first resamples, for the equivalence check)."""
    import krippendorff
    import pingouin

    start = time.perf_counter()
    pingouin.intraclass_corr(_long(humans), targets="unit", raters="rater", ratings="score")
    median = np.median(humans, axis=1)
    pair = np.column_stack([median, judge])
    pingouin.intraclass_corr(_long(pair), targets="unit", raters="rater", ratings="score")
    for data in (humans, pair):
        for level in LEVELS:
            krippendorff.alpha(reliability_data=data.T, level_of_measurement=level)
        for weights in ("ordinal", "quadratic"):
            gwet_ac2(data, sorted({*CATEGORIES, *np.unique(data)}), weights)
    wilcoxon_paired(judge, median, "wilcox")
    wilcoxon_paired(judge, median, "pratt")
    np.unique(judge - median, return_counts=True)
    fixed = time.perf_counter() - start

    n, k = humans.shape
    draws = bootstrap_indices(n, N_BOOT, SEED)[:ref_boot]
    both = np.column_stack([humans, judge])
    base_values = []
    start = time.perf_counter()
    for draw in draws:
        # alpha CIs: one krippendorff call per level and per data set
        for data in (humans, pair):
            for level in LEVELS:
                krippendorff.alpha(reliability_data=data[draw].T, level_of_measurement=level)
        # substitution and added rater: one pingouin call per resampled matrix
        base = pg_icc3k(humans[draw])
        base_values.append(base)
        for col in range(k):
            swapped = humans[draw].copy()
            swapped[:, col] = judge[draw]
            pg_icc3k(swapped)
        pg_icc3k(both[draw])
    per_resample = (time.perf_counter() - start) / len(draws)
    return fixed, per_resample, base_values


def run_shape(name: str, ref_boot: int, repeats: int) -> tuple[float, float]:
    """Time ours and the reference on one study shape; returns (ours s, reference s)."""
    n_items, n_attributes, n_humans, n_samples = SHAPES[name]
    records = make_study(n_items, n_attributes, n_humans, n_samples)
    categories = {f"attr{a + 1}": CATEGORIES for a in range(n_attributes)}
    ours, ours_cpu = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        report = analyse_ratings(
            records, judge="judge", categories=categories, n_boot=N_BOOT, seed=SEED
        )
        ours.append(time.perf_counter() - start)
        ours_cpu.append(time.process_time() - cpu)
    ours_s = statistics.median(ours)

    fixed_total = 0.0
    per_resample_total = 0.0
    worst = 0.0
    blocks = blocks_of(records)
    for _name, (humans, judge) in blocks.items():
        fixed, per_resample, base_values = reference_block(humans, judge, ref_boot)
        fixed_total += fixed
        per_resample_total += per_resample
        draws = bootstrap_indices(humans.shape[0], N_BOOT, SEED)[:ref_boot]
        ours_values = icc_values_batch(humans[draws], "ICC3k")
        worst = max(worst, float(np.max(np.abs(ours_values - np.array(base_values)))))
    measured = fixed_total + per_resample_total * ref_boot
    reference_s = fixed_total + per_resample_total * N_BOOT

    pooled = report.to_dict()["pooled"]  # the --json layout
    print(
        f"[{name}] {n_items} items x {n_attributes} attributes, {n_humans} human raters, "
        f"{n_samples} judge samples; {N_BOOT} bootstrap resamples; {len(blocks)} blocks"
    )
    print(
        f"  pooled ICC3k humans {pooled['icc']['ICC3k']['value']:.3f}, primary ICC3k "
        f"{pooled['primary']['value']:.3f}, added-rater delta "
        f"{pooled['added_rater']['delta_icc']:+.4f} (p={pooled['added_rater']['p']:.3f})"
    )
    print(
        f"  ours (numpy): median {ours_s:.3f} s of {repeats} runs "
        f"({', '.join(f'{t:.3f}' for t in ours)}); CPU median {statistics.median(ours_cpu):.3f} s "
        "(all threads; the machine is shared, so wall time is noisy)"
    )
    print(
        f"  reference (pingouin + krippendorff): fixed {fixed_total:.2f} s, "
        f"{per_resample_total * 1000:.1f} ms per resample over all blocks; measured "
        f"{measured:.1f} s with {ref_boot} resamples"
    )
    label = "measured" if ref_boot >= N_BOOT else "extrapolated"
    print(f"  reference at {N_BOOT} resamples ({label}): {reference_s:.1f} s")
    print(f"  max |ICC3k ours - pingouin| on shared resamples: {worst:.2e}")
    return ours_s, reference_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ref-boot",
        type=int,
        default=10,
        help="resamples the reference actually runs (extrapolated to 1000)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of ours")
    parser.add_argument("--shape", choices=["paper", "small", "both"], default="both")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")

    warm = make_study(10, 2, 3, 2)
    analyse_ratings(warm, judge="judge", n_boot=10)  # warm imports and caches
    names = ["paper", "small"] if args.shape == "both" else [args.shape]
    results = {name: run_shape(name, args.ref_boot, args.repeats) for name in names}
    for name, (ours_s, reference_s) in results.items():
        ratio = reference_s / ours_s
        target = 1.0 if name == "paper" else 2.0
        print(
            f"[{name}] speed-up vs reference: {ratio:.0f}x (target >= 20x); ours {ours_s:.3f} s "
            f"(target <= {target:g} s): {'PASS' if ratio >= 20 and ours_s <= target else 'FAIL'}"
        )
    if len(results) == 2:
        paper, small = results["paper"][0], results["small"][0]
        cells = np.prod(SHAPES["paper"][:3]) / np.prod(SHAPES["small"][:3])
        print(
            f"paper / small time: {paper / small:.2f}x for {cells:.2f}x the (item, attribute, "
            "rater) cells"
        )


if __name__ == "__main__":
    main()
