"""Mixture of experts with a sigmoid router, top-k routing, LatentMoE and four balancing strategies.

Routing: scores s = sigmoid(W_r x) per expert; each token goes to the k experts with the largest
``s + selection_bias`` and mixes their outputs with weights s (renormalised over the chosen k).
The bias moves only *which* experts are chosen, never how much they weigh, so it carries no gradient.

Balancing (``MoEConfig.balancing``):
- ``none``: bias stays 0.
- ``aux_loss`` (Switch-style): loss = coef · n · Σ_e f_e P_e, with f_e the fraction of this batch's
  assignments that went to e and P_e the mean of e's normalised score s_e / Σ s; returned for the
  trainer to add.
- ``bias`` (DeepSeek-V3 aux-loss-free): after each training batch, bias_e += rate · sign(mean load − load_e).
- ``quantile`` (Quantile Balancing): after each training batch, bias_e = −(the 1 − k/n quantile of
  expert e's scores over the batch's tokens), used on the next batch. Subtracting that quantile
  leaves each expert exactly the k/n fraction of (that batch's) tokens with a positive shifted
  score, so the top-k comes out balanced without any loss term. ``quantile_ema`` > 0 smooths it.
Bias updates happen inside ``forward`` when the module is in training mode (one update per forward),
so a plain training loop needs nothing extra; evaluation never moves them.

LatentMoE (``latent_dim`` > 0): one shared down-projection d→ℓ before routing and the experts, and
one shared up-projection ℓ→d after, so each expert is ℓ-wide and many more fit the same budget.
Load accounting: :class:`RoutingStats` per forward; MaxVio = max load / mean load − 1; dead experts
= experts that received no token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
from pydantic import Field, model_validator

from paperworks.core.params import StrictModel

Balancing = Literal["none", "aux_loss", "bias", "quantile"]


class MoEConfig(StrictModel):
    num_experts: int = Field(8, ge=1)
    top_k: int = Field(2, ge=1)
    expert_hidden: int = Field(192, ge=1, description="SwiGLU width of one routed expert")
    latent_dim: int = Field(0, ge=0, description="0 = plain MoE; > 0 = LatentMoE with this latent width")
    num_shared_experts: int = Field(0, ge=0, description="always-on experts (full width) added to the routed output")
    normalize_weights: bool = Field(True, description="renormalise the chosen k scores to sum to 1")
    balancing: Balancing = "quantile"
    aux_loss_coef: float = Field(0.01, ge=0)
    bias_update_rate: float = Field(1e-3, gt=0, description="step of the DeepSeek-style sign update")
    quantile_ema: float = Field(0.0, ge=0, lt=1, description="0 = each batch's quantile replaces the bias")

    @model_validator(mode="after")
    def _k_fits(self):
        if self.top_k > self.num_experts:
            raise ValueError(f"moe.top_k={self.top_k} exceeds moe.num_experts={self.num_experts}")
        return self


@dataclass
class RoutingStats:
    load: torch.Tensor        # (n,) tokens assigned to each expert in this forward
    aux_loss: torch.Tensor    # scalar; 0 unless balancing == "aux_loss"


def max_violation(load: torch.Tensor) -> float:
    """MaxVio = max load / mean load − 1 (0 = perfectly balanced)."""
    load = load.double()
    return float(load.max() / load.mean() - 1)


def dead_experts(load: torch.Tensor) -> int:
    return int((load == 0).sum())


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(dim, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        a, b = self.up(x).chunk(2, -1)
        return self.down(F.silu(a) * b)


class MoE(nn.Module):
    """Routed SwiGLU experts (plain or latent) with a sigmoid router; forward → (y, RoutingStats)."""

    def __init__(self, hidden_size: int, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        width = cfg.latent_dim or hidden_size
        self.down = nn.Linear(hidden_size, width, bias=False) if cfg.latent_dim else None
        self.up = nn.Linear(width, hidden_size, bias=False) if cfg.latent_dim else None
        self.router = nn.Linear(width, cfg.num_experts, bias=False)
        self.experts = nn.ModuleList([SwiGLU(width, cfg.expert_hidden) for _ in range(cfg.num_experts)])
        self.shared = SwiGLU(hidden_size, cfg.expert_hidden * cfg.num_shared_experts) if cfg.num_shared_experts else None
        self.register_buffer("selection_bias", torch.zeros(cfg.num_experts))

    def route(self, z: torch.Tensor):
        """z (N, width) → scores (N, n), chosen experts (N, k), mixing weights (N, k)."""
        scores = torch.sigmoid(self.router(z))
        chosen = (scores + self.selection_bias).topk(self.cfg.top_k, dim=-1).indices
        weights = scores.gather(-1, chosen)
        if self.cfg.normalize_weights:
            weights = weights / weights.sum(-1, keepdim=True)
        return scores, chosen, weights

    def forward(self, x: torch.Tensor):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        z = self.down(x) if self.down is not None else x
        scores, chosen, weights = self.route(z)
        n, k = self.cfg.num_experts, self.cfg.top_k
        flat = chosen.reshape(-1)
        load = torch.bincount(flat, minlength=n)
        out = self._run_experts(z, flat, weights.reshape(-1), load)
        y = self.up(out) if self.up is not None else out
        if self.shared is not None:
            y = y + self.shared(x)
        aux = z.new_zeros(())
        if self.cfg.balancing == "aux_loss":
            fraction = load.to(z.dtype) / (flat.numel())
            mean_prob = (scores / scores.sum(-1, keepdim=True)).mean(0)
            aux = self.cfg.aux_loss_coef * n * (fraction * mean_prob).sum()
        if self.training:
            self._update_bias(scores.detach(), load)
        return y.reshape(shape), RoutingStats(load=load.detach(), aux_loss=aux)

    def _run_experts(self, z: torch.Tensor, flat: torch.Tensor, flat_weights: torch.Tensor,
                     load: torch.Tensor) -> torch.Tensor:
        """Σ over each token's chosen experts of weight · expert(token), as two batched matmuls.

        Assignments are sorted by expert into an (experts, max load, width) buffer padded with
        zeros, every expert's SwiGLU runs as one ``bmm`` over its slice, and the results go back
        to their tokens with ``index_add``. A Python loop over experts (gather, two linears,
        scatter per expert) computes the same sums but costs ~1.5× the time at this scale on a
        CPU (one MoE layer, 512 tokens, 8 experts: 5.3 vs 3.5 ms per forward+backward).
        """
        n, k = self.cfg.num_experts, self.cfg.top_k
        order = flat.argsort(stable=True)
        expert = flat[order]
        slot = torch.arange(flat.numel(), device=flat.device) - (torch.cumsum(load, 0) - load)[expert]
        tokens = order // k
        buffer = z.new_zeros(n, int(load.max()), z.shape[-1]).index_put((expert, slot), z[tokens])
        up = torch.stack([e.up.weight for e in self.experts])        # (n, 2·hidden, width)
        down = torch.stack([e.down.weight for e in self.experts])    # (n, width, hidden)
        a, b = torch.bmm(buffer, up.transpose(1, 2)).chunk(2, -1)
        result = torch.bmm(F.silu(a) * b, down.transpose(1, 2))
        return torch.zeros_like(z).index_add(0, tokens, result[expert, slot] * flat_weights[order, None])

    @torch.no_grad()
    def _update_bias(self, scores: torch.Tensor, load: torch.Tensor) -> None:
        cfg = self.cfg
        if cfg.balancing == "bias":
            self.selection_bias += cfg.bias_update_rate * torch.sign(load.float().mean() - load.float()).to(self.selection_bias.dtype)
        elif cfg.balancing == "quantile":
            level = 1.0 - cfg.top_k / cfg.num_experts
            exact = scores if scores.dtype in (torch.float32, torch.float64) else scores.float()  # quantile needs one
            target = -torch.quantile(exact, level, dim=0).to(self.selection_bias.dtype)
            if cfg.quantile_ema:
                target = cfg.quantile_ema * self.selection_bias + (1 - cfg.quantile_ema) * target
            self.selection_bias.copy_(target)

    def active_fraction(self) -> float:
        """Fraction of routed-expert parameters a token uses (k / n)."""
        return self.cfg.top_k / self.cfg.num_experts


def expert_parameter_count(moe: MoE) -> int:
    return sum(p.numel() for p in moe.experts.parameters())


__all__ = ["MoEConfig", "MoE", "RoutingStats", "SwiGLU", "max_violation", "dead_experts", "expert_parameter_count"]
