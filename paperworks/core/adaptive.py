"""Adaptive computation: when is a model sure enough to stop?

Shared by the tracks that route or stop early (video QA's confidence gate, the evaluation
agent's sequential sampling, encoder fusion's abstention):

1. **Confidence signals** from option logits: margin p1 − p2, max-probability, entropy.
2. **Temperature scaling** fitted on a dev split by minimising the NLL (over 1/T, where the
   NLL is convex, with ``scipy.optimize.minimize_scalar``).
3. **Calibration**: reliability-diagram bins and the expected calibration error (bins as
   ``sklearn.calibration.calibration_curve`` draws them: right-closed, uniform or quantile).
4. **Threshold sweeps**: exit share and accuracies for every τ of "exit when score ≥ τ", and
   choosing τ on dev for a target (best gated accuracy, an exit-accuracy floor, an exit share,
   a cost budget); random routing at the same exit share as the control.
5. **Sequential stopping**: add samples in batches until an interval of the estimate lies
   inside one level (a bin of ``edges``) or a cap is reached. Intervals are pluggable
   (``IntervalFn``: values, confidence → estimate, low, high); each look is Bonferroni-
   corrected by default so the rule keeps its coverage despite looking many times.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np
import pandas as pd
from scipy import optimize, special
from scipy import stats as sps

from paperworks.core.stats import wilson_interval

# ---------------------------------------------------------------- 1. confidence signals
SIGNALS = ("margin", "max_prob", "neg_entropy")


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    return special.softmax(np.asarray(logits, dtype=np.float64) / temperature, axis=-1)


@dataclass(frozen=True)
class Confidence:
    """Per-row signals of a ``N × K`` logit matrix after temperature ``T``."""

    prediction: np.ndarray  # argmax option
    max_prob: np.ndarray    # p1
    margin: np.ndarray      # p1 − p2 (CADER's routing signal)
    entropy: np.ndarray     # nats; 0 = certain, log K = uniform

    def score(self, signal: str) -> np.ndarray:
        """The signal oriented so that higher = more confident (entropy enters negated)."""
        if signal == "margin":
            return self.margin
        if signal == "max_prob":
            return self.max_prob
        if signal == "neg_entropy":
            return -self.entropy
        raise ValueError(f"unknown signal {signal!r} (allowed: {', '.join(SIGNALS)})")


def confidence_signals(logits: np.ndarray, temperature: float = 1.0) -> Confidence:
    logits = np.atleast_2d(np.asarray(logits, dtype=np.float64))
    if logits.shape[1] < 2:
        raise ValueError(f"need at least 2 options per row (got {logits.shape[1]})")
    p = softmax(logits, temperature)
    top2 = -np.partition(-p, 1, axis=1)[:, :2]
    return Confidence(
        prediction=p.argmax(axis=1),
        max_prob=top2[:, 0],
        margin=top2[:, 0] - top2[:, 1],
        entropy=sps.entropy(p, axis=1),
    )


# ---------------------------------------------------------------- 2. temperature scaling
def nll(logits: np.ndarray, labels: np.ndarray, temperature: float = 1.0) -> float:
    """Mean negative log-likelihood of ``labels`` under softmax(logits / T)."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    labels = np.asarray(labels)
    return float(np.mean(special.logsumexp(z, axis=1) - z[np.arange(len(z)), labels]))


def fit_temperature(logits: np.ndarray, labels: np.ndarray, bounds: tuple[float, float] = (0.05, 20.0)) -> float:
    """The T in ``bounds`` minimising the dev NLL.

    Optimised over the inverse temperature β = 1/T: NLL(β) = mean(logsumexp(β z) − β z_y) is
    convex in β, so the bounded scalar search finds the global minimum.
    """
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels)
    if logits.ndim != 2 or len(logits) != len(labels) or len(labels) == 0:
        raise ValueError(f"logits {logits.shape} and labels {labels.shape} do not match (need N × K and N, N ≥ 1)")
    lo, hi = 1.0 / bounds[1], 1.0 / bounds[0]
    res = optimize.minimize_scalar(lambda beta: nll(logits, labels, 1.0 / beta), bounds=(lo, hi),
                                   method="bounded", options={"xatol": 1e-6})
    if min(res.x - lo, hi - res.x) < 1e-4 * hi:  # e.g. logits that carry no information about the labels
        warnings.warn(f"fitted temperature {1.0 / res.x:.3g} sits at a bound of {bounds}", RuntimeWarning, stacklevel=2)
    return float(1.0 / res.x)


# ---------------------------------------------------------------- 3. calibration
@dataclass(frozen=True)
class ReliabilityBins:
    edges: np.ndarray            # n_bins + 1
    count: np.ndarray            # per bin
    mean_confidence: np.ndarray  # NaN for empty bins
    accuracy: np.ndarray         # NaN for empty bins

    def to_frame(self) -> pd.DataFrame:
        """One row per bin (for ``plots/<track>/reliability.csv``)."""
        return pd.DataFrame({"bin_low": self.edges[:-1], "bin_high": self.edges[1:], "count": self.count,
                             "confidence": self.mean_confidence, "accuracy": self.accuracy})

    def ece(self) -> float:
        n = self.count.sum()
        full = self.count > 0
        return float(np.sum(self.count[full] / n * np.abs(self.accuracy[full] - self.mean_confidence[full])))


def reliability_bins(confidence: np.ndarray, correct: np.ndarray, n_bins: int = 15,
                     strategy: Literal["uniform", "quantile"] = "uniform") -> ReliabilityBins:
    """Bin predictions by confidence; right-closed bins ``(a, b]`` (the first also holds 0), as sklearn bins them."""
    conf = np.asarray(confidence, dtype=np.float64)
    corr = np.asarray(correct, dtype=np.float64)
    if conf.shape != corr.shape or conf.ndim != 1 or len(conf) == 0:
        raise ValueError(f"confidence {conf.shape} and correct {corr.shape} must be equal-length, non-empty 1-d arrays")
    if conf.min() < 0 or conf.max() > 1:
        raise ValueError("confidence must lie in [0, 1]")
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
    elif strategy == "quantile":
        edges = np.percentile(conf, np.linspace(0, 100, n_bins + 1))
    else:
        raise ValueError(f"unknown strategy {strategy!r} (allowed: uniform, quantile)")
    idx = np.searchsorted(edges[1:-1], conf, side="left")
    count = np.bincount(idx, minlength=n_bins).astype(int)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.bincount(idx, weights=conf, minlength=n_bins) / count
        acc = np.bincount(idx, weights=corr, minlength=n_bins) / count
    return ReliabilityBins(edges=edges, count=count, mean_confidence=mean_conf, accuracy=acc)


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, n_bins: int = 15,
                               strategy: Literal["uniform", "quantile"] = "uniform") -> float:
    """ECE = Σ_bins (n_b / N) · |accuracy_b − confidence_b|."""
    return reliability_bins(confidence, correct, n_bins, strategy).ece()


# ---------------------------------------------------------------- 4. threshold sweeps
def threshold_sweep(score: np.ndarray, correct_exit: np.ndarray, correct_fallback: np.ndarray | None = None,
                    cost_exit: np.ndarray | float | None = None, cost_fallback: np.ndarray | float | None = None,
                    thresholds: np.ndarray | None = None) -> pd.DataFrame:
    """For each τ, the policy "answer at the first stage when ``score ≥ τ``, else fall back".

    Columns: ``tau``, ``exit_share``, ``exit_accuracy`` (first-stage accuracy on the exits,
    NaN when none exit) and, with ``correct_fallback``, ``accuracy`` of the gated system;
    with both costs, ``mean_cost`` per item (a fallback item pays ``cost_exit + cost_fallback``:
    the first stage has already run). Default thresholds: every distinct score, and +inf
    (nobody exits).
    """
    score = np.asarray(score, dtype=np.float64)
    c1 = np.asarray(correct_exit, dtype=np.float64)
    if score.shape != c1.shape or score.ndim != 1:
        raise ValueError(f"score {score.shape} and correct_exit {c1.shape} must be equal-length 1-d arrays")
    taus = np.append(np.unique(score), np.inf) if thresholds is None else np.asarray(thresholds, dtype=np.float64)
    exits = score[None, :] >= taus[:, None]  # T × N
    n_exit = exits.sum(axis=1)
    out = {"tau": taus, "exit_share": n_exit / len(score)}
    with np.errstate(invalid="ignore", divide="ignore"):
        out["exit_accuracy"] = (exits * c1).sum(axis=1) / n_exit
    if correct_fallback is not None:
        c2 = np.asarray(correct_fallback, dtype=np.float64)
        if c2.shape != c1.shape:
            raise ValueError(f"correct_fallback {c2.shape} does not match correct_exit {c1.shape}")
        out["accuracy"] = np.where(exits, c1, c2).mean(axis=1)
    if cost_exit is not None and cost_fallback is not None:
        k1 = np.broadcast_to(np.asarray(cost_exit, dtype=np.float64), score.shape)
        k2 = np.broadcast_to(np.asarray(cost_fallback, dtype=np.float64), score.shape)
        out["mean_cost"] = (k1 + np.where(exits, 0.0, k2)).mean(axis=1)
    return pd.DataFrame(out)


TARGETS = ("accuracy", "exit_accuracy", "exit_share", "cost")


def choose_threshold(sweep: pd.DataFrame, target: str, value: float | None = None) -> float:
    """Pick τ from a dev sweep.

    - ``accuracy``: the best gated accuracy (ties → the most exits);
    - ``exit_accuracy``: the most exits whose exit accuracy is ≥ ``value``;
    - ``exit_share``: the most exits with an exit share ≤ ``value``;
    - ``cost``: the best gated accuracy with ``mean_cost`` ≤ ``value`` (ties → the cheapest).
    No τ meets the target → ``ValueError``.
    """
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r} (allowed: {', '.join(TARGETS)})")
    if target != "accuracy" and value is None:
        raise ValueError(f"target {target!r} needs a value")
    need = {"accuracy": "accuracy", "cost": "mean_cost"}.get(target)
    if need and need not in sweep:
        raise ValueError(f"target {target!r} needs the sweep's '{need}' column (pass the fallback's correctness/costs)")
    s = sweep.sort_values("tau")
    if target == "accuracy":
        ok = s[s["accuracy"] == s["accuracy"].max()]
        return float(ok.sort_values(["exit_share", "tau"], ascending=[False, True])["tau"].iloc[0])
    if target == "exit_accuracy":
        ok = s[s["exit_accuracy"] >= value]
    elif target == "exit_share":
        ok = s[s["exit_share"] <= value + 1e-12]
    else:
        ok = s[s["mean_cost"] <= value + 1e-12]
        if len(ok):
            best = ok[ok["accuracy"] == ok["accuracy"].max()]
            return float(best.sort_values(["mean_cost", "tau"])["tau"].iloc[0])
    if not len(ok):
        raise ValueError(f"no threshold reaches {target} {'≥' if target == 'exit_accuracy' else '≤'} {value}")
    return float(ok.sort_values(["exit_share", "tau"], ascending=[False, True])["tau"].iloc[0])


def random_exit_mask(n: int, exit_share: float, rng: np.random.Generator) -> np.ndarray:
    """Exactly ``round(exit_share · n)`` random exits: the control router at the same exit share."""
    if not 0.0 <= exit_share <= 1.0:
        raise ValueError(f"exit_share must be in [0, 1] (got {exit_share})")
    mask = np.zeros(n, dtype=bool)
    mask[rng.choice(n, size=int(round(exit_share * n)), replace=False)] = True
    return mask


# ---------------------------------------------------------------- 5. sequential stopping
IntervalFn = Callable[[np.ndarray, float], tuple[float, float, float]]  # (values, confidence) → (estimate, low, high)


def wilson_interval_fn(values: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Proportion of 1s with its Wilson score interval (the project's ``core.stats.wilson_interval``)."""
    v = np.asarray(values)
    k, n = int(v.sum()), len(v)
    if n == 0:
        return (float("nan"), 0.0, 1.0)
    lo, hi = wilson_interval(k, n, confidence)
    return (k / n, float(lo), float(hi))


def exact_interval_fn(values: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Proportion with the Clopper–Pearson interval (never below its nominal coverage)."""
    v = np.asarray(values)
    k, n = int(v.sum()), len(v)
    if n == 0:
        return (float("nan"), 0.0, 1.0)
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return (k / n, float(ci.low), float(ci.high))


def t_interval_fn(values: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Mean of continuous values with a Student-t interval (unbounded below 2 values or with zero spread)."""
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    if n < 2:
        return (float(v.mean()) if n else float("nan"), -math.inf, math.inf)
    mean, se = float(v.mean()), float(v.std(ddof=1) / math.sqrt(n))
    if se == 0.0:  # n identical values say little about the spread; do not stop on them
        return (mean, -math.inf, math.inf)
    lo, hi = sps.t.interval(confidence, n - 1, loc=mean, scale=se)
    return (mean, float(lo), float(hi))


INTERVALS: dict[str, IntervalFn] = {"wilson": wilson_interval_fn, "exact": exact_interval_fn, "t": t_interval_fn}


def level_of(x: float, edges: np.ndarray | tuple[float, ...]) -> int:
    """Index k of the level with ``edges[k] ≤ x < edges[k+1]`` (the outer levels are open-ended)."""
    return int(np.searchsorted(np.asarray(edges)[1:-1], x, side="right"))


@dataclass(frozen=True)
class StoppingRule:
    """Sample in batches until the interval fits one level of ``edges`` or ``max_samples`` is reached.

    ``edges`` (increasing) cut the estimate's range into levels, e.g. five reference levels
    ``(0, .2, .4, .6, .8, 1)``. With ``correction="bonferroni"`` each look uses confidence
    ``1 − (1 − confidence) / looks`` where ``looks`` is the most looks the cap allows, so the
    chance that *any* look's interval misses the truth stays ≤ 1 − confidence.
    """

    edges: tuple[float, ...]
    batch_size: int = 10
    max_samples: int = 200
    min_samples: int = 0
    confidence: float = 0.95
    interval: str = "wilson"
    correction: Literal["none", "bonferroni"] = "bonferroni"

    def __post_init__(self) -> None:
        e = np.asarray(self.edges, dtype=float)
        if len(e) < 2 or np.any(np.diff(e) <= 0):
            raise ValueError(f"edges must be ≥ 2 increasing values (got {self.edges})")
        if self.batch_size < 1 or self.max_samples < self.batch_size or self.min_samples > self.max_samples:
            raise ValueError(f"need 1 ≤ batch_size ≤ max_samples and min_samples ≤ max_samples "
                             f"(got {self.batch_size}, {self.max_samples}, {self.min_samples})")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1) (got {self.confidence})")
        if self.interval not in INTERVALS:
            raise ValueError(f"unknown interval {self.interval!r} (allowed: {', '.join(INTERVALS)})")
        if self.correction not in ("none", "bonferroni"):
            raise ValueError(f"unknown correction {self.correction!r} (allowed: none, bonferroni)")

    @property
    def looks(self) -> int:
        return math.ceil(self.max_samples / self.batch_size)

    @property
    def look_confidence(self) -> float:
        alpha = 1.0 - self.confidence
        return 1.0 - alpha / self.looks if self.correction == "bonferroni" else self.confidence


@dataclass(frozen=True)
class StopDecision:
    stop: bool
    reason: Literal["interval inside one level", "cap", "continue"]
    n: int
    estimate: float
    low: float
    high: float
    level: int  # level of the estimate (at a stop by interval, the interval's level)


def check_stop(rule: StoppingRule, values: np.ndarray, interval_fn: IntervalFn | None = None) -> StopDecision:
    """Decide on the values seen so far (pass ``interval_fn`` to swap in another interval)."""
    values = np.asarray(values)
    fn = interval_fn or INTERVALS[rule.interval]
    est, lo, hi = fn(values, rule.look_confidence)
    level = level_of(est, rule.edges) if np.isfinite(est) else 0
    n_levels = len(rule.edges) - 1
    # The outer levels reach to ±inf (an estimate beyond the edges still belongs to one).
    low_edge = rule.edges[level] if level > 0 else -math.inf
    high_edge = rule.edges[level + 1] if level < n_levels - 1 else math.inf
    inside = np.isfinite(est) and len(values) >= max(1, rule.min_samples) and low_edge <= lo and hi <= high_edge
    if inside:
        return StopDecision(True, "interval inside one level", len(values), est, lo, hi, level)
    if len(values) >= rule.max_samples:
        return StopDecision(True, "cap", len(values), est, lo, hi, level)
    return StopDecision(False, "continue", len(values), est, lo, hi, level)


def run_sequential(rule: StoppingRule, draw: Callable[[int], np.ndarray],
                   interval_fn: IntervalFn | None = None) -> tuple[StopDecision, np.ndarray]:
    """Call ``draw(k)`` for ``k`` new outcomes, batch after batch, until :func:`check_stop` says stop.

    Returns the decision and every value drawn (never more than ``max_samples``).
    """
    values = np.empty(0)
    while True:
        k = min(rule.batch_size, rule.max_samples - len(values))
        new = np.asarray(draw(k), dtype=np.float64)
        if new.shape != (k,):
            raise ValueError(f"draw({k}) returned shape {new.shape}, expected ({k},)")
        values = np.concatenate([values, new])
        decision = check_stop(rule, values, interval_fn)
        if decision.stop:
            return decision, values
