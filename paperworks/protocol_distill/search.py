"""The search tool: BM25 (rank-bm25) over the world's documents, offline and deterministic.

An empty or all-unknown query returns no documents instead of failing the episode; results are
cached per query string because rollouts repeat the same queries many times.

rank-bm25 fits the statistics (idf with its epsilon floor, document lengths, k1, b); its `get_scores`
then loops in Python over every document for every query term (≈ 5.7 ms a search over the default
world's 6,790 documents). `bm25_scores` evaluates the same expression only over the documents that
hold each term, from posting lists built once: a document without a term gains exactly 0.0 from it
in rank-bm25 too, so the scores are the same floats, bit for bit (tested against `get_scores`).
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
        postings: dict[str, list[int]] = {}
        for i, freqs in enumerate(self._bm25.doc_freqs):
            for t in freqs:
                postings.setdefault(t, []).append(i)
        # term -> (documents holding it, ascending; its count in each)
        self._postings = {
            t: (np.array(ids), np.array([self._bm25.doc_freqs[i][t] for i in ids])) for t, ids in postings.items()
        }
        self._doc_len = np.array(self._bm25.doc_len)
        self._vocab = set(self._postings)
        self.search = lru_cache(maxsize=200_000)(self._search)

    def bm25_scores(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(documents holding at least one of ``terms``, ascending; their BM25Okapi scores). Every other
        document scores 0. Same expression and term order as ``BM25Okapi.get_scores``."""
        bm = self._bm25
        ids = np.unique(np.concatenate([self._postings[t][0] for t in terms]))
        score = np.zeros(len(ids))
        for q in terms:
            docs, q_freq = self._postings[q]
            doc_len = self._doc_len[docs]
            score[np.searchsorted(ids, docs)] += (bm.idf.get(q) or 0) * (
                q_freq * (bm.k1 + 1) / (q_freq + bm.k1 * (1 - bm.b + bm.b * doc_len / bm.avgdl)))
        return ids, score

    def _search(self, query: str) -> tuple[str, ...]:
        terms = [t for t in terms_of(query) if t in self._vocab]
        if not terms:
            return ()
        ids, scores = self.bm25_scores(terms)
        # stable order: highest score first, ties broken by document index (documents outside `ids` score 0)
        order = np.lexsort((ids, -scores))[: self.top_k]
        return tuple(self.docs[ids[i]] for i in order if scores[i] > 0)
