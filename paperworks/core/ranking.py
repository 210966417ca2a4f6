"""Ranking metrics — the one implementation every track uses.

Inputs are relevance grades listed in *ranked order* (best-scored candidate first).
NDCG uses linear gains (rel / log2(rank+1)), the convention of scikit-learn's
``ndcg_score``; the tests check against it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats as sps


def dcg_at_k(ranked_rels: Sequence[float], k: int) -> float:
    r = np.asarray(ranked_rels, dtype=float)[:k]
    return float((r / np.log2(np.arange(2, len(r) + 2))).sum())


def ndcg_at_k(ranked_rels: Sequence[float], k: int, all_rels: Sequence[float] | None = None) -> float:
    """NDCG@k. ``all_rels`` (every judged item, default the ranked list) defines the ideal."""
    ideal = sorted(all_rels if all_rels is not None else ranked_rels, reverse=True)
    idcg = dcg_at_k(ideal, k)
    return dcg_at_k(ranked_rels, k) / idcg if idcg > 0 else 0.0


def reciprocal_rank(ranked_rels: Sequence[float], threshold: float = 1.0) -> float:
    for i, r in enumerate(ranked_rels):
        if r >= threshold:
            return 1.0 / (i + 1)
    return 0.0


def recall_at_k(ranked_rels: Sequence[float], k: int, n_relevant: int | None = None, threshold: float = 1.0) -> float:
    rels = np.asarray(ranked_rels, dtype=float)
    total = n_relevant if n_relevant is not None else int((rels >= threshold).sum())
    if total == 0:
        return 0.0
    return float((rels[:k] >= threshold).sum()) / total


def average_precision_at_k(ranked_rels: Sequence[float], k: int, n_relevant: int | None = None, threshold: float = 1.0) -> float:
    """AP@k: mean of precision@i over the relevant hits in the top k, divided by min(k, #relevant)."""
    all_hits = np.asarray(ranked_rels, dtype=float) >= threshold
    total = n_relevant if n_relevant is not None else int(all_hits.sum())  # relevant items past k count too
    rels = all_hits[:k]
    if total == 0:
        return 0.0
    hits = np.cumsum(rels)
    precisions = hits / np.arange(1, len(rels) + 1)
    return float((precisions * rels).sum() / min(k, total))


def spearman(scores: Sequence[float], rels: Sequence[float]) -> float:
    """Spearman rank correlation between model scores and graded relevance (0 if undefined)."""
    s = np.asarray(scores, dtype=float)
    r = np.asarray(rels, dtype=float)
    if len(s) < 2 or np.all(s == s[0]) or np.all(r == r[0]):
        return 0.0
    return float(sps.spearmanr(s, r).statistic)


def rank_by_score(scores: Sequence[float], rels: Sequence[float]) -> np.ndarray:
    """Relevances reordered by descending score (stable, so ties keep input order)."""
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    return np.asarray(rels, dtype=float)[order]
