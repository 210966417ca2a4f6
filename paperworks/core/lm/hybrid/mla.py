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



class GrowingCache:
    """Per-token rows appended along a time axis one step at a time; capacity doubles, so appends are
    O(1) amortised and the rows in use stay one strided view (no copy per step)."""

    def __init__(self, rows: torch.Tensor, axis: int = 1):
        self.axis, self.length = axis, rows.shape[axis]
        self.data = self._alloc(rows, max(16, 2 * self.length))
        self._slot(slice(0, self.length)).copy_(rows)

    def _alloc(self, like: torch.Tensor, capacity: int) -> torch.Tensor:
        shape = list(like.shape)
        shape[self.axis] = capacity
        return like.new_zeros(shape)

    def _slot(self, index) -> torch.Tensor:
        return self.data[(slice(None),) * self.axis + (index,)]

    def append(self, row: torch.Tensor) -> None:
        """row: one token, the rows' shape without the time axis."""
        if self.length == self.data.shape[self.axis]:
            old = self.view()
            self.data = self._alloc(self.data, 2 * self.length)
            self._slot(slice(0, self.length)).copy_(old)
        self._slot(self.length).copy_(row)
        self.length += 1

    def view(self) -> torch.Tensor:
        return self._slot(slice(0, self.length))

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
        self.kv_norm = nn.RMSNorm(kv_rank, eps=1e-6)
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
        scores = q_latent @ latents.transpose(1, 2) * self.d ** -0.5               # (B, H, T)
        o_latent = scores.softmax(-1) @ latents                                   # (B, H, r)
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
    """Keys and values of a dense attention layer, (B, H, T, D) each."""

    def __init__(self, k, v):
        self.k, self.v = GrowingCache(k, axis=2), GrowingCache(v, axis=2)

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
        v = v.transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = self.o_proj(o.transpose(1, 2).flatten(-2))
        return (y, KVCache(k, v)) if return_cache else y

    def step(self, x, cache: KVCache):
        q, k, v = self.qkv(x).view(-1, 3, self.h, self.d).unbind(1)              # (B, H, D)
        pos = torch.tensor([cache.length], device=x.device)
        q, k = (rotary(z.unsqueeze(-2), pos, self.theta).squeeze(-2) for z in (q, k))
        cache.k.append(k)
        cache.v.append(v)
        keys, values = cache.k.view(), cache.v.view()                           # (B, H, T, D)
        scores = (q.unsqueeze(-2) @ keys.transpose(-1, -2)) * self.d ** -0.5   # (B, H, 1, T)
        o = (scores.softmax(-1) @ values).squeeze(-2)
        return self.o_proj(o.flatten(-2)), cache
