"""Metrics over ranked lists (one relevant gallery image per query) and the contact sheet."""
from __future__ import annotations

import numpy as np
from PIL import Image

from paperworks.core.ranking import average_precision_at_k, recall_at_k
from paperworks.core.render import contact_sheet

KS = (1, 5, 10)


def per_query_metrics(ranked_ids: np.ndarray, targets: np.ndarray) -> dict[str, np.ndarray]:
    """AP@10 and R@{1,5,10} per query, via ``core.ranking`` (each query has exactly one relevant item)."""
    rels = (ranked_ids[:, :10] == targets[:, None]).astype(float)
    out = {"map@10": np.array([average_precision_at_k(r, 10, n_relevant=1) for r in rels])}
    for k in KS:
        out[f"r@{k}"] = np.array([recall_at_k(r, k, n_relevant=1) for r in rels])
    return out


def summarise(per_query: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, float]:
    return {k: float(v[mask].mean()) for k, v in per_query.items()}


def sheet_for_queries(
    captions: list[str], before: np.ndarray, after: np.ndarray, targets: np.ndarray, images: np.ndarray, top: int = 5
) -> Image.Image:
    """Two rows per query: the top-``top`` before reranking (fusion) and after (consensus); target in green."""
    rows, caps, borders, labels = [], [], [], []
    green, grey = (0, 170, 0), (200, 200, 200)
    for cap, b, a, t in zip(captions, before, after, targets):
        for tag, ids in (("BEFORE (fusion)", b), ("AFTER (consensus)", a)):
            ids = ids[:top]
            rows.append([images[i] for i in ids])
            caps.append(f"{tag}: {cap}" if tag.startswith("BEFORE") else f"{tag}; target rank "
                        f"{int(np.flatnonzero(a == t)[0]) + 1 if (a == t).any() else '>10'}")
            borders.append([green if i == t else grey for i in ids])
            labels.append([f"#{r + 1}" for r in range(len(ids))])
    return contact_sheet(rows, caps, borders, labels, scale=2, caption_width=330)
