"""Wilcoxon's signed-rank test without scipy.stats (#39: start-up): the statistic and p-value are
scipy's bit for bit, and `judge agree` on a small store no longer loads scipy.stats."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from clinjudge.analysis._stats import (
    _exact_signed_rank_p,
    _normal_signed_rank_p,
    _signed_rank_sums,
    wilcoxon_paired,
)
from tests.cli._helpers import invoke

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ZERO_METHODS = ("wilcox", "pratt", "zsplit")


def _pairs(seed: int, count: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Paired samples of every kind the statistics meet: judge-like scores 1-5 (many ties and
    zeros), half points, continuous values (no ties), and continuous values with some zeros; from
    1 to 120 pairs."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        n = int(rng.choice([rng.integers(1, 14), rng.integers(14, 51), rng.integers(51, 121)]))
        kind = i % 4
        if kind == 0:
            x = rng.integers(1, 6, n).astype(float)
            y = rng.integers(1, 6, n).astype(float)
        elif kind == 1:
            x = rng.integers(2, 11, n) * 0.5
            y = np.clip(x + rng.integers(-2, 3, n) * 0.5, 1, 5)
        else:
            x = rng.normal(3, 1, n)
            y = x + rng.normal(0.2, 1, n)
            if kind == 3:  # some zero differences among untied ones
                y = np.where(rng.random(n) < 0.2, x, y)
        yield x, y


def _scipy(x: np.ndarray, y: np.ndarray, zero_method: str, method: str) -> tuple[float, float]:
    with np.errstate(all="ignore"):
        test = stats.wilcoxon(x, y, zero_method=zero_method, method=method)
    return float(test.statistic), float(test.pvalue)


@pytest.mark.parametrize("zero_method", ZERO_METHODS)
def test_normal_approximation_is_scipys_bit_for_bit(zero_method: str) -> None:
    for x, y in _pairs(1, 400):
        diff = x - y
        if not diff.any():
            continue
        sums = _signed_rank_sums(diff, zero_method)
        statistic, p = _scipy(x, y, zero_method, "asymptotic")
        assert min(sums.r_plus, sums.r_minus) == statistic
        assert _normal_signed_rank_p(sums) == p, (zero_method, diff.tolist())


def test_exact_distribution_is_scipys_bit_for_bit() -> None:
    rng = np.random.default_rng(2)
    for n in range(1, 51):
        magnitudes = rng.permutation(n) + 1.0 + rng.random()  # distinct, so ranks 1..n
        for _ in range(12):
            diff = magnitudes * np.where(rng.random(n) < rng.random(), -1.0, 1.0)
            r_plus = _signed_rank_sums(diff, "wilcox").r_plus
            assert _exact_signed_rank_p(n, r_plus) == _scipy(diff, 0 * diff, "wilcox", "exact")[1]
    # Both tails and the middle, where the doubled tail is capped at 1.
    for n in (1, 2, 7, 20):
        for r_plus in range(n * (n + 1) // 2 + 1):
            ranks = _ranks_summing_to(n, r_plus)
            diff = np.where(np.isin(np.arange(1, n + 1), ranks), 1.0, -1.0) * np.arange(1, n + 1)
            assert _exact_signed_rank_p(n, r_plus) == _scipy(diff, 0 * diff, "wilcox", "exact")[1]


def _ranks_summing_to(n: int, total: int) -> list[int]:
    """Distinct ranks from 1..n that sum to ``total`` (greedy from the largest)."""
    chosen = []
    for rank in range(n, 0, -1):
        if rank <= total:
            chosen.append(rank)
            total -= rank
    assert total == 0
    return chosen


@pytest.mark.parametrize("zero_method", ZERO_METHODS)
def test_wilcoxon_paired_matches_scipy_for_the_method_it_picks(zero_method: str) -> None:
    picked = set()
    for x, y in _pairs(3, 400):
        result = wilcoxon_paired(x, y, zero_method=zero_method)
        picked.add(result["method"])
        if result["method"] == "degenerate":
            continue
        method = "asymptotic" if result["method"] == "permutation" else result["method"]
        statistic, p = _scipy(x, y, zero_method, method)
        assert result["statistic"] == statistic
        if result["method"] != "permutation":  # computed by enumeration here, as before
            assert result["p"] == p, (zero_method, (x - y).tolist())
    expected = {"exact", "asymptotic", "degenerate"}
    assert picked >= (expected if zero_method == "zsplit" else expected | {"permutation"})


def test_judge_agree_on_a_small_store_loads_no_scipy_stats(db_path: Path) -> None:
    db = ["--db", str(db_path)]
    ran = invoke(
        "run", "--model", "mock/judge", "--data", str(EXAMPLES / "pdsqi9_demo.jsonl"),
        *db, "--no-progress",
    )  # fmt: skip
    assert ran.exit_code == 0, ran.stderr
    run_id = ran.stdout.strip().splitlines()[-1]
    ratings = invoke("ratings", "import", str(EXAMPLES / "pdsqi9_demo_ratings.jsonl"), *db)
    assert ratings.exit_code == 0, ratings.stderr
    probe = (
        "import sys\nfrom clinjudge.cli import main\nsys.argv = ['judge', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print('scipy.stats' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "agree", run_id, "--json", *db],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert done.stderr.strip().splitlines()[-1] == "False"
    # The tests were made (not skipped as degenerate): the loaded path is the one exercised.
    methods = {m for m in _wilcoxon_methods(json.loads(done.stdout))}
    assert methods & {"exact", "asymptotic", "permutation"}


def _wilcoxon_methods(tree: object) -> Iterator[str]:
    """Every Wilcoxon block's ``method`` in a JSON tree."""
    if isinstance(tree, dict):
        if "zero_method" in tree and "method" in tree:
            yield str(tree["method"])
        for value in tree.values():
            yield from _wilcoxon_methods(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _wilcoxon_methods(value)
