"""The residual stream over depth: standard sums or Attention Residuals (full and block).

Standard pre-norm: the input of sublayer l is the embedding plus every earlier sublayer output.
Attention Residuals replace that fixed sum by a softmax over depth: sublayer l reads

    h_l = Σ_i softmax_i( w_lᵀ RMSNorm(v_i) ) · v_i

over the sources v_i (the embedding and earlier outputs), with one learned pseudo-query w_l per
sublayer, zero-initialised so training starts from a uniform average. Block AttnRes groups the
sublayers into blocks: inside a block outputs are summed as usual, and the softmax runs over the
embedding, the finished blocks' sums and the current block's partial sum (O(blocks) sources
instead of O(layers)). The final norm reads one more aggregation with its own pseudo-query.
Everything is per token, so the decoding path uses the same code on one position.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

ResidualMode = Literal["standard", "full_attnres", "block_attnres"]


class DepthAttention(nn.Module):
    """One aggregation point: a pseudo-query over RMSNorm'd sources."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(dim))
        self.key_norm_weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def weights(self, sources: list[torch.Tensor]) -> torch.Tensor:
        """Softmax over sources, shape (n_sources, *batch)."""
        stacked = torch.stack(sources)
        keys = F.rms_norm(stacked, (stacked.shape[-1],), self.key_norm_weight, self.eps)
        return (keys @ self.query).softmax(0)

    def forward(self, sources: list[torch.Tensor]) -> torch.Tensor:
        return torch.einsum("n...,n...d->...d", self.weights(sources), torch.stack(sources))


@dataclass
class Stream:
    """The residual stream's state while walking up the layers."""

    total: torch.Tensor | None = None                         # standard: running sum
    sources: list[torch.Tensor] = field(default_factory=list)  # attnres: embedding + outputs / finished blocks
    partial: torch.Tensor | None = None                        # block: sum inside the current block
    in_block: int = 0


class ResidualStream(nn.Module):
    """How sublayers read and write the residual stream; ``num_sublayers`` = 2 × layers (mixer, MLP)."""

    def __init__(self, dim: int, num_sublayers: int, mode: ResidualMode = "standard", num_blocks: int = 2):
        super().__init__()
        if mode == "block_attnres" and num_sublayers % num_blocks:
            raise ValueError(f"attnres_blocks={num_blocks} must divide the {num_sublayers} sublayers (2 per layer)")
        self.mode = mode
        self.block_size = num_sublayers // num_blocks if mode == "block_attnres" else 0
        # one pseudo-query per sublayer input and one for the final output
        self.points = nn.ModuleList([DepthAttention(dim) for _ in range(num_sublayers + 1)]) if mode != "standard" else None

    def start(self, embedding: torch.Tensor) -> Stream:
        if self.mode == "standard":
            return Stream(total=embedding)
        return Stream(sources=[embedding])

    def _sources(self, s: Stream) -> list[torch.Tensor]:
        return s.sources + ([s.partial] if s.partial is not None else [])

    def read(self, s: Stream, index: int) -> torch.Tensor:
        """Input of sublayer ``index`` (or of the final norm when index == num_sublayers)."""
        if self.mode == "standard":
            return s.total
        return self.points[index](self._sources(s))

    def write(self, s: Stream, out: torch.Tensor) -> Stream:
        if self.mode == "standard":
            return Stream(total=s.total + out)
        if self.mode == "full_attnres":
            return Stream(sources=s.sources + [out])
        partial = out if s.partial is None else s.partial + out
        if s.in_block + 1 == self.block_size:                  # block finished: its sum becomes a source
            return Stream(sources=s.sources + [partial])
        return Stream(sources=s.sources, partial=partial, in_block=s.in_block + 1)

    def source_weights(self, s: Stream, index: int) -> torch.Tensor | None:
        """The softmax over depth at one point (for probes); None in standard mode."""
        return None if self.mode == "standard" else self.points[index].weights(self._sources(s))
