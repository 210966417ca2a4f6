"""core.adaptive: confidence signals, temperature scaling, calibration, threshold sweeps, stopping rules."""
import math

import numpy as np
import pytest
from scipy import special

from paperworks.core.adaptive import (
    StoppingRule, check_stop, choose_threshold, confidence_signals, expected_calibration_error, fit_temperature,
    exact_interval_fn, level_of, nll, random_exit_mask, reliability_bins, run_sequential, threshold_sweep,
    t_interval_fn, wilson_interval_fn,
)


def test_signals_on_hand_made_logits():
    probs = np.array([[0.7, 0.2, 0.1], [0.25, 0.25, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    c = confidence_signals(np.log(probs))
    assert c.prediction.tolist() == [0, 2, 0]
    assert c.max_prob == pytest.approx([0.7, 0.5, 1 / 3])
    assert c.margin == pytest.approx([0.5, 0.25, 0.0], abs=1e-12)
    assert c.entropy[0] == pytest.approx(-(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1)))
    assert c.entropy[2] == pytest.approx(math.log(3))
    assert c.score("neg_entropy").argmax() == 0 and c.score("margin").argmin() == 2
    # a hotter softmax is less sure: margin shrinks towards 0, entropy grows towards log K
    hot = confidence_signals(np.log(probs), temperature=50.0)
    assert (hot.margin < c.margin + 1e-12).all() and hot.margin[0] < 0.02 and hot.entropy[0] > 0.999 * math.log(3)
    with pytest.raises(ValueError, match="signal"):
        c.score("variance")


def _overconfident_set(n: int, k: int = 4, scale: float = 3.0, seed: int = 0):
    """Labels drawn from softmax(z); the model reports scale · z (over-confident by ``scale``)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1.5, size=(n, k))
    p = special.softmax(z, axis=1)
    labels = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return scale * z, labels


def test_temperature_scaling_lowers_nll_and_ece():
    dev_logits, dev_labels = _overconfident_set(4000, seed=0)
    test_logits, test_labels = _overconfident_set(4000, seed=1)
    t = fit_temperature(dev_logits, dev_labels)
    assert t == pytest.approx(3.0, rel=0.12)  # recovers the planted over-confidence
    assert nll(test_logits, test_labels, t) < nll(test_logits, test_labels, 1.0) - 0.1

    def ece(temp):
        c = confidence_signals(test_logits, temp)
        return expected_calibration_error(c.max_prob, c.prediction == test_labels)

    assert ece(1.0) > 0.1 and ece(t) < 0.03
    with pytest.warns(RuntimeWarning, match="at a bound"):  # labels unrelated to the logits → T runs to the bound
        fit_temperature(test_logits, np.random.default_rng(9).integers(4, size=len(test_labels)))
    # the fitted T is the NLL minimum: nudging it either way is worse on dev
    assert nll(dev_logits, dev_labels, t) <= min(nll(dev_logits, dev_labels, t * 0.9), nll(dev_logits, dev_labels, t * 1.1))


def test_ece_of_a_calibrated_set_is_near_zero_and_bins_match_sklearn():
    from sklearn.calibration import calibration_curve

    rng = np.random.default_rng(0)
    conf = rng.uniform(0, 1, 200_000)
    correct = rng.random(conf.size) < conf
    assert expected_calibration_error(conf, correct) < 0.01
    assert expected_calibration_error(conf, rng.random(conf.size) < conf**2) > 0.1
    for strategy in ("uniform", "quantile"):
        small = conf[:3000]
        bins = reliability_bins(small, correct[:3000], n_bins=10, strategy=strategy)
        prob_true, prob_pred = calibration_curve(correct[:3000], small, n_bins=10, strategy=strategy)
        full = bins.count > 0
        assert bins.accuracy[full] == pytest.approx(prob_true) and bins.mean_confidence[full] == pytest.approx(prob_pred)
        assert bins.count.sum() == 3000
    frame = reliability_bins(conf[:100], correct[:100], n_bins=5).to_frame()
    assert list(frame.columns) == ["bin_low", "bin_high", "count", "confidence", "accuracy"] and len(frame) == 5
    with pytest.raises(ValueError, match="confidence"):
        reliability_bins(np.array([1.2]), np.array([1]))


def test_threshold_sweep_and_choice():
    score = np.array([0.9, 0.8, 0.3, 0.1])
    c1 = np.array([1, 1, 0, 0])
    c2 = np.array([0, 1, 1, 1])
    sweep = threshold_sweep(score, c1, c2, cost_exit=1.0, cost_fallback=10.0)
    row = sweep.set_index("tau")
    assert row.loc[0.8, "exit_share"] == 0.5 and row.loc[0.8, "exit_accuracy"] == 1.0 and row.loc[0.8, "accuracy"] == 1.0
    assert row.loc[0.3, "exit_accuracy"] == pytest.approx(2 / 3) and row.loc[0.3, "accuracy"] == 0.75
    assert row.loc[np.inf, "exit_share"] == 0 and row.loc[np.inf, "accuracy"] == 0.75 and np.isnan(row.loc[np.inf, "exit_accuracy"])
    assert row.loc[0.1, "mean_cost"] == 1.0 and row.loc[np.inf, "mean_cost"] == 11.0 and row.loc[0.8, "mean_cost"] == 6.0
    assert choose_threshold(sweep, "accuracy") == 0.8
    assert choose_threshold(sweep, "exit_accuracy", 0.6) == 0.3
    assert choose_threshold(sweep, "exit_share", 0.5) == 0.8
    assert choose_threshold(sweep, "cost", 4.0) == 0.3  # 0.3 costs 3.5 for 0.75; 0.8 costs 6
    with pytest.raises(ValueError, match="no threshold"):
        choose_threshold(threshold_sweep(score, np.zeros(4)), "exit_accuracy", 0.5)
    with pytest.raises(ValueError, match="accuracy"):
        choose_threshold(threshold_sweep(score, c1), "accuracy")


def test_random_exit_mask_matches_the_share():
    mask = random_exit_mask(1000, 0.37, np.random.default_rng(0))
    assert mask.sum() == 370
    assert random_exit_mask(1000, 0.37, np.random.default_rng(0)).tolist() == mask.tolist()


def test_intervals_agree_with_scipy():
    from scipy.stats import binomtest

    for k, n in [(0, 10), (3, 10), (47, 50), (200, 400)]:
        values = np.array([1] * k + [0] * (n - k))
        for fn, method in ((wilson_interval_fn, "wilson"), (exact_interval_fn, "exact")):
            est, lo, hi = fn(values, 0.99)
            ci = binomtest(k, n).proportion_ci(0.99, method=method)
            assert est == k / n and (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-9)


EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def test_stop_decisions():
    rule = StoppingRule(edges=EDGES, batch_size=10, max_samples=100, correction="none")
    d = check_stop(rule, np.zeros(60))  # 0/60: Wilson upper 0.06 → inside level 0
    assert d.stop and d.reason == "interval inside one level" and d.level == 0 and d.high < 0.2
    d = check_stop(rule, np.array([1, 0] * 5))  # 0.5 from 10 samples: far too wide
    assert not d.stop and d.reason == "continue" and d.level == 2
    d = check_stop(rule, np.array([1] * 40 + [0] * 60))  # 0.4 sits on an edge: no level can hold its interval
    assert d.stop and d.reason == "cap" and d.n == 100 and d.low < 0.4 < d.high
    assert [level_of(x, EDGES) for x in (0.0, 0.19, 0.2, 0.99, 1.0)] == [0, 0, 1, 4, 4]
    with pytest.raises(ValueError, match="edges"):
        StoppingRule(edges=(0.5, 0.2))
    with pytest.raises(ValueError, match="interval"):
        StoppingRule(edges=EDGES, interval="bayes")


def _simulate(rule, p, runs, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(runs):
        d, values = run_sequential(rule, lambda k: rng.random(k) < p)
        assert len(values) == d.n <= rule.max_samples
        out.append(d)
    return out


@pytest.mark.parametrize("p", [0.07, 0.33, 0.52, 0.9])
def test_stopping_rule_coverage(p):
    """With Bonferroni-corrected looks, runs that stop on the interval name the true level ≥ 95 % of the time
    and the interval at the stop covers p; the same rule without correction is less reliable."""
    rule = StoppingRule(edges=EDGES, batch_size=20, max_samples=400, interval="wilson")
    runs = _simulate(rule, p, 200, seed=1)
    truth = level_of(p, EDGES)
    by_interval = [d for d in runs if d.reason == "interval inside one level"]
    wrong = sum(d.level != truth for d in by_interval)
    assert wrong <= 0.05 * len(runs)
    assert np.mean([d.low <= p <= d.high for d in runs]) >= 0.93
    assert all(d.n <= 400 for d in runs) and np.mean([d.n for d in runs]) < 400  # some runs stop early


def test_uncorrected_looks_lose_coverage_near_an_edge():
    """p just above the 0.4 edge, 40 looks: plain 95 % intervals, looked at again and again, stop on an
    interval that misses p far more often than 5 %; the Bonferroni looks do not."""
    p = 0.41
    plain = _simulate(StoppingRule(edges=EDGES, batch_size=10, max_samples=400, correction="none"), p, 300, seed=2)
    corrected = _simulate(StoppingRule(edges=EDGES, batch_size=10, max_samples=400), p, 300, seed=2)
    missed = lambda ds: np.mean([d.reason != "cap" and not d.low <= p <= d.high for d in ds])  # noqa: E731
    wrong_level = lambda ds: np.mean([d.reason != "cap" and d.level != 2 for d in ds])  # noqa: E731
    assert missed(corrected) <= 0.01 and wrong_level(corrected) <= 0.01
    assert missed(plain) >= 0.04 and wrong_level(plain) >= 0.03


def test_t_interval_rule_on_continuous_scores():
    rule = StoppingRule(edges=(1.0, 2.0, 3.0, 4.0, 5.0), batch_size=5, max_samples=200, interval="t")
    rng = np.random.default_rng(0)
    decisions = [run_sequential(rule, lambda k: rng.normal(2.6, 0.8, size=k))[0] for _ in range(100)]
    stopped = [d for d in decisions if d.reason == "interval inside one level"]
    assert len(stopped) >= 80 and all(d.level == 1 for d in stopped)  # 2.6 lies in [2, 3)
    # identical values give no spread estimate: never stop on them before the cap
    assert check_stop(rule, np.full(10, 2.5)).reason == "continue"
    assert t_interval_fn(np.full(10, 2.5), 0.95) == (2.5, -math.inf, math.inf)
