"""Anchor-constrained multi-view fusion (FaLCon §3.2, Eqs. 3–7).

Branches b = (backbone, view). For one query:

- Eq. 3, anchor constraint: the candidate pool C is the union of the top-K lists of the
  *anchor* branches (views ``full`` and ``structured``). Facet branches never add a
  candidate; they only re-score the pool. (Ablation: C = union of every branch.)
- Eq. 4, per-query percentile normalisation: for each branch, its exact scores over C are
  centred on their median and scaled by the P90–P10 spread, then clipped to [−3, 3].
  (Ablation: z-score, (s − mean) / std, same clip.)
- Eq. 5, fixed-weight fusion: S(g) = Σ_b w_b ŝ_b(g) / Σ_b w_b with w_b the view's weight
  (backbones weigh the same; a query's missing views drop out and the weights renormalise).
- Eq. 6, reciprocal-rank agreement: A(g) = Σ_b w_b [rank_b(g) ≤ K] (k+1)/(k + rank_b(g)) / Σ_b w_b,
  1 when every branch ranks g first. rank_b(g) is g's rank among the *pool* under branch b's
  exact scores. Deviation (for speed, issue 13): the paper ranks over each branch's own
  gallery list, which needs a full gallery scan of every facet branch; ranking over the pool
  needs only the anchor searches. For an anchor branch the two ranks coincide on its list
  (the pool contains its whole top-K). (Ablation: λ = 0.)
- Eq. 7: F(g) = S(g) + λ·A(g); the pool is ranked by F.

Two implementations of the same definition: ``fuse_query`` (one query, a readable loop; the
reference the tests compare against) and ``fuse_pools`` (every query at once over pools padded
with −1; what the pipeline and the benchmark run).
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
    agreement_depth: int = 100  # K of Eq. 6: a branch votes for the candidates it ranks in its top K of the pool


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
    return np.unique(ids[ids >= 0])  # −1 pads short lists (a missing view): never a candidate


def pool_ranks(raw: np.ndarray) -> np.ndarray:
    """1-based rank of every pool entry under each branch's scores (ties: the lower gallery id first)."""
    order = np.argsort(-raw, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, raw.shape[-1] + 1), axis=-1)
    return ranks


def fuse_query(
    topk_ids: np.ndarray,  # [B, K] every branch's list for this query (−1 padding)
    exact_scores,  # callable(pool ids) -> [B, |pool|] exact branch scores
    branch_views: np.ndarray,  # [B] view name of each branch
    present: np.ndarray,  # [B] whether the branch's view exists for this query
    cfg: FusionConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """One query: pool ids ranked by the fused score F (Eq. 7), and F itself, best first."""
    pool = candidate_pool(topk_ids, branch_views, present, cfg)
    view_w = dict(zip(VIEWS, cfg.view_weights))
    weights = np.array([view_w[v] for v in branch_views]) * present
    raw = exact_scores(pool)
    norm = percentile_normalise(raw, cfg.percentiles, cfg.clip) if cfg.normalisation == "percentile" \
        else zscore_normalise(raw, cfg.clip)
    fused = (weights[:, None] * norm).sum(0) / max(weights.sum(), 1e-12)
    if cfg.agreement_weight > 0:
        ranks = pool_ranks(raw)
        votes = np.where(ranks <= cfg.agreement_depth, (cfg.rrf_k + 1) / (cfg.rrf_k + ranks), 0.0)
        fused = fused + cfg.agreement_weight * (weights[:, None] * votes).sum(0) / max(weights.sum(), 1e-12)
    order = np.argsort(-fused, kind="stable")
    return pool[order], fused[order]


# ----------------------------------------------------------------- every query at once

def padded_pools(lists: np.ndarray) -> np.ndarray:
    """[Q, L, K] candidate lists (−1 padding) → [Q, P] sorted unique ids per row, −1 after the last one."""
    n_q = lists.shape[0]
    big = np.iinfo(np.int64).max
    x = np.sort(lists.reshape(n_q, -1).astype(np.int64), axis=1)
    x[x < 0] = big  # padding of short lists is not a candidate
    dup = np.zeros_like(x, dtype=bool)
    dup[:, 1:] = x[:, 1:] == x[:, :-1]
    x[dup] = big
    x = np.sort(x, axis=1)
    width = max(int((x < big).sum(1).max(initial=0)), 1)
    x = x[:, :width]
    x[x == big] = -1
    return x


def pool_scores(pool: np.ndarray, galleries: list[np.ndarray], query_views: list[np.ndarray]) -> np.ndarray:
    """Exact branch scores over each query's pool: [Q, M·V, P] (backbone-major), NaN at padding."""
    safe = np.maximum(pool, 0)
    out = np.concatenate([np.einsum("qpd,qvd->qvp", g[safe], qv, optimize=True) for g, qv in zip(galleries, query_views)], axis=1)
    out = out.astype(np.float64)
    out[np.broadcast_to((pool < 0)[:, None, :], out.shape)] = np.nan
    return out


def _masked_percentiles(raw: np.ndarray, n: np.ndarray, percentiles) -> list[np.ndarray]:
    """numpy's 'linear' percentiles of each row's first n valid entries (NaN padding sorts last)."""
    srt = np.sort(raw, axis=-1)
    out = []
    for p in percentiles:
        pos = (p / 100.0) * (n - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        t = pos - lo
        a, b = np.take_along_axis(srt, lo, -1), np.take_along_axis(srt, hi, -1)
        out.append(np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t))  # numpy's own lerp
    return out


def fuse_pools(pool: np.ndarray, raw: np.ndarray, weights: np.ndarray, cfg: FusionConfig, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. 4–7 for every query: pool [Q, P] (−1 padding), raw [Q, B, P] (NaN padding), weights [Q, B]
    (view weight × present) → top-``depth`` ids and F [Q, depth] (−1 / −inf padding)."""
    n_q, n_b, width = raw.shape
    valid = pool >= 0
    n = np.maximum(valid.sum(1), 1)[:, None, None]
    if cfg.normalisation == "percentile":
        lo, mid, hi = _masked_percentiles(raw, n, cfg.percentiles)
        norm = np.clip((raw - mid) / np.maximum(hi - lo, 1e-6), -cfg.clip, cfg.clip)
    else:
        mean = np.where(valid[:, None], raw, 0.0).sum(-1, keepdims=True) / n
        std = np.sqrt(np.where(valid[:, None], (raw - mean) ** 2, 0.0).sum(-1, keepdims=True) / n)
        norm = np.clip((raw - mean) / np.maximum(std, 1e-6), -cfg.clip, cfg.clip)
    w_sum = np.maximum(weights.sum(1), 1e-12)[:, None]
    fused = np.einsum("qb,qbp->qp", weights, np.nan_to_num(norm)) / w_sum
    if cfg.agreement_weight > 0:
        ranks = pool_ranks(np.where(valid[:, None], raw, -np.inf))
        votes = np.where(ranks <= cfg.agreement_depth, (cfg.rrf_k + 1) / (cfg.rrf_k + ranks), 0.0)
        fused = fused + cfg.agreement_weight * np.einsum("qb,qbp->qp", weights, votes) / w_sum
    fused = np.where(valid, fused, -np.inf)
    order = np.argsort(-fused, axis=1, kind="stable")[:, :depth]
    ids = np.take_along_axis(pool, order, 1)
    scores = np.take_along_axis(fused, order, 1).astype(np.float32)
    if ids.shape[1] < depth:  # fewer candidates than depth in every row: pad
        pad = depth - ids.shape[1]
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
    return ids, scores


def branch_weights(present: np.ndarray, n_backbones: int, cfg: FusionConfig) -> np.ndarray:
    """[Q, M·V] weight of every branch (backbone-major) for every query: its view's weight, 0 if the view is missing."""
    return np.tile(np.asarray(cfg.view_weights, dtype=np.float64)[None] * present, (1, n_backbones))


def fuse_all(
    topk_ids: np.ndarray,  # [M backbones, V views, Q, K]
    gallery: list[np.ndarray],  # per backbone [G, D]
    query_views: list[np.ndarray],  # per backbone [Q, V, D]
    present: np.ndarray,  # [Q, V]
    cfg: FusionConfig,
    depth: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Fuse every query from the branches' lists; top-``depth`` ids and fused scores [Q, depth] (−1 / −inf padding)."""
    n_m, n_v, n_q, k = topk_ids.shape
    cols = [v for v in range(n_v) if not cfg.use_anchor or VIEWS[v] in cfg.anchor_views]
    lists = np.where(present.T[None, :, :, None], topk_ids, -1)[:, cols]  # a missing view contributes nothing
    lists = lists.transpose(2, 0, 1, 3).reshape(n_q, -1, k)
    ids, scores = [], []
    for sl in query_chunks(n_q):  # bounded memory: the pool gather is [chunk, P, D] per backbone
        pool = padded_pools(lists[sl])
        raw = pool_scores(pool, gallery, [qv[sl] for qv in query_views])
        i, s = fuse_pools(pool, raw, branch_weights(present[sl], n_m, cfg), cfg, depth)
        ids.append(i)
        scores.append(s)
    return np.concatenate(ids), np.concatenate(scores)


def query_chunks(n_q: int, size: int = 256) -> list[slice]:
    return [slice(a, min(a + size, n_q)) for a in range(0, n_q, size)] or [slice(0, 0)]


def fuse_all_slow(topk_ids, gallery, query_views, present, cfg: FusionConfig, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference: ``fuse_query`` in a loop over queries (tests compare ``fuse_all`` against it)."""
    n_m, n_v, n_q, k = topk_ids.shape
    branch_views = np.array([v for _ in range(n_m) for v in VIEWS[:n_v]])
    out_ids = np.full((n_q, depth), -1, dtype=np.int64)
    out_scores = np.full((n_q, depth), -np.inf, dtype=np.float32)
    for q in range(n_q):
        ids_q = topk_ids[:, :, q].reshape(n_m * n_v, k)
        pres_q = np.tile(present[q], n_m)

        def exact(pool: np.ndarray, q: int = q) -> np.ndarray:
            # [M*V, |pool|]: each backbone's view embeddings against its own gallery embeddings
            return np.concatenate([query_views[m][q] @ gallery[m][pool].T for m in range(n_m)]).astype(np.float64)

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
