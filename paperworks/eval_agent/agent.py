"""The evaluation agent (scripted planner) and its equal-sample controls, on a benchmark's sample pool.

One **session** answers "how good is model M on dimension D?": round after round it asks for a
small batch of samples spread over the dimension's sub-aspects (the first round in proportion
to the pool, later rounds by Neyman allocation towards the sub-aspects whose verdicts vary most),
reads the tools' verdicts, updates a stratified estimate with its interval
(``core.adaptive.check_stop``, Bonferroni over the rounds) and stops when the interval sits
inside one of the five reference levels, or at the round cap. It answers with the level, the
estimate, the samples spent, the weakest sub-aspect and failing samples as evidence.

Controls at the **same number of samples**: a uniform random subset of the pool, and the
fixed first-N prompts of the dimension's prompt file. The full benchmark is every sample.

Samples come from a pool drawn independently of the pool that defines the truth (run ``b``
vs run ``a``), so the agent never reads the samples it is scored against.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from paperworks.core.adaptive import StoppingRule, check_stop, level_of
from paperworks.eval_agent.params import AgentParams

LEVEL_NAMES = ("Very Low", "Low", "Medium", "High", "Very High")


def reference_edges(population_scores: np.ndarray, n_levels: int = 5) -> tuple[float, ...]:
    """Level edges from the population's benchmark scores: its quantiles (as the authors' tables from known models)."""
    q = np.quantile(np.asarray(population_scores, dtype=float), np.arange(1, n_levels) / n_levels)
    inner = np.maximum.accumulate(np.clip(q, 1e-6, 1 - 1e-6) + np.arange(1, n_levels) * 1e-9)
    return (0.0, *[float(v) for v in inner], 1.0)


@dataclass
class Pool:
    """One (model, dimension) benchmark run: a row per (prompt, sample)."""

    prompt: np.ndarray   # prompt index in the dimension's file order
    sample: np.ndarray   # sample index of that prompt
    stratum: np.ndarray
    outcome: np.ndarray  # tool verdict 0/1


@dataclass
class Session:
    n: int
    estimate: float
    low: float
    high: float
    level: int
    reason: str
    rounds: int
    rows: list[int] = field(default_factory=list)     # pool rows read, in order
    steps: list[dict] = field(default_factory=list)   # per round: allocation, estimate, interval, decision


def stratified_interval(values: np.ndarray, strata: np.ndarray, weights: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Σ w_h p̂_h with a normal interval on Σ w_h² p̃_h(1 − p̃_h)/n_h (p̃ shrunk by ½ a success: never zero variance).

    A sub-aspect not yet sampled takes the pooled mean (and the pooled variance)."""
    values, strata = np.asarray(values, dtype=float), np.asarray(strata)
    if len(values) == 0:
        return (float("nan"), 0.0, 1.0)
    pooled = (values.sum() + 0.5) / (len(values) + 1.0)
    est, var = 0.0, 0.0
    for h, w in enumerate(weights):
        v = values[strata == h]
        n_h = len(v)
        p_hat = v.mean() if n_h else values.mean()
        p_tilde = (v.sum() + 0.5) / (n_h + 1.0) if n_h else pooled
        est += w * p_hat
        var += w * w * p_tilde * (1 - p_tilde) / max(n_h, 1)
    z = float(sps.norm.ppf(0.5 + confidence / 2))
    half = z * math.sqrt(var)
    return (float(est), max(0.0, est - half), min(1.0, est + half))


def allocate(batch: int, weights: np.ndarray, values: np.ndarray, strata: np.ndarray, neyman: bool, left: np.ndarray) -> np.ndarray:
    """Samples per sub-aspect for one round (largest remainder), never more than a sub-aspect has left."""
    share = np.asarray(weights, dtype=float).copy()
    if neyman:
        for h in range(len(share)):
            v = values[strata == h]
            p = (v.sum() + 0.5) / (len(v) + 1.0)
            share[h] *= math.sqrt(p * (1 - p))
    share = np.where(left > 0, share, 0.0)
    if share.sum() <= 0:
        share = (left > 0).astype(float)
    raw = share / share.sum() * batch
    alloc = np.floor(raw).astype(int)
    for h in np.argsort(-(raw - alloc), kind="stable")[: batch - alloc.sum()]:
        alloc[h] += 1
    alloc = np.minimum(alloc, left)
    while alloc.sum() < min(batch, left.sum()):  # a sub-aspect ran out: hand its share to the others
        alloc[int(np.argmax(left - alloc))] += 1
    return alloc


def run_agent(pool: Pool, weights: np.ndarray, edges: tuple[float, ...], p: AgentParams, rng: np.random.Generator) -> Session:
    """One scripted-planner session on ``pool`` (rows are drawn without replacement inside each sub-aspect)."""
    rule = StoppingRule(edges=edges, batch_size=p.batch_size, max_samples=p.batch_size * p.max_rounds,
                        confidence=p.confidence, interval="wilson")
    queues = [list(rng.permutation(np.flatnonzero(pool.stratum == h))) for h in range(len(weights))]
    rows: list[int] = []
    steps = []
    decision = None
    for r in range(p.max_rounds):
        values, strata = pool.outcome[rows], pool.stratum[rows]
        left = np.array([len(q) for q in queues])
        if left.sum() == 0:
            break
        alloc = allocate(p.batch_size, weights, values, strata, neyman=(p.allocation == "neyman" and r > 0), left=left)
        for h, k in enumerate(alloc):
            rows += [int(queues[h].pop(0)) for _ in range(k)]
        strata_now = pool.stratum[rows]
        decision = check_stop(rule, pool.outcome[rows],
                              interval_fn=lambda v, c, s=strata_now: stratified_interval(v, s, weights, c))
        steps.append({"round": r + 1, "allocation": alloc.tolist(), "n": len(rows), "estimate": decision.estimate,
                      "low": decision.low, "high": decision.high, "decision": decision.reason})
        if decision.stop:
            break
    assert decision is not None
    reason = decision.reason if decision.stop else "pool exhausted"
    return Session(len(rows), float(decision.estimate), float(decision.low), float(decision.high), int(decision.level),
                   reason, len(steps), rows, steps)


def random_subset(pool: Pool, n: int, rng: np.random.Generator) -> float:
    """Mean verdict of ``n`` pool rows drawn uniformly without replacement."""
    return float(pool.outcome[rng.choice(len(pool.outcome), size=min(n, len(pool.outcome)), replace=False)].mean())


def first_n(pool: Pool, n: int, repeat: int) -> float:
    """Mean verdict of the first ``n`` prompts of the prompt file (one sample each, sample index = repeat, wrapping)."""
    n_samples = int(pool.sample.max()) + 1
    key = ((pool.sample - repeat) % n_samples) * (int(pool.prompt.max()) + 1) + pool.prompt  # file order, this repeat's sample
    return float(pool.outcome[np.argsort(key, kind="stable")[:n]].mean())


def weakest_aspect(pool: Pool, rows: list[int], names: tuple[str, ...]) -> tuple[str, float]:
    """The sub-aspect with the lowest pass rate among the samples read (the explanation's evidence)."""
    s, o = pool.stratum[rows], pool.outcome[rows]
    rates = {h: float(o[s == h].mean()) for h in range(len(names)) if (s == h).any()}
    h = min(rates, key=rates.get)
    return names[h], rates[h]


def level_name(level: int) -> str:
    return LEVEL_NAMES[level] if len(LEVEL_NAMES) > level >= 0 else str(level)


__all__ = ["reference_edges", "Pool", "Session", "stratified_interval", "allocate", "run_agent", "random_subset",
           "first_n", "weakest_aspect", "level_of", "level_name"]
