"""Gated MLA and dense attention (decode cache == parallel forward) and Attention Residuals."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from paperworks.core.lm.hybrid.attn_res import ResidualStream
from paperworks.core.lm.hybrid.mla import DenseAttention, GatedMLA, GrowingCache


def _prefill_then_steps(layer, x, split):
    y_full = layer(x)
    y_pre, cache = layer(x[:, :split], return_cache=True)
    steps = []
    for i in range(split, x.shape[1]):
        y, cache = layer.step(x[:, i], cache)
        steps.append(y)
    return y_full, y_pre, torch.stack(steps, 1), cache


def test_gated_mla_latent_cache_decode_equals_forward():
    torch.manual_seed(0)
    layer = GatedMLA(24, 2, 8, kv_rank=6).double()
    x = torch.randn(2, 40, 24, dtype=torch.float64)
    y_full, y_pre, y_steps, cache = _prefill_then_steps(layer, x, 7)
    assert (y_pre - y_full[:, :7]).abs().max() <= 1e-12
    assert (y_steps - y_full[:, 7:]).abs().max() <= 1e-12   # absorbed up-projections == explicit k, v
    # the cache is the latent only: r numbers per token (not 2·H·D)
    assert cache.length == 40 and cache.view().shape == (2, 40, 6)
    assert cache.nbytes() == 2 * 40 * 6 * 8


def mla_reference(layer, x):
    """Explicit per-head softmax attention from GatedMLA's weights (an independent reading)."""
    h, d = layer.h, layer.d
    latent = F.rms_norm(x @ layer.kv_down.weight.T, (layer.r,), layer.kv_norm.weight, 1e-6)
    t = x.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    heads = []
    for i in range(h):
        rows = slice(i * d, (i + 1) * d)
        q = x @ layer.q_proj.weight[rows].T
        k = latent @ layer.k_up.weight[rows].T
        v = latent @ layer.v_up.weight[rows].T
        scores = (q @ k.transpose(-1, -2) / d ** 0.5).masked_fill(~causal, float("-inf"))
        heads.append(scores.softmax(-1) @ v)
    gate = torch.sigmoid(x @ layer.gate_proj.weight.T)
    return (torch.cat(heads, -1) * gate) @ layer.o_proj.weight.T


def test_gated_mla_matches_explicit_attention_and_is_position_free():
    torch.manual_seed(0)
    layer = GatedMLA(16, 2, 8, kv_rank=4).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    with torch.no_grad():
        assert (layer(x) - mla_reference(layer, x)).abs().max() <= 1e-12
        # NoPE: the last position's output depends on the set of earlier tokens, not their order
        perm = torch.tensor([2, 0, 4, 1, 3, 7, 6, 5, 8])
        assert torch.allclose(layer(x)[:, -1], layer(x[:, perm])[:, -1], atol=1e-12)


def test_dense_attention_kv_cache_decode_equals_forward_and_uses_positions():
    torch.manual_seed(1)
    layer = DenseAttention(24, 2, 8).double()
    x = torch.randn(2, 33, 24, dtype=torch.float64)
    y_full, _, y_steps, cache = _prefill_then_steps(layer, x, 5)
    assert (y_steps - y_full[:, 5:]).abs().max() <= 1e-12
    assert cache.nbytes() == 2 * (2 * 33 * 2 * 8 * 8)   # K and V: B·T·H·D each
    perm = torch.tensor([1, 0, 2, 3])
    with torch.no_grad():   # RoPE: order matters
        assert not torch.allclose(layer(x[:, :4])[:, -1], layer(x[:, perm])[:, -1], atol=1e-6)


def test_growing_cache_keeps_rows_across_reallocation():
    rows = torch.arange(2 * 3 * 2, dtype=torch.float64).view(2, 3, 2)
    c = GrowingCache(rows)
    for i in range(40):
        c.append(torch.full((2, 2), float(i)))
    assert c.length == 43 and torch.equal(c.view()[:, :3], rows)
    assert torch.equal(c.view()[:, 3:, 0], torch.arange(40, dtype=torch.float64).expand(2, 40))


# ---------------------------------------------------------------- Attention Residuals
def _walk(stream, emb, outs):
    """Write sublayer outputs in order and record what each sublayer (and the end) reads."""
    s, reads = stream.start(emb), []
    for i, o in enumerate(outs):
        reads.append(stream.read(s, i))
        s = stream.write(s, o)
    reads.append(stream.read(s, len(outs)))
    return reads


def test_full_attnres_at_zero_init_is_the_uniform_average():
    torch.manual_seed(0)
    emb, outs = torch.randn(2, 5, 8), [torch.randn(2, 5, 8) * (i + 1) for i in range(4)]
    reads = _walk(ResidualStream(8, 4, "full_attnres"), emb, outs)
    sources = [emb] + outs
    for i, r in enumerate(reads):
        assert torch.allclose(r, torch.stack(sources[: i + 1]).mean(0), atol=1e-6)


def test_block_attnres_at_zero_init_averages_blocks_and_partial_sum():
    torch.manual_seed(0)
    emb, outs = torch.randn(2, 5, 8), [torch.randn(2, 5, 8) for _ in range(8)]
    reads = _walk(ResidualStream(8, 8, "block_attnres", num_blocks=2), emb, outs)
    b1 = sum(outs[:4])
    expected = [
        emb, (emb + outs[0]) / 2, (emb + outs[0] + outs[1]) / 2, (emb + sum(outs[:3])) / 2,
        (emb + b1) / 2, (emb + b1 + outs[4]) / 3, (emb + b1 + sum(outs[4:6])) / 3, (emb + b1 + sum(outs[4:7])) / 3,
        (emb + b1 + sum(outs[4:])) / 3,
    ]
    for r, e in zip(reads, expected, strict=True):
        assert torch.allclose(r, e, atol=1e-6)


def test_standard_stream_is_the_plain_sum_and_learned_queries_reweight():
    emb, outs = torch.randn(1, 3, 8), [torch.randn(1, 3, 8) for _ in range(4)]
    reads = _walk(ResidualStream(8, 4, "standard"), emb, outs)
    assert torch.allclose(reads[-1], emb + sum(outs))
    stream = ResidualStream(8, 4, "full_attnres")
    with torch.no_grad():
        stream.points[4].query.copy_(F.normalize(outs[2][0, 0], dim=0) * 30)   # attend to source 3 at (0, 0)
    w = stream.source_weights(stream.start(emb), 0)
    assert w.shape == (1, 1, 3)
    s = stream.start(emb)
    for o in outs:
        s = stream.write(s, o)
    weights = stream.source_weights(s, 4)
    assert weights.shape == (5, 1, 3) and torch.allclose(weights.sum(0), torch.ones(1, 3))
    assert weights[:, 0, 0].argmax() == 3


def test_block_attnres_requires_blocks_to_divide_sublayers():
    with pytest.raises(ValueError, match="attnres_blocks=3"):
        ResidualStream(8, 8, "block_attnres", num_blocks=3)


def test_growing_cache_on_a_middle_time_axis():
    rows = torch.randn(2, 3, 5, 4)                     # (B, H, T, D)
    c = GrowingCache(rows, axis=2)
    new = [torch.randn(2, 3, 4) for _ in range(30)]
    for r in new:
        c.append(r)
    assert c.view().shape == (2, 3, 35, 4)
    assert torch.equal(c.view(), torch.cat([rows, torch.stack(new, 2)], 2))
