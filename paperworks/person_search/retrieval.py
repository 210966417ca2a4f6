"""Stage-1 indexing: one inner-product index per backbone (faiss flat or numpy), every
backbone × view branch searched for its top-K gallery candidates.

Embeddings are L2-normalised, so inner product = cosine. Faiss ``IndexFlatIP`` is exact,
like the numpy path; ``benchmarks/person_search_index.py`` measures which is faster.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ENGINES = ("faiss", "numpy")


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
