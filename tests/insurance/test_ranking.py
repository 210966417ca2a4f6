"""Graded NDCG from paperworks.core.ranking against scikit-learn's ndcg_score."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import ndcg_score

from paperworks.core.ranking import ndcg_at_k, rank_by_score
from paperworks.insurance.crossencoder import per_query_metrics


@pytest.mark.parametrize("k", [1, 3, 5, 10])
def test_ndcg_matches_sklearn_on_graded_lists(k):
    rng = np.random.default_rng(k)
    for _ in range(50):
        n = int(rng.integers(2, 12))
        rels = rng.integers(0, 4, size=n).astype(float)
        if rels.max() == 0:
            rels[0] = 2
        scores = rng.permutation(n).astype(float)  # distinct scores: no tie handling differences
        ours = ndcg_at_k(rank_by_score(scores, rels), k, all_rels=rels)
        assert ours == pytest.approx(ndcg_score([rels], [scores], k=k), abs=1e-12)


def test_per_query_metrics_uses_the_same_ndcg():
    lists = pd.DataFrame([{"query_id": 1, "intent": "symptom", "docs": list("abcd"), "labels": [0.0, 3.0, 1.0, 2.0],
                           "ideal_labels": [3.0, 2.0, 1.0, 0.0]}])
    scores = [np.array([0.9, 0.1, 0.5, 0.3])]
    m = per_query_metrics(lists, scores, [3]).iloc[0]
    assert m["ndcg@3"] == pytest.approx(ndcg_score([[0, 3, 1, 2]], [[0.9, 0.1, 0.5, 0.3]], k=3))
    assert m["mrr"] == pytest.approx(1 / 3)  # first grade>=2 item sits at rank 3 (label 2)
    assert m["spearman"] < 0


def test_per_query_ndcg_takes_its_ideal_from_all_judged_labels():
    """A grade-3 procedure the first stage missed still sits in the ideal ranking: a perfect
    reordering of a list without it scores below 1 (the ideal is not the list's own)."""
    lists = pd.DataFrame([{"query_id": 1, "intent": "direct", "docs": list("abc"), "labels": [0.0, 2.0, 1.0],
                           "ideal_labels": [3.0, 2.0, 1.0]}])
    perfect = [np.array([0.0, 2.0, 1.0])]  # orders the list exactly by its labels
    m = per_query_metrics(lists, perfect, [1, 3]).iloc[0]
    assert m["ndcg@1"] == pytest.approx(2.0 / 3.0)
    # DCG of (2, 1, 0) over the ideal DCG of (3, 2, 1), linear gains
    assert m["ndcg@3"] == pytest.approx((2 + 1 / np.log2(3)) / (3 + 2 / np.log2(3) + 1 / np.log2(4)))
