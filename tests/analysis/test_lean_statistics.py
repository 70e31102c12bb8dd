"""The statistics load scipy.stats only for the tests that need it (#39: start-up), and the
replacements give scipy's numbers bit for bit."""

from __future__ import annotations

import numpy as np
from scipy import special, stats

from clinjudge.analysis._ppi import _Z95, _z
from clinjudge.analysis._stats import _average_ranks


def test_the_95_percent_normal_quantile_is_scipys() -> None:
    assert _Z95 == special.ndtri(0.975) == stats.norm.ppf(0.975)
    assert _z(0.05) == _Z95
    assert _z(0.1) == stats.norm.ppf(0.95)


def test_average_ranks_are_scipys_rankdata() -> None:
    rng = np.random.default_rng(0)
    for _ in range(500):
        levels = int(rng.integers(1, 8))
        values = rng.integers(0, levels, size=int(rng.integers(1, 40))) * 0.5
        assert np.array_equal(_average_ranks(values), stats.rankdata(values))


def test_f_and_t_quantiles_are_scipy_stats() -> None:
    for dfn, dfd in ((1, 1), (2, 7.5), (9, 40), (39, 3.2)):
        assert special.fdtri(dfn, dfd, 0.975) == stats.f.ppf(0.975, dfn, dfd)
    for df in (1, 2.5, 30):
        assert special.stdtrit(df, 0.975) == stats.t.ppf(0.975, df)
