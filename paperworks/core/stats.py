"""Intervals and tests for a difference between two methods, at the level where they were trained.

The evidence standard (see :mod:`paperworks.core.claims`) compares a method with a baseline on
*per-unit* values (a question, an episode, a draw) that sit inside *clusters* (the seed or
teacher a model was trained from). Units inside one cluster share that cluster's training run,
so they are not independent: the interval is taken over clusters.

- fewer than :data:`SMALL_SAMPLE` clusters: cluster means, then a Student-t interval
  (paired over shared clusters) or Welch's interval (independent clusters) — statsmodels;
- from :data:`SMALL_SAMPLE` clusters on: a two-level percentile bootstrap (resample clusters,
  then units inside each drawn cluster) — no library ships it, so it lives here and is tested
  by simulation (``tests/frame/test_stats.py``).

Everything is expressed on the *signed* difference ``d = s·(method − baseline)`` with ``s = +1``
when higher is better and ``−1`` otherwise, so "d > 0" always means "the method is better".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

SMALL_SAMPLE = 30  # below this many clusters: t intervals on cluster means; from it on: two-level bootstrap


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> dict[str, float]:
    """Mean with a Student-t confidence interval (n = 1 gives an unbounded interval)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        raise ValueError("mean_ci of an empty sequence")
    mean = float(x.mean())
    if len(x) == 1:
        return {"mean": mean, "std": 0.0, "ci_low": float("-inf"), "ci_high": float("inf"), "n": 1}
    from statsmodels.stats.weightstats import DescrStatsW  # imported here: ~1.5 s, and most stages never test

    lo, hi = DescrStatsW(x).tconfint_mean(alpha=1 - confidence)
    return {"mean": mean, "std": float(x.std(ddof=1)), "ci_low": float(lo), "ci_high": float(hi), "n": len(x)}


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion (well behaved at 0 and 1)."""
    if trials <= 0:
        return (0.0, 1.0)
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(successes, trials, alpha=1 - confidence, method="wilson")
    return (float(lo), float(hi))


@dataclass(frozen=True)
class DiffTest:
    """A signed difference (positive = method better), its interval and the three p-values.

    ``p_superiority`` is two-sided against 0; ``p_noninferiority`` one-sided against
    ``d ≤ −margin``; ``p_equivalence`` is the TOST p-value for ``|d| < margin`` (both are 1.0
    when no margin is given).
    """

    diff: float
    ci_low: float
    ci_high: float
    p_superiority: float
    p_noninferiority: float
    p_equivalence: float
    method: str


def _t_test(a: np.ndarray, b: np.ndarray, paired: bool, margin: float | None, confidence: float) -> DiffTest:
    """Cluster-mean t tests (a, b: one value per cluster, already signed)."""
    from statsmodels.stats.weightstats import CompareMeans, DescrStatsW, ttest_ind, ttost_ind, ttost_paired

    alpha = 1 - confidence
    if paired:
        d = a - b
        if len(d) < 2:
            return DiffTest(float(d.mean()), -np.inf, np.inf, 1.0, 1.0, 1.0, "paired t (needs ≥ 2 clusters)")
        ds = DescrStatsW(d)
        if d.std(ddof=1) == 0:  # every cluster moved by the same amount: the t statistic is undefined
            m = float(d.mean())
            p_sup = 1.0 if m == 0 else 0.0
            p_ni = 1.0 if margin is None else (0.0 if m > -margin else 1.0)
            p_eq = 1.0 if margin is None else (0.0 if -margin < m < margin else 1.0)
            return DiffTest(m, m, m, p_sup, p_ni, p_eq, "paired t (zero variance)")
        lo, hi = ds.tconfint_mean(alpha=alpha)
        p_sup = float(ds.ttest_mean(0.0, alternative="two-sided")[1])
        p_ni = p_eq = 1.0
        if margin is not None:
            p_ni = float(ds.ttest_mean(-margin, alternative="larger")[1])
            p_eq = float(ttost_paired(a, b, -margin, margin)[0])
        return DiffTest(float(d.mean()), float(lo), float(hi), p_sup, p_ni, p_eq, "paired t on cluster means")
    if len(a) < 2 or len(b) < 2:
        return DiffTest(float(a.mean() - b.mean()), -np.inf, np.inf, 1.0, 1.0, 1.0, "Welch t (needs ≥ 2 clusters per arm)")
    cm = CompareMeans(DescrStatsW(a), DescrStatsW(b))
    diff = float(a.mean() - b.mean())
    if a.var(ddof=1) + b.var(ddof=1) == 0:
        return DiffTest(diff, diff, diff, 1.0 if diff == 0 else 0.0,
                        1.0 if margin is None else float(diff <= -margin),
                        1.0 if margin is None else float(not -margin < diff < margin), "Welch t (zero variance)")
    lo, hi = cm.tconfint_diff(alpha=alpha, usevar="unequal")
    p_sup = float(ttest_ind(a, b, alternative="two-sided", usevar="unequal")[1])
    p_ni = p_eq = 1.0
    if margin is not None:
        p_ni = float(ttest_ind(a, b, alternative="larger", usevar="unequal", value=-margin)[1])
        p_eq = float(ttost_ind(a, b, -margin, margin, usevar="unequal")[0])
    return DiffTest(diff, float(lo), float(hi), p_sup, p_ni, p_eq, "Welch t on cluster means")


def _padded(groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Ragged clusters → (C × max_n array padded with 0, per-cluster counts)."""
    counts = np.array([len(g) for g in groups])
    out = np.zeros((len(groups), counts.max()))
    for i, g in enumerate(groups):
        out[i, : len(g)] = g
    return out, counts


def two_level_bootstrap_means(groups: list[np.ndarray], n_boot: int, rng: np.random.Generator,
                              clusters: np.ndarray | None = None) -> np.ndarray:
    """Bootstrap distribution of the mean of cluster means.

    Each replicate draws clusters with replacement, then units with replacement inside each
    drawn cluster, and averages the drawn clusters' means (every cluster weighs the same, as in
    the point estimate). ``clusters`` (n_boot × C indices) lets two arms share the cluster draw.
    """
    values, counts = _padded(groups)
    n_clusters = len(groups)
    if clusters is None:
        clusters = rng.integers(0, n_clusters, size=(n_boot, n_clusters))
    n = counts[clusters]                                           # (B, C) units in each drawn cluster
    width = values.shape[1]
    idx = np.floor(rng.random((n_boot, n_clusters, width)) * n[..., None]).astype(np.int64)
    drawn = values[clusters[..., None], idx]                       # (B, C, width)
    mask = np.arange(width)[None, None, :] < n[..., None]
    cluster_means = (drawn * mask).sum(axis=2) / n
    return cluster_means.mean(axis=1)


def _bootstrap_test(a_groups: list[np.ndarray], b_groups: list[np.ndarray], paired: bool, margin: float | None,
                    confidence: float, n_boot: int, seed: int) -> DiffTest:
    """Two-level percentile bootstrap of the signed difference; p-values by test inversion."""
    rng = np.random.default_rng(seed)
    point = float(np.mean([g.mean() for g in a_groups]) - np.mean([g.mean() for g in b_groups]))
    if paired:
        # units are paired inside each shared cluster: resample the per-unit differences
        boots = two_level_bootstrap_means([a - b for a, b in zip(a_groups, b_groups)], n_boot, rng)
        label = "two-level paired bootstrap (clusters, then unit pairs)"
    else:
        boots = (two_level_bootstrap_means(a_groups, n_boot, rng) - two_level_bootstrap_means(b_groups, n_boot, rng))
        label = "two-level bootstrap (clusters, then units; arms resampled independently)"
    lo, hi = np.quantile(boots, [(1 - confidence) / 2, (1 + confidence) / 2])

    def tail(pred: np.ndarray) -> float:
        return float((pred.sum() + 1) / (n_boot + 1))

    p_sup = min(1.0, 2 * min(tail(boots <= 0), tail(boots >= 0)))
    p_ni = p_eq = 1.0
    if margin is not None:
        p_ni = tail(boots <= -margin)
        p_eq = max(p_ni, tail(boots >= margin))
    return DiffTest(point, float(lo), float(hi), p_sup, p_ni, p_eq, f"{label}, {n_boot} resamples")


def compare_clustered(method: list[np.ndarray], baseline: list[np.ndarray], *, paired: bool, margin: float | None = None,
                      confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> DiffTest:
    """Signed method − baseline difference over clusters of units.

    ``method[i]`` and ``baseline[i]`` hold the (signed) unit values of cluster i. ``paired``:
    the arms share clusters (same seeds/teachers) and, inside a cluster, the same units in the
    same order. Unpaired: the clusters of the two arms are independent (lists may differ in length).
    """
    if not method or not baseline:
        raise ValueError("compare_clustered needs at least one cluster per arm")
    if paired:
        if len(method) != len(baseline):
            raise ValueError(f"paired arms have different cluster counts ({len(method)} vs {len(baseline)})")
        for i, (a, b) in enumerate(zip(method, baseline)):
            if len(a) != len(b):
                raise ValueError(f"paired cluster {i}: {len(a)} method units vs {len(b)} baseline units")
    n_clusters = min(len(method), len(baseline))
    if n_clusters < SMALL_SAMPLE:
        a = np.array([g.mean() for g in method])
        b = np.array([g.mean() for g in baseline])
        return _t_test(a, b, paired, margin, confidence)
    return _bootstrap_test(method, baseline, paired, margin, confidence, n_boot, seed)
