"""The search tool: BM25 (rank-bm25) over the world's documents, offline and deterministic.

An empty or all-unknown query returns no documents instead of failing the episode; results are
cached per query string because rollouts repeat the same queries many times.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from rank_bm25 import BM25Okapi


def terms_of(text: str) -> list[str]:
    """Words, adjacent-word pairs and a start marker: pairs and the marker make the search
    order-aware, so "a mentor" finds a's mentor and not the document where a is someone's mentor."""
    words = text.split()
    if not words:
        return []
    return words + [f"{a}_{b}" for a, b in zip(["^"] + words, words)]


class SearchTool:
    def __init__(self, docs: list[str], top_k: int = 1):
        if not docs:
            raise ValueError("SearchTool needs at least one document")
        self.docs = list(docs)
        self.top_k = top_k
        indexed = [terms_of(d) for d in self.docs]
        self._bm25 = BM25Okapi(indexed)
        self._vocab = {t for terms in indexed for t in terms}
        self.search = lru_cache(maxsize=200_000)(self._search)

    def _search(self, query: str) -> tuple[str, ...]:
        terms = [t for t in terms_of(query) if t in self._vocab]
        if not terms:
            return ()
        scores = self._bm25.get_scores(terms)
        # stable order: highest score first, ties broken by document index
        order = np.lexsort((np.arange(len(scores)), -scores))[: self.top_k]
        return tuple(self.docs[i] for i in order if scores[i] > 0)
