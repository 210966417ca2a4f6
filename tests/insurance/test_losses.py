"""The three listwise losses (sentence-transformers' implementations) against hand computations."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from paperworks.insurance import crossencoder as ce


class FixedScorer(nn.Module):
    """Stands in for a CrossEncoder: returns preset logits for (query, doc) pairs."""

    num_labels = 1
    device = torch.device("cpu")

    def __init__(self, logits: dict[tuple[str, str], float]):
        super().__init__()
        self.logits = logits

    def preprocess(self, pairs, prompt=None, task=None):
        return {"scores": torch.tensor([self.logits[tuple(p)] for p in pairs])}

    def forward(self, tokens):
        return {"scores": tokens["scores"]}


QUERY = "my knee hurts"
DOCS = ["a", "b", "c"]
LABELS = [2.0, 1.0, 0.0]   # already sorted by relevance (what listwise_batch guarantees)
LOGITS = [0.5, 1.0, -1.0]


def run_loss(name: str) -> float:
    model = FixedScorer({(QUERY, d): s for d, s in zip(DOCS, LOGITS)})
    loss = ce.make_loss(name, model)
    return float(loss([[QUERY], [DOCS]], [torch.tensor(LABELS)]))


def test_listnet_is_cross_entropy_of_top_one_distributions():
    p_true = [math.exp(y) / sum(math.exp(v) for v in LABELS) for y in LABELS]
    log_p_model = [s - math.log(sum(math.exp(v) for v in LOGITS)) for s in LOGITS]
    expected = -sum(p * lp for p, lp in zip(p_true, log_p_model))
    assert run_loss("listnet") == pytest.approx(expected, rel=1e-5)


def test_plistmle_is_position_weighted_plackett_luce_likelihood():
    n = len(LOGITS)
    # order by label (already), weights 2^(n - rank) - 1 normalised to sum 1
    w = [2.0 ** (n - r) - 1 for r in range(1, n + 1)]
    w = [x / sum(w) for x in w]
    nll = 0.0
    for i in range(n):
        log_norm = math.log(sum(math.exp(s) for s in LOGITS[i:]))
        nll -= w[i] * (LOGITS[i] - log_norm)
    assert run_loss("plistmle") == pytest.approx(nll, rel=1e-5)


def test_lambdaloss_ndcg2pp_by_pair_enumeration():
    mu = 10.0
    order = sorted(range(3), key=lambda i: -LOGITS[i])  # positions by predicted score
    s = [LOGITS[i] for i in order]
    y = [LABELS[i] for i in order]
    D = lambda pos: math.log2(1 + pos)  # noqa: E731  (1-based position)
    max_dcg = sum((2 ** v - 1) / D(r + 1) for r, v in enumerate(sorted(LABELS, reverse=True)))
    G = [(2 ** v - 1) / max_dcg for v in y]
    total, pairs = 0.0, 0
    for i in range(3):
        for j in range(3):
            if y[i] > y[j]:
                d = abs(i - j)
                delta = abs(1 / D(d) - 1 / D(d + 1))
                weight = mu * delta * abs(G[i] - G[j]) + abs(1 / D(i + 1) - 1 / D(j + 1)) * abs(G[i] - G[j])
                total += weight * math.log2(1 / (1 + math.exp(-(s[i] - s[j]))))
                pairs += 1
    assert run_loss("lambdaloss") == pytest.approx(-total / pairs, rel=1e-5)


def test_unknown_loss_is_rejected_with_allowed_names():
    with pytest.raises(ValueError, match="allowed: lambdaloss, listnet, plistmle"):
        ce.make_loss("pairwise", FixedScorer({}))


def test_listwise_batch_sorts_by_label_and_truncates():
    import pandas as pd

    rows = list(pd.DataFrame([{"query": "q", "docs": ["x", "y", "z", "w"], "labels": [0.0, 3.0, 1.0, 2.0]}]).itertuples())
    queries, docs, labels = ce.listwise_batch(rows, 3)
    assert queries == ["q"] and docs == [["y", "z", "x"]] and labels[0].tolist() == [3.0, 1.0, 0.0]


def plackett_luce_nll(logits, order):
    """Position-weighted Plackett–Luce negative log-likelihood of ``order`` (weights 2^(n-r) - 1, normalised)."""
    n = len(order)
    w = [2.0 ** (n - r) - 1 for r in range(1, n + 1)]
    w = [x / sum(w) for x in w]
    s = [logits[i] for i in order]
    return -sum(w[i] * (s[i] - math.log(sum(math.exp(v) for v in s[i:]))) for i in range(n))


def test_plistmle_scores_the_permutation_in_input_order():
    """The loss must take the candidates in the order listwise_batch hands over (label-sorted, ties in
    first-stage order), not re-sort them: fed an unsorted list it scores that very order."""
    docs, labels, logits = ["a", "b", "c"], [0.0, 2.0, 1.0], [0.5, 1.0, -1.0]
    model = FixedScorer({(QUERY, d): s for d, s in zip(docs, logits)})
    got = float(ce.make_loss("plistmle", model)([[QUERY], [docs]], [torch.tensor(labels)]))
    assert got == pytest.approx(plackett_luce_nll(logits, [0, 1, 2]), rel=1e-5)
    assert got != pytest.approx(plackett_luce_nll(logits, [1, 2, 0]), rel=1e-3)  # what re-sorting by label would give


def test_plistmle_keeps_first_stage_order_among_tied_labels():
    import pandas as pd

    rows = list(pd.DataFrame([{"query": QUERY, "docs": ["x", "y", "z", "w"], "labels": [1.0, 1.0, 3.0, 1.0]}]).itertuples())
    queries, docs, labels = ce.listwise_batch(rows, 4)
    assert docs == [["z", "x", "y", "w"]]  # stable: the tied grade-1 candidates keep their first-stage order
    logits = {"x": 2.0, "y": -1.0, "z": 0.3, "w": 1.0}
    model = FixedScorer({(QUERY, d): s for d, s in logits.items()})
    got = float(ce.make_loss("plistmle", model)([queries, docs], labels))
    assert got == pytest.approx(plackett_luce_nll([logits[d] for d in docs[0]], [0, 1, 2, 3]), rel=1e-5)
