"""The agent's core equations on hand-checkable cases: stratified interval, allocation, stopping, the controls."""
import math

import numpy as np
from scipy import stats as sps

from paperworks.eval_agent.agent import Pool, allocate, first_n, reference_edges, run_agent, stratified_interval
from paperworks.eval_agent.params import AgentParams


def test_stratified_interval_by_hand():
    values, strata, w = np.array([1, 0, 1, 1.0]), np.array([0, 0, 1, 1]), np.array([0.5, 0.5])
    est, lo, hi = stratified_interval(values, strata, w, 0.9)
    assert est == 0.5 * 0.5 + 0.5 * 1.0
    p0, p1 = 1.5 / 3, 2.5 / 3  # half a success of shrinkage
    half = sps.norm.ppf(0.95) * math.sqrt(0.25 * p0 * (1 - p0) / 2 + 0.25 * p1 * (1 - p1) / 2)
    assert np.isclose(lo, est - half) and np.isclose(hi, min(1.0, est + half))
    # Unequal weights: the estimate follows the pool's shares, not the sample's.
    est2, _, _ = stratified_interval(values, strata, np.array([0.8, 0.2]), 0.9)
    assert np.isclose(est2, 0.8 * 0.5 + 0.2 * 1.0)


def test_allocation_proportional_then_neyman():
    left = np.array([100, 100, 100])
    assert allocate(8, np.array([0.5, 0.25, 0.25]), np.empty(0), np.empty(0, int), False, left).tolist() == [4, 2, 2]
    # Stratum 0 always passes, stratum 1 splits half/half: Neyman sends the round to stratum 1.
    values, strata = np.array([1, 1, 1, 1, 1, 0, 1, 0.0]), np.array([0, 0, 0, 0, 1, 1, 1, 1])
    a = allocate(8, np.array([0.5, 0.5]), values, strata, True, np.array([50, 50]))
    assert a.sum() == 8 and a[1] > a[0]
    assert allocate(8, np.array([0.5, 0.5]), values, strata, True, np.array([50, 2])).tolist() == [6, 2]  # stratum 1 ran out


def _pool(outcome, n_strata=2, samples=2):
    n = len(outcome)
    return Pool(np.arange(n) // samples, np.arange(n) % samples, np.arange(n) % n_strata, np.asarray(outcome, float))


def test_agent_stops_early_on_a_clear_model_and_caps_on_an_edge_case():
    edges = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    p = AgentParams(batch_size=8, max_rounds=10)
    clear = run_agent(_pool(np.ones(400)), np.array([0.5, 0.5]), edges, p, np.random.default_rng(0))
    assert clear.reason == "interval inside one level" and clear.level == 4 and clear.n < 80 and clear.n % 8 == 0
    edge = run_agent(_pool(np.tile([1, 1, 1, 1, 0], 80)), np.array([0.5, 0.5]), edges, p, np.random.default_rng(0))
    assert edge.reason == "cap" and edge.n == 80 and edge.rounds == 10  # 0.8 sits on an edge: never inside one level


def test_first_n_reads_the_file_order_and_edges_are_population_quantiles():
    # Prompts 0..9 fail, the rest pass: the first 10 prompts score 0 whatever the repeat.
    outcome = (np.arange(100) // 2 >= 10).astype(float)
    pool = _pool(outcome)
    assert first_n(pool, 10, repeat=0) == 0.0 and first_n(pool, 10, repeat=1) == 0.0
    assert first_n(pool, 50, repeat=0) == 0.8  # 50 prompts, one sample each
    e = reference_edges(np.linspace(0, 1, 101))
    assert e[0] == 0.0 and e[-1] == 1.0 and np.allclose(e[1:-1], [0.2, 0.4, 0.6, 0.8], atol=1e-6)
