"""The SR-OPSD building blocks: target placement (Prop. 3.1), Rényi projection (Prop. 3.2), EMA."""
from __future__ import annotations

import copy

import pytest
import torch

from paperworks.selfdistill.divergences import (
    anchored_target, distill_divergence, ema_update, entropy, kl, masked_mean, renyi,
)

torch.manual_seed(0)
T_LOGITS = torch.randn(3, 5, 11) * 2
R_LOGITS = torch.randn(3, 5, 11) * 2


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_target_is_normalised(alpha):
    logp = anchored_target(T_LOGITS, R_LOGITS, alpha)
    assert torch.allclose(logp.exp().sum(-1), torch.ones(3, 5), atol=1e-6)


def test_target_endpoints_are_teacher_and_reference():
    assert torch.allclose(anchored_target(T_LOGITS, R_LOGITS, 1.0), torch.log_softmax(T_LOGITS, -1), atol=1e-6)
    assert torch.allclose(anchored_target(T_LOGITS, R_LOGITS, 0.0), torch.log_softmax(R_LOGITS, -1), atol=1e-6)


def test_target_is_geometric_interpolation():
    alpha = 0.3
    pt, pr = torch.softmax(T_LOGITS, -1), torch.softmax(R_LOGITS, -1)
    unnorm = pt**alpha * pr ** (1 - alpha)
    assert torch.allclose(anchored_target(T_LOGITS, R_LOGITS, alpha).exp(), unnorm / unnorm.sum(-1, keepdim=True), atol=1e-6)


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_bad_alpha_fails(bad):
    with pytest.raises(ValueError, match="alpha"):
        anchored_target(T_LOGITS, R_LOGITS, bad)


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_bad_rho_fails(bad):
    with pytest.raises(ValueError, match="rho"):
        renyi(torch.log_softmax(T_LOGITS, -1), torch.log_softmax(R_LOGITS, -1), bad)


def test_renyi_tends_to_kl():
    lp, lq = torch.log_softmax(T_LOGITS.double(), -1), torch.log_softmax(R_LOGITS.double(), -1)
    ref = kl(lp, lq)
    for rho in (1 - 1e-4, 1 + 1e-4):
        assert torch.allclose(renyi(lp, lq, rho), ref, rtol=1e-3, atol=1e-4)
    assert torch.equal(renyi(lp, lq, 1.0), ref)


def test_renyi_properties():
    lp, lq = torch.log_softmax(T_LOGITS.double(), -1), torch.log_softmax(R_LOGITS.double(), -1)
    d = {rho: renyi(lp, lq, rho) for rho in (0.25, 0.5, 0.75, 1.0, 1.5)}
    assert all((v >= -1e-9).all() for v in d.values())
    assert torch.allclose(renyi(lp, lp, 0.5), torch.zeros(3, 5, dtype=torch.double), atol=1e-9)
    # non-decreasing in the order ρ (a known property of Rényi divergences)
    orders = sorted(d)
    for a, b in zip(orders, orders[1:]):
        assert (d[a] <= d[b] + 1e-9).all()
    # matches the textbook formula
    p, q = lp.exp(), lq.exp()
    assert torch.allclose(d[0.5], torch.log((p**0.5 * q**0.5).sum(-1)) / (0.5 - 1), atol=1e-9)


@pytest.mark.parametrize("rho", [0.25, 0.5, 0.75, 1.0, 2.0])
@pytest.mark.parametrize("direction", ["reverse", "forward"])
def test_minimising_renyi_over_free_distribution_reaches_target(rho, direction):
    """Prop. 3.2: ρ changes the path, not the optimum — the minimiser is the target itself."""
    target = anchored_target(T_LOGITS[0, 0], R_LOGITS[0, 0], 0.5)
    logits = torch.zeros(11, dtype=torch.double, requires_grad=True)
    opt = torch.optim.LBFGS([logits], lr=1.0, max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = distill_divergence(logits, target.double(), rho, direction)
        loss.backward()
        return loss

    opt.step(closure)
    assert torch.allclose(torch.softmax(logits.detach(), -1), target.double().exp(), atol=1e-3)


def test_divergence_gradient_flows_only_into_student():
    s = T_LOGITS.clone().requires_grad_(True)
    t = R_LOGITS.clone().requires_grad_(True)
    distill_divergence(s, torch.log_softmax(t, -1), 0.75).sum().backward()
    assert s.grad is not None and t.grad is None


def test_bad_direction_fails():
    with pytest.raises(ValueError, match="direction"):
        distill_divergence(T_LOGITS, torch.log_softmax(R_LOGITS, -1), 1.0, "sideways")


def test_entropy_and_masked_mean():
    uniform = torch.zeros(2, 4, 8)
    assert torch.allclose(entropy(uniform), torch.full((2, 4), torch.log(torch.tensor(8.0))))
    x = torch.tensor([[1.0, 2.0, 100.0]])
    assert masked_mean(x, torch.tensor([[1, 1, 0]])) == pytest.approx(1.5)


def test_ema_update():
    student = torch.nn.Linear(3, 2)
    teacher = copy.deepcopy(student)
    with torch.no_grad():
        for p in student.parameters():
            p.add_(1.0)
    before = [p.clone() for p in teacher.parameters()]
    ema_update(teacher, student, 0.9)
    for t, b, s in zip(teacher.parameters(), before, student.parameters()):
        assert torch.allclose(t, 0.9 * b + 0.1 * s)
    ema_update(teacher, student, 0.0)  # β = 0: teacher = student
    assert all(torch.equal(t, s) for t, s in zip(teacher.parameters(), student.parameters()))
    with pytest.raises(ValueError):
        ema_update(teacher, student, 1.5)


# A hand-made asymmetric case: student s = (0.9, 0.1), target t = (0.5, 0.5), values by hand:
#   KL(s ‖ t) = 0.9 ln(0.9/0.5) + 0.1 ln(0.1/0.5) = 0.368064…   KL(t ‖ s) = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1) = 0.510826…
#   D_2(s ‖ t) = ln(0.9²/0.5 + 0.1²/0.5) = ln 1.64 = 0.494696…  D_2(t ‖ s) = ln(0.25/0.9 + 0.25/0.1) = ln 2.7778 = 1.021651…
STUDENT_P, TARGET_P = (0.9, 0.1), (0.5, 0.5)
BY_HAND = {(1.0, "reverse"): 0.3680642071684971, (1.0, "forward"): 0.5108256237659907,
           (2.0, "reverse"): 0.4946962418361071, (2.0, "forward"): 1.0216512475319812}


@pytest.mark.parametrize("rho,direction", sorted(BY_HAND))
def test_direction_convention_on_a_hand_made_case(rho, direction):
    """``reverse`` is D(student ‖ target), ``forward`` is D(target ‖ student): the convention the
    whole track rests on (reverse-KL OPSD = α 1, ρ 1, reverse)."""
    student_logits = torch.log(torch.tensor(STUDENT_P, dtype=torch.double)) + 3.0  # logits: any shift
    target_logp = torch.log(torch.tensor(TARGET_P, dtype=torch.double))
    got = distill_divergence(student_logits, target_logp, rho, direction).item()
    assert got == pytest.approx(BY_HAND[(rho, direction)], abs=1e-6)  # the loss runs in float32
    other = "forward" if direction == "reverse" else "reverse"
    assert abs(got - BY_HAND[(rho, other)]) > 0.1  # the case tells the two directions apart


def test_reverse_kl_is_mode_seeking_forward_is_mass_covering():
    """Fitting a one-parameter student family to a bimodal target: reverse KL picks one mode
    (low entropy), forward KL spreads over both (high entropy) — the geometry behind the
    entropy claims, on a case small enough to check by eye."""
    target = torch.log(torch.tensor([0.49, 0.02, 0.49], dtype=torch.double))
    def fit(direction):
        best = None
        for a in torch.linspace(-6, 6, 241, dtype=torch.double):  # student logits (a, 0, −a): mass on token 0 or 2
            d = distill_divergence(torch.stack([a, torch.zeros((), dtype=torch.double), -a]), target, 1.0, direction).item()
            if best is None or d < best[0]:
                best = (d, a.item())
        return best[1]
    a_rev, a_fwd = fit("reverse"), fit("forward")
    assert abs(a_rev) > 2.0      # one mode
    assert abs(a_fwd) < 0.1      # both modes equally
