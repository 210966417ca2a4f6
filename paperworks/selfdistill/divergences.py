"""The two controls of SR-OPSD, computed exactly over the full vocabulary.

* Target placement (Proposition 3.1): ``log π*(v) = α log p_T(v) + (1−α) log p_ref(v) − log Z``,
  the geometric interpolation of the self-teacher and the frozen reference.
* Projection geometry: the Rényi divergence of order ρ,
  ``D_ρ(q ‖ π) = 1/(ρ−1) · log Σ_v q(v)^ρ π(v)^(1−ρ)``, which is KL(q ‖ π) as ρ → 1.

Convention: the loss is D_ρ(student ‖ target) (``reverse``); α = 1, ρ = 1 is exactly the
reverse-KL OPSD baseline. ``forward`` swaps the arguments.
All inputs are log-probabilities (or logits) of shape (..., V); outputs have shape (...).
"""
from __future__ import annotations

import torch

RHO_KL_TOL = 1e-6  # |ρ − 1| below this is treated as ρ = 1 (KL) to avoid 0/0


def check_alpha_rho(alpha: float, rho: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if not rho > 0.0:
        raise ValueError(f"rho must be > 0, got {rho}")


def anchored_target(teacher_logits: torch.Tensor, ref_logits: torch.Tensor | None, alpha: float) -> torch.Tensor:
    """log π* ∝ α log p_T + (1−α) log p_ref, renormalised over the vocabulary (Prop. 3.1)."""
    check_alpha_rho(alpha, 1.0)
    log_t = torch.log_softmax(teacher_logits.float(), -1)
    if alpha == 1.0 or ref_logits is None:
        if ref_logits is None and alpha != 1.0:
            raise ValueError("alpha < 1 needs the reference logits")
        return log_t
    log_r = torch.log_softmax(ref_logits.float(), -1)
    return torch.log_softmax(alpha * log_t + (1.0 - alpha) * log_r, -1)


def kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) = Σ p (log p − log q)."""
    p = log_p.exp()
    return (p * (log_p - log_q)).sum(-1)


def renyi(log_p: torch.Tensor, log_q: torch.Tensor, rho: float) -> torch.Tensor:
    """Rényi divergence D_ρ(p ‖ q) = 1/(ρ−1) log Σ p^ρ q^(1−ρ) (ρ = 1: KL). Stable via logsumexp."""
    check_alpha_rho(0.0, rho)
    if abs(rho - 1.0) < RHO_KL_TOL:
        return kl(log_p, log_q)
    return torch.logsumexp(rho * log_p + (1.0 - rho) * log_q, -1) / (rho - 1.0)


def distill_divergence(
    student_logits: torch.Tensor, target_logp: torch.Tensor, rho: float, direction: str = "reverse"
) -> torch.Tensor:
    """Per-position D_ρ(student ‖ target) (``reverse``) or D_ρ(target ‖ student) (``forward``)."""
    log_s = torch.log_softmax(student_logits.float(), -1)
    target_logp = target_logp.detach()
    if direction == "reverse":
        return renyi(log_s, target_logp, rho)
    if direction == "forward":
        return renyi(target_logp, log_s, rho)
    raise ValueError(f"direction must be 'reverse' or 'forward', got {direction!r}")


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Token entropy (nats) of the full next-token distribution."""
    logp = torch.log_softmax(logits.float(), -1)
    return -(logp.exp() * logp).sum(-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


@torch.no_grad()
def ema_update(teacher: torch.nn.Module, student: torch.nn.Module, beta: float) -> None:
    """θ_T ← β θ_T + (1 − β) θ_S (β = 1 would freeze the teacher; that control is ``teacher: frozen``)."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"ema beta must lie in [0, 1], got {beta}")
    for t, s in zip(teacher.parameters(), student.parameters(), strict=True):
        t.mul_(beta).add_(s.detach(), alpha=1.0 - beta)
