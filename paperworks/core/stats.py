"""Confidence intervals and the one rule that turns a comparison into a verdict.

Every track reports its headline claim through :func:`claim`, so "method beats
baseline" is only said when the confidence interval of the difference excludes 0.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats as sps

VERDICTS = ("method better", "baseline better", "unresolved")


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> dict[str, float]:
    """Mean with a Student-t confidence interval (n=1 gives an unbounded interval)."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        raise ValueError("mean_ci of an empty sequence")
    mean = float(x.mean())
    if n == 1:
        return {"mean": mean, "std": 0.0, "ci_low": float("-inf"), "ci_high": float("inf"), "n": 1}
    std = float(x.std(ddof=1))
    half = float(sps.t.ppf(0.5 + confidence / 2, n - 1) * std / np.sqrt(n))
    return {"mean": mean, "std": std, "ci_low": mean - half, "ci_high": mean + half, "n": n}


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion (well behaved at 0 and 1)."""
    if trials <= 0:
        return (0.0, 1.0)
    z = float(sps.norm.ppf(0.5 + confidence / 2))
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def bootstrap_diff_ci(
    method: Sequence[float],
    baseline: Sequence[float],
    paired: bool = True,
    confidence: float = 0.95,
    n_boot: int = 4000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean difference (method − baseline) and its percentile-bootstrap interval.

    ``paired`` resamples matched units (same seed / query / episode) together.
    """
    a = np.asarray(method, dtype=float)
    b = np.asarray(baseline, dtype=float)
    if len(a) == 0 or len(b) == 0:
        raise ValueError("bootstrap_diff_ci needs non-empty samples")
    rng = np.random.default_rng(seed)
    if paired:
        if len(a) != len(b):
            raise ValueError(f"paired samples differ in length ({len(a)} vs {len(b)})")
        d = a - b
        idx = rng.integers(0, len(d), size=(n_boot, len(d)))
        boots = d[idx].mean(axis=1)
        diff = float(d.mean())
    else:
        ia = rng.integers(0, len(a), size=(n_boot, len(a)))
        ib = rng.integers(0, len(b), size=(n_boot, len(b)))
        boots = a[ia].mean(axis=1) - b[ib].mean(axis=1)
        diff = float(a.mean() - b.mean())
    lo, hi = np.quantile(boots, [(1 - confidence) / 2, (1 + confidence) / 2])
    return diff, float(lo), float(hi)


def t_diff_ci(
    method: Sequence[float], baseline: Sequence[float], paired: bool = True, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Mean difference and its Student-t interval (paired) or Welch interval (unpaired).

    For a handful of seeds the percentile bootstrap is far too narrow (with n = 3 it can
    only return one of ten resample means); the t interval pays for the small n.
    """
    a = np.asarray(method, dtype=float)
    b = np.asarray(baseline, dtype=float)
    if paired:
        if len(a) != len(b):
            raise ValueError(f"paired samples differ in length ({len(a)} vs {len(b)})")
        d = a - b
        if len(d) < 2:
            return float(d.mean()), float("-inf"), float("inf")
        r = mean_ci(d, confidence)
        return r["mean"], r["ci_low"], r["ci_high"]
    if len(a) < 2 or len(b) < 2:
        return float(a.mean() - b.mean()), float("-inf"), float("inf")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = np.sqrt(va + vb)
    diff = float(a.mean() - b.mean())
    if se == 0:
        return diff, diff, diff
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(sps.t.ppf(0.5 + confidence / 2, dof) * se)
    return diff, diff - half, diff + half


SMALL_SAMPLE = 30  # below this many units, intervals come from the t distribution, not the bootstrap


def verdict(ci_low: float, ci_high: float, higher_is_better: bool = True) -> str:
    if ci_low > 0:
        return VERDICTS[0] if higher_is_better else VERDICTS[1]
    if ci_high < 0:
        return VERDICTS[1] if higher_is_better else VERDICTS[0]
    return VERDICTS[2]


def claim(
    statement: str,
    metric: str,
    method_name: str,
    method_values: Sequence[float],
    baseline_name: str,
    baseline_values: Sequence[float],
    paired: bool = True,
    higher_is_better: bool = True,
    unit: str = "",
    seed: int = 0,
) -> dict:
    """The standard record of a headline comparison, written into ``metrics/<track>.json``.

    ``unit`` says what one value is (a seed, a query, an episode) so the reader knows
    what the interval is over. Fewer than ``SMALL_SAMPLE`` units: t interval; more:
    percentile bootstrap (no normality assumption on per-query metrics).
    """
    n = min(len(method_values), len(baseline_values))
    if n < SMALL_SAMPLE:
        diff, lo, hi = t_diff_ci(method_values, baseline_values, paired=paired)
        ci_method = "paired t" if paired else "Welch t"
    else:
        diff, lo, hi = bootstrap_diff_ci(method_values, baseline_values, paired=paired, seed=seed)
        ci_method = "paired bootstrap" if paired else "bootstrap"
    return {
        "statement": statement,
        "metric": metric,
        "method": method_name,
        "method_mean": float(np.mean(method_values)),
        "baseline": baseline_name,
        "baseline_mean": float(np.mean(baseline_values)),
        "diff": diff,
        "diff_ci95": [lo, hi],
        "n": int(len(method_values)),
        "unit": unit,
        "ci_method": ci_method,
        "verdict": verdict(lo, hi, higher_is_better),
    }
