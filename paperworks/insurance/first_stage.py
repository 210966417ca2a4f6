"""First-stage retrieval: BM25 and the MiniLM bi-encoder, fused into reranking lists.

Each query's reranking list is the top-``list_size`` of a weighted reciprocal-rank fusion of
the two retrievers, so the lists carry the hard negatives a real first stage produces
(same body site, same procedure family). The fusion's constant and BM25 weight are chosen on
the validation queries (the pair that leaves the fewest queries without a relevant
candidate). Lists without a candidate of the required grade are first-stage misses: they
are counted (per split) and left out of reranking.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
from tqdm import tqdm

from paperworks.core.io import ArtifactError
from paperworks.core.ranking import recall_at_k

LISTS_SCHEMA = pa.schema([
    ("query_id", pa.int32()), ("query", pa.string()), ("intent", pa.string()), ("split", pa.string()),
    ("procedure_ids", pa.list_(pa.int32())), ("docs", pa.list_(pa.string())), ("labels", pa.list_(pa.float32())),
    # the query's best grades over the whole catalogue, best first: NDCG's ideal ranking
    ("ideal_labels", pa.list_(pa.float32())),
])


def tokenize(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def bm25_scores(queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
    """BM25Okapi score of every (query, doc) — n_queries × n_docs."""
    from rank_bm25 import BM25Okapi

    bm25 = BM25Okapi([tokenize(d) for d in docs])
    return np.stack([bm25.get_scores(tokenize(q)) for q in tqdm(queries, desc="bm25", mininterval=2)])


def dense_scores(encoder, queries: Sequence[str], docs: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Cosine similarity from a sentence-transformers bi-encoder — n_queries × n_docs."""
    q = encoder.encode(list(queries), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
    d = encoder.encode(list(docs), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
    return q @ d.T


def ranks_of(scores: np.ndarray) -> np.ndarray:
    """Rank (0 = best) of every doc per query; stable ties by doc index."""
    order = np.argsort(-scores, axis=1, kind="stable")
    ranks = np.empty_like(order)
    rows = np.arange(scores.shape[0])[:, None]
    ranks[rows, order] = np.arange(scores.shape[1])[None, :]
    return ranks


def rrf_scores(*score_mats: np.ndarray, k: int = 60, weights: Sequence[float] | None = None) -> np.ndarray:
    """Reciprocal-rank fusion: weighted sum of 1 / (k + rank + 1) over retrievers (equal weights by default)."""
    weights = [1.0] * len(score_mats) if weights is None else list(weights)
    if len(weights) != len(score_mats):
        raise ValueError(f"{len(weights)} weights for {len(score_mats)} retrievers")
    return sum(w / (k + ranks_of(s) + 1.0) for w, s in zip(weights, score_mats))


def hit_share(scores: np.ndarray, grades: np.ndarray, list_size: int, relevant_grade: int) -> float:
    """Share of queries whose top-``list_size`` holds a candidate of grade ≥ ``relevant_grade``."""
    top = np.argsort(-scores, axis=1, kind="stable")[:, :list_size]
    return float((np.take_along_axis(grades, top, axis=1) >= relevant_grade).any(axis=1).mean())


def choose_fusion(bm25: np.ndarray, dense: np.ndarray, grades: np.ndarray, list_size: int, relevant_grade: int,
                  rrf_ks: Sequence[int], bm25_weights: Sequence[float]) -> tuple[dict, list[dict]]:
    """The (k, BM25 weight) of the fusion that keeps a relevant candidate in the most lists of these
    (validation) queries; ties go to the smaller k, then the weight closest to 0.5. Returns (best, table)."""
    table = [{"rrf_k": int(k), "bm25_weight": float(w),
              "hit_share": hit_share(rrf_scores(bm25, dense, k=k, weights=(w, 1.0 - w)), grades, list_size, relevant_grade)}
             for k in rrf_ks for w in bm25_weights]
    best = max(table, key=lambda r: (r["hit_share"], -r["rrf_k"], -abs(r["bm25_weight"] - 0.5)))
    return best, table


def recall_table(scores: np.ndarray, grades: np.ndarray, ks: Sequence[int], threshold: int) -> dict[str, float]:
    """Mean recall@k of candidates with grade ≥ threshold (queries without any are skipped)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    out = {}
    for k in ks:
        vals = []
        for i in range(scores.shape[0]):
            n_rel = int((grades[i] >= threshold).sum())
            if n_rel:
                vals.append(recall_at_k(grades[i, order[i]], k, n_relevant=n_rel, threshold=threshold))
        out[f"recall@{k}"] = float(np.mean(vals)) if vals else 0.0
    return out


def build_lists(queries: pd.DataFrame, procedures: pd.DataFrame, fused: np.ndarray, grades: np.ndarray,
                list_size: int, relevant_grade: int) -> tuple[pd.DataFrame, int]:
    """Top-``list_size`` lists in first-stage order; returns (lists, number of first-stage misses)."""
    order = np.argsort(-fused, axis=1, kind="stable")[:, :list_size]
    ideal = -np.sort(-grades, axis=1)[:, :list_size].astype(np.float32)
    names = procedures["name"].to_numpy()
    rows, misses = [], 0
    for i, q in enumerate(queries.itertuples(index=False)):
        idx = order[i]
        labels = grades[i, idx].astype(np.float32)
        if labels.max() < relevant_grade:
            misses += 1
            continue
        rows.append(dict(query_id=q.query_id, query=q.text, intent=q.intent, split=q.split,
                         procedure_ids=idx.astype(np.int32).tolist(), docs=names[idx].tolist(), labels=labels.tolist(),
                         ideal_labels=ideal[i].tolist()))
    return pd.DataFrame(rows, columns=LISTS_SCHEMA.names), misses


def validate_lists(lists: pd.DataFrame, where: str, relevant_grade: float = 1.0) -> None:
    """Reject lists a reranker cannot learn from or be scored on; name the offending item."""
    for row in lists.itertuples(index=False):
        if not str(row.query).strip():
            raise ArtifactError(f"{where}: query {row.query_id} has empty text")
        docs, labels = list(row.docs), list(row.labels)
        if len(docs) == 0 or len(docs) != len(labels):
            raise ArtifactError(f"{where}: query {row.query_id} has {len(docs)} candidates but {len(labels)} labels")
        for pid, doc in zip(row.procedure_ids, docs):
            if not str(doc).strip():
                raise ArtifactError(f"{where}: query {row.query_id}: procedure {pid} has empty text")
        if max(labels) < relevant_grade:
            raise ArtifactError(f"{where}: query {row.query_id} has no relevant candidate (max grade {max(labels)})")
        if len(row.ideal_labels) == 0 or max(row.ideal_labels) < max(labels):
            raise ArtifactError(f"{where}: query {row.query_id}: ideal_labels must hold the query's best grades "
                                f"(max {max(row.ideal_labels, default=None)} < list max {max(labels)})")


def check_texts(df: pd.DataFrame, id_col: str, text_col: str, where: str) -> None:
    """Every row needs non-empty text; the error names the first offending item."""
    empty = df[df[text_col].fillna("").str.strip() == ""]
    if len(empty):
        raise ArtifactError(f"{where}: {id_col} {int(empty.iloc[0][id_col])} has empty {text_col}")


def read_lists(path, relevant_grade: float = 1.0) -> pd.DataFrame:
    """Checked reader for a reranking-list file (schema, texts, at least one relevant candidate)."""
    from paperworks.core.io import read_parquet

    lists = read_parquet(path, LISTS_SCHEMA)
    if len(lists) == 0:
        raise ArtifactError(f"{path}: no lists")
    validate_lists(lists, str(path), relevant_grade)
    return lists


def first_stage_order_scores(lists: pd.DataFrame) -> list[np.ndarray]:
    """Scores that reproduce the first-stage order (rank 0 best)."""
    return [-np.arange(len(r.docs), dtype=float) for r in lists.itertuples(index=False)]


def random_order_metrics(lists: pd.DataFrame, ks, shuffles: int, seed: int) -> pd.DataFrame:
    """Per-query metrics of a random ranking, averaged over ``shuffles`` seeded permutations."""
    from paperworks.insurance.crossencoder import per_query_metrics

    rng = np.random.default_rng(seed)
    frames = [per_query_metrics(lists, [rng.random(len(r.docs)) for r in lists.itertuples(index=False)], ks)
              for _ in range(shuffles)]
    cols = [c for c in frames[0].columns if c not in ("query_id", "intent")]
    out = frames[0].copy()
    out[cols] = np.mean([f[cols].to_numpy() for f in frames], axis=0)
    return out
