"""Softmax-attention token mixers with a KV cache: gated multi-head latent attention (the hybrid's
global layer) and plain multi-head attention with RoPE (the dense baseline).

Gated MLA (NoPE): keys and values come from one shared latent ``c = RMSNorm(W_down x)`` of rank r
per token, ``k_h = W_uk,h c`` and ``v_h = W_uv,h c``; the attention output is multiplied by an
elementwise sigmoid gate of x before the output projection. No positional encoding: order reaches
this layer only through the KDA layers below it. The decode cache stores c alone (r numbers per
token, against 2·H·D for MHA): with no rotary term, W_uk can be folded into the query
(q_hᵀ W_uk,h c) and W_uv applied after the weighted sum of latents, which is the same function.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from paperworks.core.lm.hybrid.kda import HeadRMSNorm


class GrowingCache:
    """Per-token rows (B, T, *shape) appended one step at a time; capacity doubles, so appends are O(1) amortised."""

    def __init__(self, rows: torch.Tensor):
        self.length = rows.shape[1]
        self.data = rows.new_zeros(rows.shape[0], max(16, 2 * self.length), *rows.shape[2:])
        self.data[:, : self.length] = rows

    def append(self, row: torch.Tensor) -> None:
        """row: (B, *shape), one token."""
        if self.length == self.data.shape[1]:
            bigger = self.data.new_zeros(self.data.shape[0], 2 * self.length, *self.data.shape[2:])
            bigger[:, : self.length] = self.data
            self.data = bigger
        self.data[:, self.length] = row
        self.length += 1

    def view(self) -> torch.Tensor:
        return self.data[:, : self.length]

    def nbytes(self) -> int:
        """Bytes of the rows in use (what a serving system must keep), not of the spare capacity."""
        v = self.view()
        return v.numel() * v.element_size()


class GatedMLA(nn.Module):
    """Gated multi-head latent attention, NoPE, causal; cache = the latent c per token."""

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int, kv_rank: int):
        super().__init__()
        self.h, self.d, self.r = num_heads, head_dim, kv_rank
        inner = num_heads * head_dim
        self.q_proj = nn.Linear(hidden_size, inner, bias=False)
        self.kv_down = nn.Linear(hidden_size, kv_rank, bias=False)
        self.kv_norm = HeadRMSNorm(kv_rank)
        self.k_up = nn.Linear(kv_rank, inner, bias=False)
        self.v_up = nn.Linear(kv_rank, inner, bias=False)
        self.gate_proj = nn.Linear(hidden_size, inner, bias=False)
        self.o_proj = nn.Linear(inner, hidden_size, bias=False)

    def _out(self, o, x):
        """o (..., H, D) → gated, projected (..., d)."""
        return self.o_proj((o * torch.sigmoid(self.gate_proj(x)).unflatten(-1, (self.h, self.d))).flatten(-2))

    def forward(self, x, return_cache: bool = False):
        b, t, _ = x.shape
        latent = self.kv_norm(self.kv_down(x))                                   # (B, T, r)
        q = self.q_proj(x).view(b, t, self.h, self.d).transpose(1, 2)
        k = self.k_up(latent).view(b, t, self.h, self.d).transpose(1, 2)
        v = self.v_up(latent).view(b, t, self.h, self.d).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)   # (B, T, H, D)
        y = self._out(o, x)
        return (y, GrowingCache(latent)) if return_cache else y

    def step(self, x, cache: GrowingCache):
        """One token x (B, d) → (y (B, d), cache); attention in latent space (absorbed up-projections)."""
        cache.append(self.kv_norm(self.kv_down(x)))
        latents = cache.view()                                                     # (B, T, r)
        q = self.q_proj(x).view(-1, self.h, self.d)
        q_latent = torch.einsum("bhd,hdr->bhr", q, self.k_up.weight.view(self.h, self.d, self.r))
        scores = torch.einsum("bhr,btr->bht", q_latent, latents) * self.d ** -0.5
        o_latent = torch.einsum("bht,btr->bhr", scores.softmax(-1), latents)
        o = torch.einsum("bhr,hdr->bhd", o_latent, self.v_up.weight.view(self.h, self.d, self.r))
        return self._out(o, x), cache


# ---------------------------------------------------------------- dense baseline
def rotary(x, positions, theta: float):
    """Rotate-half RoPE on x (..., T, D) at integer positions (T,)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, dtype=x.dtype, device=x.device) / half)
    angles = positions.to(x.dtype)[:, None] * freqs[None]                        # (T, D/2)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class KVCache:
    """Keys and values of a dense attention layer, (B, T, H, D) each."""

    def __init__(self, k, v):
        self.k, self.v = GrowingCache(k), GrowingCache(v)

    @property
    def length(self) -> int:
        return self.k.length

    def nbytes(self) -> int:
        return self.k.nbytes() + self.v.nbytes()


class DenseAttention(nn.Module):
    """Standard causal multi-head attention with RoPE (the all-attention baseline)."""

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int, rope_theta: float = 10000.0):
        super().__init__()
        self.h, self.d, self.theta = num_heads, head_dim, rope_theta
        self.qkv = nn.Linear(hidden_size, 3 * num_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=False)

    def forward(self, x, return_cache: bool = False):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.d).unbind(2)            # (B, T, H, D)
        pos = torch.arange(t, device=x.device)
        q, k = (rotary(z.transpose(1, 2), pos, self.theta) for z in (q, k))     # (B, H, T, D)
        o = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True)
        y = self.o_proj(o.transpose(1, 2).flatten(-2))
        return (y, KVCache(k.transpose(1, 2), v)) if return_cache else y

    def step(self, x, cache: KVCache):
        q, k, v = self.qkv(x).view(-1, 3, self.h, self.d).unbind(1)              # (B, H, D)
        pos = torch.tensor([cache.length], device=x.device)
        q, k = (rotary(z.unsqueeze(-2), pos, self.theta).squeeze(-2) for z in (q, k))
        cache.k.append(k)
        cache.v.append(v)
        keys, values = cache.k.view(), cache.v.view()                           # (B, T, H, D)
        scores = torch.einsum("bhd,bthd->bht", q, keys) * self.d ** -0.5
        o = torch.einsum("bht,bthd->bhd", scores.softmax(-1), values)
        return self.o_proj(o.flatten(-2)), cache
