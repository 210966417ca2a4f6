"""Anchor-constrained multi-view fusion (FaLCon §3.2, Eqs. 3–7), per query.

Branches b = (backbone, view). For one query:

- Eq. 3, anchor constraint: the candidate pool C is the union of the top-K lists of the
  *anchor* branches (views ``full`` and ``structured``). Facet branches never add a
  candidate; they only re-score the pool. (Ablation: C = union of every branch.)
- Eq. 4, per-query percentile normalisation: for each branch, its exact scores over C are
  centred on their median and scaled by the P90–P10 spread, then clipped to [−3, 3].
  (Ablation: z-score, (s − mean) / std, same clip.)
- Eq. 5, fixed-weight fusion: S(g) = Σ_b w_b ŝ_b(g) / Σ_b w_b with w_b the view's weight
  (backbones weigh the same; a query's missing views drop out and the weights renormalise).
- Eq. 6, reciprocal-rank agreement: A(g) = Σ_b w_b [g ∈ L_b] (k+1)/(k + rank_b(g)) / Σ_b w_b,
  1 when every branch ranks g first. (Ablation: λ = 0.)
- Eq. 7: F(g) = S(g) + λ·A(g); the pool is ranked by F.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from paperworks.person_search.text import VIEWS


@dataclass(frozen=True)
class FusionConfig:
    view_weights: tuple[float, ...]  # one per VIEWS entry
    anchor_views: tuple[str, ...] = ("full", "structured")
    use_anchor: bool = True
    normalisation: str = "percentile"  # or "zscore"
    percentiles: tuple[float, float, float] = (10.0, 50.0, 90.0)
    clip: float = 3.0
    agreement_weight: float = 1.0
    rrf_k: float = 10.0


def ablations(cfg: FusionConfig) -> dict[str, FusionConfig]:
    """The method and its three ablations (plus anchors-only, which drops every facet branch)."""
    facetless = tuple(w if v in cfg.anchor_views else 0.0 for v, w in zip(VIEWS, cfg.view_weights))
    return {
        "fusion": cfg,
        "fusion_no_anchor": replace(cfg, use_anchor=False),
        "fusion_zscore": replace(cfg, normalisation="zscore"),
        "fusion_no_agreement": replace(cfg, agreement_weight=0.0),
        "fusion_anchors_only": replace(cfg, view_weights=facetless),
    }


def percentile_normalise(scores: np.ndarray, percentiles=(10.0, 50.0, 90.0), clip: float = 3.0) -> np.ndarray:
    """Eq. 4 per row: (s − P_mid) / (P_hi − P_lo), clipped to [−clip, clip]."""
    lo, mid, hi = np.percentile(scores, percentiles, axis=-1, keepdims=True)
    return np.clip((scores - mid) / np.maximum(hi - lo, 1e-6), -clip, clip)


def zscore_normalise(scores: np.ndarray, clip: float = 3.0) -> np.ndarray:
    mean, std = scores.mean(axis=-1, keepdims=True), scores.std(axis=-1, keepdims=True)
    return np.clip((scores - mean) / np.maximum(std, 1e-6), -clip, clip)


def candidate_pool(topk_ids: np.ndarray, branch_views: np.ndarray, present: np.ndarray, cfg: FusionConfig) -> np.ndarray:
    """Eq. 3: sorted unique gallery ids of the anchor branches' lists (all branches without the constraint)."""
    use = present & (np.isin(branch_views, cfg.anchor_views) if cfg.use_anchor else True)
    ids = topk_ids[use].ravel()
    return np.unique(ids[ids >= 0])


def agreement(topk_ids: np.ndarray, pool: np.ndarray, weights: np.ndarray, rrf_k: float) -> np.ndarray:
    """Eq. 6: weighted reciprocal-rank agreement of the branches, in [0, 1] per pool candidate."""
    out = np.zeros(len(pool))
    ranks = np.arange(1, topk_ids.shape[1] + 1)
    for ids, w in zip(topk_ids, weights):
        if w == 0:
            continue
        pos = np.searchsorted(pool, ids)
        hit = (ids >= 0) & (pos < len(pool)) & (pool[np.minimum(pos, len(pool) - 1)] == ids)
        np.add.at(out, pos[hit], w * (rrf_k + 1) / (rrf_k + ranks[hit]))
    return out / max(weights.sum(), 1e-12)


def fuse_query(
    topk_ids: np.ndarray,  # [B, K] every branch's list for this query (−1 padding)
    exact_scores,  # callable(pool ids) -> [B, |pool|] exact branch scores
    branch_views: np.ndarray,  # [B] view name of each branch
    present: np.ndarray,  # [B] whether the branch's view exists for this query
    cfg: FusionConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """Pool ids ranked by the fused score F (Eq. 7), and F itself, best first."""
    pool = candidate_pool(topk_ids, branch_views, present, cfg)
    view_w = dict(zip(VIEWS, cfg.view_weights))
    weights = np.array([view_w[v] for v in branch_views]) * present
    raw = exact_scores(pool)
    norm = percentile_normalise(raw, cfg.percentiles, cfg.clip) if cfg.normalisation == "percentile" \
        else zscore_normalise(raw, cfg.clip)
    fused = (weights[:, None] * norm).sum(0) / max(weights.sum(), 1e-12)
    if cfg.agreement_weight > 0:
        fused = fused + cfg.agreement_weight * agreement(topk_ids, pool, weights, cfg.rrf_k)
    order = np.argsort(-fused, kind="stable")
    return pool[order], fused[order]


def fuse_all(
    topk_ids: np.ndarray,  # [M backbones, V views, Q, K]
    gallery: list[np.ndarray],  # per backbone [G, D]
    query_views: list[np.ndarray],  # per backbone [Q, V, D]
    present: np.ndarray,  # [Q, V]
    cfg: FusionConfig,
    depth: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Fuse every query; return the top-``depth`` ids and fused scores [Q, depth] (−1 / −inf padding)."""
    n_m, n_v, n_q, k = topk_ids.shape
    branch_views = np.array([v for _ in range(n_m) for v in VIEWS[:n_v]])
    out_ids = np.full((n_q, depth), -1, dtype=np.int64)
    out_scores = np.full((n_q, depth), -np.inf, dtype=np.float32)
    for q in range(n_q):
        ids_q = topk_ids[:, :, q].reshape(n_m * n_v, k)
        pres_q = np.tile(present[q], n_m)

        def exact(pool: np.ndarray, q: int = q) -> np.ndarray:
            # [M*V, |pool|]: each backbone's view embeddings against its own gallery embeddings
            return np.concatenate([query_views[m][q] @ gallery[m][pool].T for m in range(n_m)])

        ranked, fused = fuse_query(ids_q, exact, branch_views, pres_q, cfg)
        n = min(depth, len(ranked))
        out_ids[q, :n], out_scores[q, :n] = ranked[:n], fused[:n]
    return out_ids, out_scores


def single_branch(topk_ids: np.ndarray, backbone: int, view: int, depth: int) -> np.ndarray:
    """One backbone, one view, no fusion: its own top-``depth`` list [Q, depth]."""
    return topk_ids[backbone, view, :, :depth].copy()


def view_alone(
    topk_ids: np.ndarray, gallery: list[np.ndarray], query_views: list[np.ndarray], present: np.ndarray, view: int, depth: int
) -> np.ndarray:
    """One view, every backbone: the union of that view's lists ranked by the mean raw cosine [Q, depth]."""
    n_m, _, n_q, _ = topk_ids.shape
    out = np.full((n_q, depth), -1, dtype=np.int64)
    for q in range(n_q):
        if not present[q, view]:
            continue  # the query does not mention this facet: nothing to retrieve with
        ids = topk_ids[:, view, q].ravel()
        pool = np.unique(ids[ids >= 0])
        score = np.mean([gallery[m][pool] @ query_views[m][q, view] for m in range(n_m)], axis=0)
        ranked = pool[np.argsort(-score, kind="stable")][:depth]
        out[q, : len(ranked)] = ranked
    return out
