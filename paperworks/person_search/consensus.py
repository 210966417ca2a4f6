"""Uncertainty-gated consensus over the top-10 pool (no exchange of text between experts).

Sources s ∈ {stage-1 fusion, cross, cloze, verify} each score the pool of a query.
1. Calibrate: p_s = softmax(score_s / T_s) over the pool, T_s fitted on the validation
   queries (those whose target reached the pool) by minimising the target's NLL.
2. Reliability: r_s = the source's top-1 accuracy on those validation queries;
   weights w_s = r_s / Σ r.
3. Gate: the fused stage-1 prediction is *confident* when its certainty is at least τ: the
   margin p_0[1] − p_0[2], the negative entropy, or (``agreement``, not in the paper) the number
   of the six single views (each over all backbones) whose own top-1 is the fused top-1, ties
   broken by the margin; τ is the value, among the validation
   confidences, that maximises validation mAP@10. ``fitted`` (not in the paper, which names no
   measure): the kind is fitted too, the one whose fitted gate scores the highest validation mAP@10
   (ties: the first of margin, entropy, agreement). Confident → keep the stage-1 order;
   otherwise rank by Σ_s w_s p_s (the experts reweighted by calibrated reliability).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from paperworks.core.ranking import average_precision_at_k

T_GRID = np.exp(np.linspace(np.log(0.01), np.log(100.0), 121))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def fit_temperature(scores: np.ndarray, target_pos: np.ndarray) -> float:
    """T minimising the mean NLL of the target's position (rows with a target only)."""
    rows = target_pos >= 0
    if not rows.any():
        return 1.0
    s, t = scores[rows], target_pos[rows]
    nll = [-np.log(softmax(s / T)[np.arange(len(t)), t] + 1e-12).mean() for T in T_GRID]
    return float(T_GRID[int(np.argmin(nll))])


CONFIDENCE_KINDS = ("margin", "entropy", "agreement")


def view_agreement(fused_top1: np.ndarray, view_top1: np.ndarray) -> np.ndarray:
    """[Q] how many single views name the fused top-1 as their own top-1 (``view_top1`` [Q, V]; a view
    the query lacks holds −1 and never agrees)."""
    return (view_top1 == fused_top1[:, None]).sum(1)


def confidence(p: np.ndarray, kind: str, agreement: np.ndarray | None = None) -> np.ndarray:
    """Per-row certainty of a distribution over the pool: top-2 margin, negative entropy, or the view
    agreement count (:func:`view_agreement`) plus half the margin (in [0, 0.5]: it orders queries within
    a count, never across counts)."""
    if kind not in CONFIDENCE_KINDS:
        raise ValueError(f"confidence kind {kind!r} not in {CONFIDENCE_KINDS}")
    if kind == "entropy":
        return (p * np.log(p + 1e-12)).sum(1)
    top2 = -np.sort(-p, axis=1)[:, :2]
    margin = top2[:, 0] - top2[:, 1]
    if kind == "margin":
        return margin
    if agreement is None or len(agreement) != len(p):
        raise ValueError("confidence 'agreement' needs the view agreement of every query (view_agreement)")
    return agreement + 0.5 * margin


def mean_ap_of_order(order: np.ndarray, target_pos: np.ndarray, k: int = 10) -> np.ndarray:
    """Per-query AP@k when the pool is reordered by ``order`` (one relevant item per query)."""
    rels = (order == target_pos[:, None]).astype(float)
    return np.array([average_precision_at_k(r, k, n_relevant=1) for r in rels])


@dataclass
class Consensus:
    temperatures: dict[str, float]
    weights: dict[str, float]
    threshold: float
    kind: str
    val_map: float = float("nan")  # the fitted gate's validation mAP@10
    val_map_by_kind: dict[str, float] | None = None  # kind ``fitted``: every candidate kind's fitted gate

    def combine(self, scores: dict[str, np.ndarray], agreement: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(new pool order [Q, P], gate kept stage-1 [Q] bool, consensus distribution [Q, P]).
        ``agreement``: the per-query view agreement, which the ``agreement`` confidence reads."""
        probs = {s: softmax(scores[s] / self.temperatures[s]) for s in self.weights}
        mixed = sum(self.weights[s] * probs[s] for s in self.weights)
        keep = self.confidence(probs["fusion"], agreement) >= self.threshold
        expert_order = np.argsort(-mixed, axis=1, kind="stable")
        stage1_order = np.argsort(-scores["fusion"], axis=1, kind="stable")
        order = np.where(keep[:, None], stage1_order, expert_order)
        return order, keep, mixed

    def confidence(self, p_fusion: np.ndarray, agreement: np.ndarray | None = None) -> np.ndarray:
        """The gate's certainty of the calibrated stage-1 distribution (what ``threshold`` is compared with)."""
        return confidence(p_fusion, self.kind, agreement)


def fit_consensus(val_scores: dict[str, np.ndarray], target_pos: np.ndarray, kind: str = "margin",
                  agreement: np.ndarray | None = None) -> Consensus:
    """Fit temperatures, reliabilities and the gate threshold on validation queries (``agreement``: their
    view agreement, for the ``agreement`` confidence). ``kind`` ``fitted``: every kind of
    :data:`CONFIDENCE_KINDS` is fitted and the one with the highest validation mAP@10 is returned."""
    if kind == "fitted":
        fits = [fit_consensus(val_scores, target_pos, k, agreement) for k in CONFIDENCE_KINDS]
        best = max(fits, key=lambda c: c.val_map)  # max keeps the first of equal values
        return replace(best, val_map_by_kind={c.kind: c.val_map for c in fits})
    has = target_pos >= 0
    temps = {s: fit_temperature(v, target_pos) for s, v in val_scores.items()}
    rel = {}
    for s, v in val_scores.items():
        acc = float((v[has].argmax(1) == target_pos[has]).mean()) if has.any() else 0.0
        rel[s] = max(acc, 1e-3)
    total = sum(rel.values())
    weights = {s: r / total for s, r in rel.items()}
    p0 = softmax(val_scores["fusion"] / temps["fusion"])
    conf = confidence(p0, kind, agreement)
    best_t, best_map = np.inf, -1.0
    for tau in np.concatenate([[np.inf], np.sort(conf)[::-1], [-np.inf]]):  # +inf: always rerank
        c = Consensus(temps, weights, float(tau), kind)
        order, _, _ = c.combine(val_scores, agreement)
        m = float(mean_ap_of_order(order, target_pos).mean())
        if m > best_map + 1e-12:
            best_t, best_map = float(tau), m
    return Consensus(temps, weights, best_t, kind, best_map)
