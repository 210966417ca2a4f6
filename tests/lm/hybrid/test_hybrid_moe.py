"""MoE: sigmoid top-k routing, load accounting, the four balancing strategies, LatentMoE."""
from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from paperworks.core.lm.hybrid.moe import MoE, MoEConfig, dead_experts, max_violation


def _moe(**kw):
    torch.manual_seed(0)
    base = dict(num_experts=6, top_k=2, expert_hidden=8)
    base.update(kw)
    return MoE(12, MoEConfig(**base)).double()


def test_output_equals_a_per_token_loop_and_load_counts_assignments():
    moe = _moe(balancing="none").eval()
    with torch.no_grad():
        moe.selection_bias.copy_(torch.tensor([0.3, -0.2, 0.0, 0.5, -1.0, 0.1], dtype=torch.float64))
    x = torch.randn(3, 7, 12, dtype=torch.float64)
    y, stats = moe(x)
    flat = x.reshape(-1, 12)
    expected, counts = torch.zeros_like(flat), torch.zeros(6, dtype=torch.long)
    for i, tok in enumerate(flat):
        scores = torch.sigmoid(moe.router(tok))
        chosen = sorted(range(6), key=lambda e: -(scores[e] + moe.selection_bias[e]).item())[:2]
        w = scores[chosen] / scores[chosen].sum()      # the bias picks experts but never weighs them
        for j, e in enumerate(chosen):
            expected[i] += w[j] * moe.experts[e](tok)
            counts[e] += 1
    assert torch.allclose(y.reshape(-1, 12), expected, rtol=0, atol=1e-12)
    assert torch.equal(stats.load, counts) and int(stats.load.sum()) == 21 * 2


def test_maxvio_and_dead_experts():
    assert max_violation(torch.tensor([4, 4, 4, 4])) == 0.0
    assert max_violation(torch.tensor([8, 4, 4, 0])) == pytest.approx(1.0)
    assert dead_experts(torch.tensor([8, 4, 4, 0])) == 1


def test_quantile_balancing_sets_minus_the_quantile_after_a_training_batch():
    moe = _moe(balancing="quantile").train()
    x = torch.randn(200, 12, dtype=torch.float64)
    scores = torch.sigmoid(moe.router(x)).detach()
    _, stats_first = moe(x)
    expected = -torch.quantile(scores, 1 - 2 / 6, dim=0)
    assert torch.allclose(moe.selection_bias, expected, rtol=0, atol=1e-12)
    # on the same batch each expert now has exactly k/n of the tokens above its shifted zero
    assert torch.all(((scores + moe.selection_bias) > 0).double().mean(0).sub(2 / 6).abs() <= 1 / 200 + 1e-12)
    moe.eval()
    before = moe.selection_bias.clone()
    moe(torch.randn(50, 12, dtype=torch.float64))
    assert torch.equal(moe.selection_bias, before)   # evaluation never moves the bias


def test_bias_strategy_moves_toward_the_underloaded_and_aux_loss_only_for_aux():
    moe = _moe(balancing="bias", bias_update_rate=0.01).train()
    x = torch.randn(300, 12, dtype=torch.float64)
    _, stats = moe(x)
    load = stats.load.double()
    assert torch.allclose(moe.selection_bias, 0.01 * torch.sign(load.mean() - load), rtol=0, atol=1e-15)
    assert float(stats.aux_loss) == 0.0
    aux = _moe(balancing="aux_loss", aux_loss_coef=0.1).train()
    _, st = aux(x)
    scores = torch.sigmoid(aux.router(x))
    fraction = st.load.double() / (300 * 2)
    manual = 0.1 * 6 * (fraction * (scores / scores.sum(-1, keepdim=True)).mean(0)).sum()
    assert torch.allclose(st.aux_loss, manual, rtol=0, atol=1e-12)
    st.aux_loss.backward()
    assert aux.router.weight.grad is not None and aux.router.weight.grad.abs().sum() > 0
    assert torch.equal(aux.selection_bias, torch.zeros(6, dtype=torch.float64))


def _toy_maxvio(balancing: str, steps: int = 250, seed: int = 0) -> tuple[float, int]:
    """Regression toy with a router skewed toward experts 0 and 1; mean MaxVio of the last 50 steps."""
    torch.manual_seed(seed)
    d = 16
    moe = MoE(d, MoEConfig(num_experts=8, top_k=2, expert_hidden=16, balancing=balancing, bias_update_rate=1e-2))
    with torch.no_grad():
        moe.router.weight.normal_(0, 0.1)
        moe.router.weight[:2, 0] = 3.0       # every token's feature 0 is ≈ 2: experts 0, 1 win
    teacher = torch.nn.Sequential(torch.nn.Linear(d, 32), torch.nn.Tanh(), torch.nn.Linear(32, d))
    opt = torch.optim.Adam(moe.parameters(), 1e-2)
    gen = torch.Generator().manual_seed(seed + 1)
    vios, dead = [], 0
    for _ in range(steps):
        x = torch.randn(256, d, generator=gen)
        x[:, 0] += 2.0
        with torch.no_grad():
            target = teacher(x)
        y, stats = moe(x)
        loss = (y - target).square().mean() + stats.aux_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        vios.append(max_violation(stats.load))
        dead = dead_experts(stats.load)
    return sum(vios[-50:]) / 50, dead


def test_quantile_balancing_lowers_maxvio_on_a_skewed_router():
    none_vio, _ = _toy_maxvio("none")
    qb_vio, qb_dead = _toy_maxvio("quantile")
    assert none_vio > 2.0              # the skew persists without balancing (≈ 2.9: 2 experts take most tokens)
    assert qb_vio < 0.3 * none_vio     # measured ≈ 0.44 vs 2.88
    assert qb_dead == 0


def test_latent_moe_routes_in_the_latent_and_counts_parameters():
    moe = _moe(latent_dim=4, num_experts=8, top_k=2, num_shared_experts=1)
    assert moe.router.in_features == 4 and moe.experts[0].up.in_features == 4
    assert moe.down.weight.shape == (4, 12) and moe.up.weight.shape == (12, 4)
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    y, stats = moe(x)
    assert y.shape == x.shape and int(stats.load.sum()) == 20
    # the shared expert acts on every token at full width
    with torch.no_grad():
        for p in moe.experts.parameters():
            p.zero_()
    y2, _ = moe(x)
    assert torch.allclose(y2, moe.shared(x), rtol=0, atol=1e-12)


def test_config_rejects_k_above_n():
    with pytest.raises(ValidationError, match="moe.top_k=5 exceeds moe.num_experts=4"):
        MoEConfig(num_experts=4, top_k=5)
