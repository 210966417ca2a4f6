"""Kimi Delta Attention: chunkwise == recurrent, decode step == parallel layer, gradients, the gate bound."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from paperworks.core.lm.hybrid.kda import KDAConfig, KimiDeltaAttention, kda_chunkwise, kda_recurrent


def kernel_inputs(b=2, t=37, h=2, dk=8, dv=6, lower_bound=-2.5, dtype=torch.float64, seed=0, saturate=False):
    g_ = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(b, t, h, dk, generator=g_, dtype=dtype), dim=-1) * dk ** -0.5
    k = F.normalize(torch.randn(b, t, h, dk, generator=g_, dtype=dtype), dim=-1)
    v = torch.randn(b, t, h, dv, generator=g_, dtype=dtype)
    pre = torch.full((b, t, h, dk), 30.0, dtype=dtype) if saturate else torch.randn(b, t, h, dk, generator=g_, dtype=dtype)
    g = lower_bound * torch.sigmoid(pre)
    beta = torch.rand(b, t, h, generator=g_, dtype=dtype)
    return q, k, v, g, beta


def naive_loop(q, k, v, g, beta):
    """Independent plain-Python reading of the delta rule, one (batch, head) at a time."""
    b, t, h, dk = k.shape
    out = torch.zeros(b, t, h, v.shape[-1], dtype=v.dtype)
    for bi in range(b):
        for hi in range(h):
            s = torch.zeros(dk, v.shape[-1], dtype=v.dtype)
            for i in range(t):
                s = torch.diag(g[bi, i, hi].exp()) @ s
                kk = k[bi, i, hi][:, None]
                s = (torch.eye(dk, dtype=v.dtype) - beta[bi, i, hi] * kk @ kk.T) @ s + beta[bi, i, hi] * kk @ v[bi, i, hi][None]
                out[bi, i, hi] = s.T @ q[bi, i, hi]
    return out


def test_recurrent_matches_an_independent_loop():
    q, k, v, g, beta = kernel_inputs(b=1, t=9, seed=3)
    o, _ = kda_recurrent(q, k, v, g, beta)
    assert torch.allclose(o, naive_loop(q, k, v, g, beta), atol=1e-12)


@pytest.mark.parametrize("chunk", [1, 4, 8, 16, 32])
@pytest.mark.parametrize("length", [1, 13, 37, 64])
def test_chunkwise_equals_recurrent(chunk, length):
    q, k, v, g, beta = kernel_inputs(t=length, seed=length)
    o_rec, s_rec = kda_recurrent(q, k, v, g, beta)
    o_chk, s_chk = kda_chunkwise(q, k, v, g, beta, chunk)
    assert o_chk.shape == o_rec.shape
    assert (o_chk - o_rec).abs().max() <= 1e-10
    assert (s_chk - s_rec).abs().max() <= 1e-10


def test_chunkwise_equals_recurrent_float32_at_the_bound_with_state_carried():
    # float32 at the largest allowed span (32 · 2.5 = 80) and with an initial state: within 1e-5
    q, k, v, g, beta = kernel_inputs(t=70, dk=16, dv=16, dtype=torch.float32, saturate=True)
    s0 = torch.randn(2, 2, 16, 16)
    o_rec, s_rec = kda_recurrent(q, k, v, g, beta, initial_state=s0)
    o_chk, s_chk = kda_chunkwise(q, k, v, g, beta, 32, initial_state=s0)
    assert (o_chk - o_rec).abs().max() <= 1e-5
    assert (s_chk - s_rec).abs().max() <= 1e-5


def test_finite_gradients_at_the_gate_bound():
    # every gate saturated at the floor: the chunk multiplies by e^{32·2.5} = e^{80} (float32)
    cfg = KDAConfig(lower_bound=-2.5, chunk_size=32)
    torch.manual_seed(0)
    layer = KimiDeltaAttention(24, 2, 16, cfg)
    with torch.no_grad():
        layer.gate_bias.fill_(40.0)   # sigmoid → 1: g = lower_bound exactly
    x = torch.randn(2, 64, 24, requires_grad=True)
    g, _ = layer._gates(x)
    assert torch.allclose(g, torch.full_like(g, -2.5))
    layer(x).square().sum().backward()
    grads = [x.grad] + [p.grad for p in layer.parameters()]
    assert all(gr is not None and torch.isfinite(gr).all() for gr in grads)


def test_the_overflow_trap_is_real_and_the_config_rejects_it():
    # the kernel itself, fed chunk 32 with gates at −5 (span 160), overflows in float32 ...
    q, k, v, g, beta = kernel_inputs(t=64, dk=16, dv=16, lower_bound=-5.0, dtype=torch.float32, saturate=True)
    o, _ = kda_chunkwise(q, k, v, g, beta, 32)
    assert not torch.isfinite(o).all()
    # ... while 16 · 5 = 80 is fine, and the config refuses the bad pair with the keys named
    o16, _ = kda_chunkwise(q, k, v, g, beta, 16)
    assert torch.isfinite(o16).all()
    with pytest.raises(ValidationError, match=r"kda.chunk_size \* \|kda.lower_bound\| = 32 \* 5"):
        KDAConfig(lower_bound=-5.0, chunk_size=32)
    KDAConfig(lower_bound=-5.0, chunk_size=16)
    KDAConfig(lower_bound=-2.5, chunk_size=32)


def test_gradcheck_chunkwise_tiny():
    q, k, v, g, beta = kernel_inputs(b=1, t=7, h=1, dk=3, dv=2, seed=5)
    args = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta)]
    assert torch.autograd.gradcheck(lambda *a: kda_chunkwise(*a, chunk_size=3)[0], args, eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("per_head", [False, True])
def test_layer_chunkwise_recurrent_and_decode_steps_agree(per_head):
    cfg = KDAConfig(chunk_size=8, per_head_gate=per_head)
    torch.manual_seed(1)
    layer = KimiDeltaAttention(20, 2, 8, cfg).double()
    x = torch.randn(3, 29, 20, dtype=torch.float64)
    y_chunk, cache = layer(x, return_cache=True)
    y_rec = layer(x, recurrent=True)
    assert (y_chunk - y_rec).abs().max() <= 1e-10
    # decode: prefill 11 tokens in parallel, then one token at a time through the conv + state cache
    y_pre, c = layer(x[:, :11], return_cache=True)
    steps = []
    for i in range(11, 29):
        y, c = layer.step(x[:, i], c)
        steps.append(y)
    assert (torch.stack(steps, 1) - y_chunk[:, 11:]).abs().max() <= 1e-10
    assert (c.state - cache.state).abs().max() <= 1e-10
    # from an empty cache the step path reproduces the whole sequence
    c = layer.empty_cache(3, dtype=torch.float64)
    ys = []
    for i in range(29):
        y, c = layer.step(x[:, i], c)
        ys.append(y)
    assert (torch.stack(ys, 1) - y_chunk).abs().max() <= 1e-10


def test_per_head_gate_is_one_gate_per_head():
    torch.manual_seed(0)
    layer = KimiDeltaAttention(16, 2, 8, KDAConfig(per_head_gate=True))
    g, beta = layer._gates(torch.randn(2, 5, 16))
    assert g.shape == (2, 5, 2, 8) and beta.shape == (2, 5, 2)
    assert torch.equal(g, g[..., :1].expand_as(g))
    assert layer.f_up.out_features == 2
    per_channel = KimiDeltaAttention(16, 2, 8, KDAConfig())
    g2, _ = per_channel._gates(torch.randn(2, 5, 16))
    assert not torch.equal(g2, g2[..., :1].expand_as(g2))


def test_gate_init_spans_the_configured_timescales():
    cfg = KDAConfig(lower_bound=-2.5, gate_init_min=1e-3, gate_init_max=1e-1)
    layer = KimiDeltaAttention(16, 2, 8, cfg)
    decay = -cfg.lower_bound * torch.sigmoid(layer.gate_bias.detach())
    assert decay.min() == pytest.approx(1e-3, rel=1e-4) and decay.max() == pytest.approx(1e-1, rel=1e-4)
    assert torch.all(decay[1:] >= decay[:-1])


def test_transformers_kimi_linear_kernels_as_oracle():
    """transformers 5.24's own torch KDA (chunk and recurrent) on one small float32 case."""
    kl = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")
    torch.manual_seed(2)
    b, t, h, dk = 2, 50, 2, 16
    q_raw, k_raw, v = (torch.randn(b, t, h, dk) for _ in range(3))
    g = -2.5 * torch.sigmoid(torch.randn(b, t, h, dk))
    beta = torch.rand(b, t, h)
    # transformers normalises with x / sqrt(|x|² + 1e-6) and scales q by 1/√K inside; give it unit vectors
    q_unit, k_unit = F.normalize(q_raw, dim=-1), F.normalize(k_raw, dim=-1)
    ref_chunk, ref_state = kl.chunk_kimi_delta_attention(q_unit, k_unit, v, g, beta, chunk_size=16, output_final_state=True)
    ref_rec, _ = kl.recurrent_kimi_delta_attention(q_unit, k_unit, v, g, beta, None, True)
    mine, my_state = kda_chunkwise(q_unit * dk ** -0.5, k_unit, v, g, beta, 16)
    assert (mine - ref_chunk).abs().max() <= 1e-5
    assert (mine - ref_rec).abs().max() <= 1e-5
    assert (my_state - ref_state).abs().max() <= 1e-5


def test_transformers_kimi_linear_layer_as_oracle(monkeypatch):
    """Whole layer (convs, L2 norm, β, gated RMSNorm, projections) against transformers'
    KimiLinearDeltaAttention with the same weights; its softplus forget gate is swapped for ours
    (transformers has no lower-bounded gate) and its L2 norm x/√(|x|²+1e-6) for F.normalize's x/|x|
    (that eps alone moves outputs by ~1e-5 in float32 where the conv output is small)."""
    kl = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")
    monkeypatch.setattr(kl, "l2norm", lambda x, dim=-1, eps=1e-6: F.normalize(x, dim=dim))
    from transformers.models.kimi_linear.configuration_kimi_linear import KimiLinearConfig

    d, h, dk = 24, 2, 8
    hf_cfg = KimiLinearConfig(
        hidden_size=d, linear_attn_config={"num_heads": h, "head_dim": dk, "short_conv_kernel_size": 4,
                                           "kda_layers": [1], "full_attn_layers": []},
        num_hidden_layers=1, rms_norm_eps=1e-6, hidden_act="silu", vocab_size=16,
    )
    torch.manual_seed(3)
    mine = KimiDeltaAttention(d, h, dk, KDAConfig(chunk_size=16))
    with torch.no_grad():
        mine.g_up.bias.zero_()   # transformers' output-gate projection has no bias
    theirs = kl.KimiLinearDeltaAttention(hf_cfg, layer_idx=0)
    with torch.no_grad():
        for a, b_ in [(theirs.q_proj, mine.q_proj), (theirs.k_proj, mine.k_proj), (theirs.v_proj, mine.v_proj),
                      (theirs.conv1d, mine.conv), (theirs.b_proj, mine.b_proj), (theirs.g_a_proj, mine.g_down),
                      (theirs.g_b_proj, mine.g_up), (theirs.o_norm, mine.o_norm), (theirs.o_proj, mine.o_proj)]:
            a.weight.copy_(b_.weight)

    class OurGate(torch.nn.Module):
        def forward(self, x):
            return mine._gates(x)[0]

    theirs.forget_gate = OurGate()
    x = torch.randn(2, 40, d)
    with torch.no_grad():
        assert (theirs(x) - mine(x)).abs().max() <= 1e-5
