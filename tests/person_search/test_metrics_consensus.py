import numpy as np

import pytest

from paperworks.person_search.consensus import (
    Consensus, confidence, fit_consensus, fit_temperature, mean_ap_of_order, softmax, view_agreement,
)
from paperworks.person_search.evaluate import confidence_separation, per_query_metrics
from paperworks.person_search.retrieval import FlatIndex, search_branches


def test_metrics_against_independent_computation():
    rng = np.random.default_rng(0)
    ranked = np.stack([rng.permutation(30)[:10] for _ in range(200)])
    targets = rng.integers(0, 30, 200)
    m = per_query_metrics(ranked, targets)
    # independent: one relevant item -> AP@10 = 1/rank if within 10; R@k = 1[rank <= k]
    ranks = np.array([np.flatnonzero(r == t)[0] + 1 if (r == t).any() else 99 for r, t in zip(ranked, targets)])
    np.testing.assert_allclose(m["map@10"], np.where(ranks <= 10, 1.0 / ranks, 0.0))
    for k in (1, 5, 10):
        np.testing.assert_allclose(m[f"r@{k}"], (ranks <= k).astype(float))


def test_faiss_and_numpy_agree():
    rng = np.random.default_rng(1)
    g = rng.standard_normal((500, 16)).astype(np.float32)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    q = rng.standard_normal((7, 3, 16)).astype(np.float32)
    present = np.ones((7, 3), bool)
    present[2, 1] = False
    s1, i1 = search_branches(FlatIndex(g, "faiss"), q, present, 20)
    s2, i2 = search_branches(FlatIndex(g, "numpy"), q, present, 20)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(s1, s2, atol=1e-5)
    assert (i1[1, 2] == -1).all()  # missing view: nothing retrieved


def test_temperature_fit_and_confidence():
    rng = np.random.default_rng(2)
    scores = rng.standard_normal((300, 10))
    target = scores.argmax(1)  # the top score is always right -> sharpen (small T)
    assert fit_temperature(scores, target) < 0.2
    p = softmax(np.array([[3.0, 1.0, 0.0], [1.0, 1.0, 1.0]]))
    m = confidence(p, "margin")
    assert m[0] > 0.5 and abs(m[1]) < 1e-12
    assert confidence(p, "entropy")[0] > confidence(p, "entropy")[1]


def test_gate_keeps_confident_stage1_and_reranks_the_rest():
    fusion = np.array([[5.0, 0.0, 0.0], [0.1, 0.0, 0.05]])  # query 0 confident, query 1 not
    expert = np.array([[0.0, 5.0, 0.0], [0.0, 0.0, 5.0]])
    c = Consensus({"fusion": 1.0, "cross": 1.0}, {"fusion": 0.2, "cross": 0.8}, threshold=0.5, kind="margin")
    order, keep, _ = c.combine({"fusion": fusion, "cross": expert})
    assert keep.tolist() == [True, False]
    assert order[0, 0] == 0 and order[1, 0] == 2


def test_fit_consensus_prefers_the_reliable_expert():
    rng = np.random.default_rng(3)
    n, p = 200, 10
    target = rng.integers(0, p, n)
    good = rng.standard_normal((n, p))
    good[np.arange(n), target] += 4
    bad = rng.standard_normal((n, p))
    fusion = rng.standard_normal((n, p))
    c = fit_consensus({"fusion": fusion, "cross": good, "cloze": bad}, target)
    assert c.weights["cross"] > c.weights["cloze"] and c.weights["cross"] > c.weights["fusion"]
    order, _, _ = c.combine({"fusion": fusion, "cross": good, "cloze": bad})
    assert (order[:, 0] == target).mean() > 0.8


def test_gate_keeps_stage1_when_confidence_equals_the_threshold():
    fusion = np.array([[2.0, 0.5, 0.0], [1.0, 0.9, 0.0]])
    expert = np.array([[0.0, 0.0, 5.0], [0.0, 0.0, 5.0]])
    margin = confidence(softmax(fusion), "margin")
    c = Consensus({"fusion": 1.0, "cross": 1.0}, {"fusion": 0.5, "cross": 0.5}, threshold=float(margin[0]), kind="margin")
    order, keep, _ = c.combine({"fusion": fusion, "cross": expert})
    assert keep.tolist() == [True, False]  # at the threshold the stage-1 list stands (≥, not >)
    assert order[0].tolist() == [0, 1, 2] and order[1, 0] == 2


def test_view_agreement_counts_views_naming_the_fused_top1_and_never_a_missing_view():
    fused_top1 = np.array([7, 3, 5])
    view_top1 = np.array([[7, 7, 2, -1, 7, 1], [3, 3, 3, 3, 3, 3], [-1, -1, -1, -1, -1, -1]])
    assert view_agreement(fused_top1, view_top1).tolist() == [3, 6, 0]
    assert view_agreement(np.array([-1]), np.array([[-1, -1]])).tolist() == [2]  # only a padded fused id could match −1


def test_agreement_confidence_orders_by_count_first_and_margin_within_a_count():
    p = softmax(np.array([[0.0, 0.0, 0.0], [9.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
    c = confidence(p, "agreement", np.array([3, 2, 2]))
    assert c[0] > c[1] > c[2]  # 3 views beat 2 whatever the margin; within 2 views the larger margin is surer
    assert c[1] < 3  # half a margin never reaches the next count
    with pytest.raises(ValueError, match="agreement"):
        confidence(p, "agreement")
    with pytest.raises(ValueError, match="not in"):
        confidence(p, "agree")


def test_agreement_gate_keeps_at_the_threshold_and_reranks_below_it():
    fusion = np.array([[1.0, 0.9, 0.0], [1.0, 0.9, 0.0], [2.0, 0.0, 0.0]])
    expert = np.array([[0.0, 0.0, 5.0]] * 3)
    agreement = np.array([4, 3, 2])
    p0 = softmax(fusion)
    tau = float(confidence(p0, "agreement", agreement)[0])
    c = Consensus({"fusion": 1.0, "cross": 1.0}, {"fusion": 0.5, "cross": 0.5}, threshold=tau, kind="agreement")
    order, keep, _ = c.combine({"fusion": fusion, "cross": expert}, agreement)
    # query 0 sits at the threshold (kept: ≥); query 2 has the largest margin but fewer agreeing views
    assert keep.tolist() == [True, False, False]
    assert order[0, 0] == 0 and order[1, 0] == 2 and order[2, 0] == 2


def test_fit_consensus_with_agreement_keeps_stage1_where_the_views_agree():
    # stage 1 is right (target at pool position 0) exactly where 5-6 views agree, and the expert is
    # right exactly where they do not: the fitted gate must keep the first group and rerank the second
    rng = np.random.default_rng(4)
    n, p = 120, 10
    agree = rng.random(n) < 0.5
    agreement = np.where(agree, rng.integers(5, 7, n), rng.integers(0, 3, n))
    target = np.where(agree, 0, rng.integers(1, p, n))
    fusion = np.tile(-np.arange(p, dtype=float), (n, 1)) * 0.1  # stage-1 order = pool order, same small margin everywhere
    expert = rng.standard_normal((n, p))
    expert[np.arange(n), target] += 6.0
    expert[agree, 0] -= 6.0  # where stage 1 is right, the expert prefers something else
    expert[agree, 1] += 12.0
    c = fit_consensus({"fusion": fusion, "cross": expert}, target, "agreement", agreement)
    order, keep, _ = c.combine({"fusion": fusion, "cross": expert}, agreement)
    assert keep.tolist() == agree.tolist()
    assert (order[keep, 0] == 0).all()
    gated = mean_ap_of_order(order, target).mean()
    always_order, _, _ = Consensus(c.temperatures, c.weights, np.inf, "agreement").combine({"fusion": fusion, "cross": expert}, agreement)
    always = mean_ap_of_order(always_order, target).mean()
    never = mean_ap_of_order(np.tile(np.arange(p), (n, 1)), target).mean()
    assert gated > always and gated > never
    # the margin is the same for every query here: a margin gate fitted on the same data cannot split them,
    # so it does no better than always or never reranking, and worse than the agreement gate
    margin_gate = fit_consensus({"fusion": fusion, "cross": expert}, target, "margin")
    margin_order, _, _ = margin_gate.combine({"fusion": fusion, "cross": expert})
    assert mean_ap_of_order(margin_order, target).mean() <= max(always, never) + 1e-12 < gated
    # the kind fitted on validation too: agreement, the only kind that splits these queries, with its own fit
    fitted = fit_consensus({"fusion": fusion, "cross": expert}, target, "fitted", agreement)
    assert fitted.kind == "agreement" and fitted.threshold == c.threshold
    assert set(fitted.val_map_by_kind) == {"margin", "entropy", "agreement"}
    assert fitted.val_map_by_kind["agreement"] == pytest.approx(gated) == pytest.approx(fitted.val_map)
    assert max(fitted.val_map_by_kind["margin"], fitted.val_map_by_kind["entropy"]) < gated


def test_confidence_separation_auc_and_agreement_table():
    correct = np.array([True, True, False, False])
    agreement = np.array([6, 5, 1, 1])
    sep = confidence_separation(correct, {"perfect": np.array([0.9, 0.8, 0.1, 0.2]), "inverted": -agreement.astype(float)}, agreement)
    assert sep["auc"] == {"perfect": 1.0, "inverted": 0.0}
    assert sep["by_agreement"] == {"1": {"queries": 2, "stage1_top1_correct": 0}, "5": {"queries": 1, "stage1_top1_correct": 1},
                                   "6": {"queries": 1, "stage1_top1_correct": 1}}
    assert confidence_separation(np.ones(3, bool), {"m": np.zeros(3)}, np.zeros(3))["auc"] == {"m": None}
