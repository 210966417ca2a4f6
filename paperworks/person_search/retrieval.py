"""Stage-1 indexing: one exact inner-product index per backbone (faiss flat, torch or numpy).

The method's stage 1 (``Stage1``) searches only the *anchor* branches (full, structured ×
every backbone) over the gallery: only they add candidates (Eq. 3). The facet branches score
the pool, never the gallery (``fusion.pool_scores``). ``search_branches`` searches every
branch over the gallery; the pipeline uses it for the baselines (each branch alone) and the
no-anchor ablation, never for the method.

Embeddings are L2-normalised, so inner product = cosine. All engines are exact;
``benchmarks/person_search_index.py`` measures which is faster.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from paperworks.person_search.fusion import FusionConfig, branch_weights, fuse_pools, padded_pools, pool_scores, query_chunks
from paperworks.person_search.text import VIEWS

ENGINES = ("faiss", "torch", "numpy")


@dataclass
class FlatIndex:
    """Exact inner-product search over ``gallery`` with either engine."""

    gallery: np.ndarray
    engine: str = "faiss"

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine {self.engine!r} not in {ENGINES}")
        self.gallery = np.ascontiguousarray(self.gallery, dtype=np.float32)
        self._faiss = None
        if self.engine == "faiss":
            import faiss

            self._faiss = faiss.IndexFlatIP(self.gallery.shape[1])
            self._faiss.add(self.gallery)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids), each [n_queries, k], best first."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        k = min(k, len(self.gallery))
        if self._faiss is not None:
            scores, ids = self._faiss.search(q, k)
            return scores, ids.astype(np.int64)
        if self.engine == "torch":
            top = torch.topk(torch.from_numpy(q) @ torch.from_numpy(self.gallery).T, k, dim=1, sorted=True)
            return top.values.numpy(), top.indices.numpy().astype(np.int64)
        s = q @ self.gallery.T
        top = np.argpartition(-s, k - 1, axis=1)[:, :k]
        top_s = np.take_along_axis(s, top, axis=1)
        order = np.argsort(-top_s, axis=1, kind="stable")
        return np.take_along_axis(top_s, order, axis=1), np.take_along_axis(top, order, axis=1).astype(np.int64)


def search_branches(index: FlatIndex, query_views: np.ndarray, present: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k for every view of every query: [n_views, n_queries, k]; missing views get id −1, score −inf."""
    n_q, n_v, _ = query_views.shape
    k = min(k, len(index.gallery))
    ids = np.full((n_v, n_q, k), -1, dtype=np.int64)
    scores = np.full((n_v, n_q, k), -np.inf, dtype=np.float32)
    for v in range(n_v):
        rows = np.flatnonzero(present[:, v])
        if len(rows):
            s, i = index.search(query_views[rows, v], k)
            ids[v, rows], scores[v, rows] = i, s
    return scores, ids


@dataclass
class Stage1:
    """The method's stage 1 for a batch of queries: anchor search → pool → facet scores on the pool → fusion."""

    galleries: list[np.ndarray]  # per backbone [G, D]
    cfg: FusionConfig
    topk: int  # K: candidates each anchor branch returns
    engine: str = "faiss"

    def __post_init__(self) -> None:
        self.indexes = [FlatIndex(g, self.engine) for g in self.galleries]
        self.galleries = [ix.gallery for ix in self.indexes]
        self.anchor_cols = [VIEWS.index(v) for v in self.cfg.anchor_views]

    def pool(self, query_views: list[np.ndarray], present: np.ndarray) -> np.ndarray:
        """Eq. 3: [Q, P] union of the anchor branches' top-K (−1 padding); a missing anchor adds nothing."""
        n_q = len(present)
        lists = []
        for ix, qv in zip(self.indexes, query_views):
            anchors = np.ascontiguousarray(qv[:, self.anchor_cols].reshape(-1, qv.shape[-1]))
            _, ids = ix.search(anchors, self.topk)  # one batched search for every anchor of every query
            ids = ids.reshape(n_q, len(self.anchor_cols), -1)
            lists.append(np.where(present[:, self.anchor_cols, None], ids, -1))
        return padded_pools(np.concatenate(lists, axis=1))

    def fuse(self, pool: np.ndarray, query_views: list[np.ndarray], present: np.ndarray, depth: int):
        """Eqs. 4–7 over the pools: top-``depth`` ids and fused scores [Q, depth]."""
        raw = pool_scores(pool, self.galleries, query_views)
        return fuse_pools(pool, raw, branch_weights(present, len(self.galleries), self.cfg), self.cfg, depth)

    def rank(self, query_views: list[np.ndarray], present: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        ids, scores = [], []
        for sl in query_chunks(len(present)):  # bounded memory for large query sets
            qv = [v[sl] for v in query_views]
            i, s = self.fuse(self.pool(qv, present[sl]), qv, present[sl], depth)
            ids.append(i)
            scores.append(s)
        return np.concatenate(ids), np.concatenate(scores)
