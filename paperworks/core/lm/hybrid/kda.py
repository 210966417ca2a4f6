"""Kimi Delta Attention (KDA): a gated delta rule with a per-channel forget gate.

Per head the state ``S`` is a K×V matrix. One token does

    S ← Diag(exp g_t) · S                       (forget, per key channel; g_t ≤ 0)
    S ← S + β_t k_t (v_t − Sᵀ k_t)ᵀ             (delta rule: overwrite what k_t reads)
    o_t = Sᵀ q_t

with q, k L2-normalised (q also scaled by 1/√K) and β_t = sigmoid(·) ∈ (0, 1).
The gate is ``g = lower_bound · sigmoid(·)`` so every step forgets at most ``e^{lower_bound}``.
Gated DeltaNet is the same rule with one g per head (``per_head_gate=True``).

Two kernels compute it:
- :func:`kda_recurrent` — token by token; the decoding path (:func:`kda_step` is one token).
- :func:`kda_chunkwise` — training. Inside a chunk of C tokens with cumulative log-gates G_r the
  decay between positions factorises, exp(G_r − G_s) = exp(G_r)·exp(−G_s), so every intra-chunk
  product is a plain matmul of k⊙e^{G} with k⊙e^{−G}. The delta rule's dependence among the C
  writes of a chunk is a unit lower-triangular system (solved once per chunk); the state then
  jumps chunk to chunk. The price: e^{−G} reaches e^{C·|lower_bound|}, which overflows float32
  past ~e^{88}; :class:`KDAConfig` therefore requires ``chunk_size · |lower_bound| ≤ 80``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from pydantic import Field, model_validator

from paperworks.core.params import StrictModel

# e^{80} ≈ 5.5e34 < float32 max ≈ 3.4e38 (= e^{88.7}); one more chunk-sum of products must still fit.
MAX_CHUNK_LOG_DECAY = 80.0


class KDAConfig(StrictModel):
    """KDA layer settings (nested in the hybrid model's config)."""

    lower_bound: float = Field(-2.5, lt=0, description="log-gate floor: g = lower_bound * sigmoid(.)")
    chunk_size: int = Field(32, ge=1, description="tokens per chunk in the training (chunkwise) kernel")
    conv_kernel: int = Field(4, ge=1, description="short causal depthwise convolution on q, k, v")
    per_head_gate: bool = Field(False, description="True = gated DeltaNet (one g per head) instead of KDA's per-channel g")
    gate_init_min: float = Field(1e-3, gt=0, description="initial per-token decay |g| spans [min, max] log-uniformly")
    gate_init_max: float = Field(1e-1, gt=0)

    @model_validator(mode="after")
    def _no_overflow(self):
        span = self.chunk_size * abs(self.lower_bound)
        if span > MAX_CHUNK_LOG_DECAY:
            raise ValueError(
                f"kda.chunk_size * |kda.lower_bound| = {self.chunk_size} * {abs(self.lower_bound)} = {span:g} > "
                f"{MAX_CHUNK_LOG_DECAY:g}: the chunkwise kernel multiplies by exp(chunk_size * |lower_bound|), "
                f"which overflows float32 (NaN outputs and gradients); lower chunk_size or raise lower_bound"
            )
        if not self.gate_init_min <= self.gate_init_max < abs(self.lower_bound):
            raise ValueError(
                f"kda.gate_init_min {self.gate_init_min} <= kda.gate_init_max {self.gate_init_max} "
                f"< |kda.lower_bound| {abs(self.lower_bound)} is required"
            )
        return self


# ---------------------------------------------------------------- kernels (B, T, H, ·) layout
def kda_recurrent(q, k, v, g, beta, initial_state=None):
    """Token-by-token reference. q, k: (B,T,H,K) already normalised and scaled; v: (B,T,H,V);
    g: (B,T,H,K) log-gates ≤ 0; beta: (B,T,H). Returns (o (B,T,H,V), final state (B,H,K,V))."""
    b, t, h, dk = k.shape
    state = q.new_zeros(b, h, dk, v.shape[-1]) if initial_state is None else initial_state
    outs = []
    for i in range(t):
        o, state = kda_step(q[:, i], k[:, i], v[:, i], g[:, i], beta[:, i], state)
        outs.append(o)
    return torch.stack(outs, 1), state


def kda_step(q, k, v, g, beta, state):
    """One token: q, k, g (B,H,K); v (B,H,V); beta (B,H); state (B,H,K,V) → (o (B,H,V), new state)."""
    state = state * g.exp().unsqueeze(-1)
    read = torch.einsum("bhk,bhkv->bhv", k, state)
    state = state + torch.einsum("bhk,bhv->bhkv", k, beta.unsqueeze(-1) * (v - read))
    return torch.einsum("bhk,bhkv->bhv", q, state), state


def kda_chunkwise(q, k, v, g, beta, chunk_size: int, initial_state=None):
    """Same result as :func:`kda_recurrent`, a chunk of tokens at a time (see module docstring).

    Any length: the tail is padded with k = v = g = β = 0, which leaves outputs and state unchanged.
    """
    b, t, h, dk = k.shape
    dv = v.shape[-1]
    c = chunk_size
    pad = (-t) % c
    if pad:
        q, k, v, g = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, 0, 0, pad))
    n = (t + pad) // c
    # (B, H, n, C, ·)
    q, k, v, g = (x.reshape(b, n, c, h, -1).permute(0, 3, 1, 2, 4) for x in (q, k, v, g))
    beta = beta.reshape(b, n, c, h).permute(0, 3, 1, 2).unsqueeze(-1)
    cum = g.cumsum(-2)                                   # G_r: log-decay from chunk start through token r
    k_fwd, k_bwd, q_fwd = k * cum.exp(), k * (-cum).exp(), q * cum.exp()
    strictly_lower = torch.ones(c, c, dtype=torch.bool, device=k.device).tril(-1)
    lower = torch.ones(c, c, dtype=torch.bool, device=k.device).tril(0)
    # Writes δ_r = β_r (v_r − e^{G_r}k_r · [S_0 + Σ_{s<r} e^{−G_s}k_s δ_sᵀ]) → (I + L) Δ = β(V − K_fwd S_0)
    coupling = ((beta * k_fwd) @ k_bwd.transpose(-1, -2)).masked_fill(~strictly_lower, 0)
    eye = torch.eye(c, dtype=k.dtype, device=k.device)
    unit_lower = eye + coupling
    u = torch.linalg.solve_triangular(unit_lower, beta * v, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(unit_lower, beta * k_fwd, upper=False, unitriangular=True)
    intra = (q_fwd @ k_bwd.transpose(-1, -2)).masked_fill(~lower, 0)   # q_r·k_s e^{G_r−G_s}, s ≤ r
    state = q.new_zeros(b, h, dk, dv) if initial_state is None else initial_state
    outs = []
    for i in range(n):
        delta = u[:, :, i] - w[:, :, i] @ state
        outs.append(q_fwd[:, :, i] @ state + intra[:, :, i] @ delta)
        last = cum[:, :, i, -1:]                          # G_C
        state = state * last.transpose(-1, -2).exp() + (k[:, :, i] * (last - cum[:, :, i]).exp()).transpose(-1, -2) @ delta
    o = torch.stack(outs, 2).permute(0, 2, 3, 1, 4).reshape(b, n * c, h, dv)
    return o[:, :t], state


# ---------------------------------------------------------------- the layer
@dataclass
class KDACache:
    """Decoding state of one KDA layer: the delta-rule state and the conv's last inputs."""

    state: torch.Tensor          # (B, H, K, V)
    conv: torch.Tensor           # (B, 3·H·K, conv_kernel − 1) pre-convolution q|k|v projections

    def nbytes(self) -> int:
        return self.state.numel() * self.state.element_size() + self.conv.numel() * self.conv.element_size()


class KimiDeltaAttention(nn.Module):
    """KDA token mixer: short convs on q, k, v → L2 norm → gated delta rule → RMSNorm · sigmoid gate → out."""

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int, cfg: KDAConfig):
        super().__init__()
        self.cfg, self.h, self.dk = cfg, num_heads, head_dim
        inner = num_heads * head_dim
        self.q_proj = nn.Linear(hidden_size, inner, bias=False)
        self.k_proj = nn.Linear(hidden_size, inner, bias=False)
        self.v_proj = nn.Linear(hidden_size, inner, bias=False)
        self.conv = nn.Conv1d(3 * inner, 3 * inner, cfg.conv_kernel, groups=3 * inner, bias=False)
        gate_out = num_heads if cfg.per_head_gate else inner
        # low-rank forget-gate projection (rank head_dim), as in Kimi Linear
        self.f_down = nn.Linear(hidden_size, head_dim, bias=False)
        self.f_up = nn.Linear(head_dim, gate_out, bias=False)
        self.gate_bias = nn.Parameter(self._gate_bias_init(gate_out))
        self.b_proj = nn.Linear(hidden_size, num_heads, bias=False)
        self.g_down = nn.Linear(hidden_size, head_dim, bias=False)
        self.g_up = nn.Linear(head_dim, inner, bias=True)
        self.o_norm = nn.RMSNorm(head_dim, eps=1e-6)  # over the last dim: one weight shared by the heads
        self.o_proj = nn.Linear(inner, hidden_size, bias=False)

    def _gate_bias_init(self, n: int) -> torch.Tensor:
        # Start with slow forgetting on a spread of timescales: |g| = |lb|·sigmoid(bias) log-uniform in
        # [gate_init_min, gate_init_max] (a zero bias would forget e^{lb/2} ≈ 30 % per token).
        lb = abs(self.cfg.lower_bound)
        decay = torch.exp(torch.linspace(math.log(self.cfg.gate_init_min), math.log(self.cfg.gate_init_max), n))
        return torch.logit(decay / lb).to(torch.get_default_dtype())

    # -- pieces shared by the parallel and the step path
    def _gates(self, x):
        """x (..., d) → log-gate g (..., H, K) in (lower_bound, 0), beta (..., H)."""
        f = self.f_up(self.f_down(x)) + self.gate_bias
        g = self.cfg.lower_bound * torch.sigmoid(f)
        g = g.unsqueeze(-1).expand(*g.shape, self.dk) if self.cfg.per_head_gate else g.unflatten(-1, (self.h, self.dk))
        return g, torch.sigmoid(self.b_proj(x))

    def _qkv(self, conv_out):
        q, k, v = F.silu(conv_out).unflatten(-1, (3, self.h, self.dk)).unbind(-3)
        q = F.normalize(q, dim=-1) * self.dk ** -0.5
        return q, F.normalize(k, dim=-1), v

    def _out(self, o, x):
        gate = torch.sigmoid(self.g_up(self.g_down(x))).unflatten(-1, (self.h, self.dk))
        return self.o_proj((self.o_norm(o) * gate).flatten(-2))

    def forward(self, x, return_cache: bool = False, recurrent: bool = False):
        """x (B, T, d) → (B, T, d); with ``return_cache`` also the :class:`KDACache` after the last token."""
        proj = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], -1).transpose(1, 2)   # (B, 3HK, T)
        kernel = self.cfg.conv_kernel
        padded = F.pad(proj, (kernel - 1, 0))                                                     # causal
        conv_out = self.conv(padded).transpose(1, 2)
        q, k, v = self._qkv(conv_out)
        g, beta = self._gates(x)
        if recurrent:
            o, state = kda_recurrent(q, k, v, g, beta)
        else:
            o, state = kda_chunkwise(q, k, v, g, beta, self.cfg.chunk_size)
        y = self._out(o, x)
        if not return_cache:
            return y
        tail = padded[..., padded.shape[-1] - (kernel - 1):]   # last kernel−1 inputs (zeros before the start)
        return y, KDACache(state=state, conv=tail)

    def empty_cache(self, batch: int, dtype=None, device=None) -> KDACache:
        dtype = dtype or self.q_proj.weight.dtype
        inner = self.h * self.dk
        return KDACache(
            state=torch.zeros(batch, self.h, self.dk, self.dk, dtype=dtype, device=device),
            conv=torch.zeros(batch, 3 * inner, self.cfg.conv_kernel - 1, dtype=dtype, device=device),
        )

    def step(self, x, cache: KDACache):
        """One token x (B, d) → (y (B, d), updated cache); the recurrent decoding path."""
        proj = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], -1)                   # (B, 3HK)
        window = torch.cat([cache.conv, proj.unsqueeze(-1)], -1)                                  # (B, 3HK, kernel)
        conv_out = (window * self.conv.weight.squeeze(1)).sum(-1)
        q, k, v = self._qkv(conv_out)
        g, beta = self._gates(x)
        o, state = kda_step(q, k, v, g, beta, cache.state)
        return self._out(o, x), KDACache(state=state, conv=window[..., 1:])
