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
