import numpy as np

from paperworks.person_search.consensus import Consensus, confidence, fit_consensus, fit_temperature, softmax
from paperworks.person_search.evaluate import per_query_metrics
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
