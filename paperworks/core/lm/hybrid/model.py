"""A causal LM of any hybrid variant, built from one typed config.

Each layer is a token mixer followed by an MLP, both pre-norm (RMSNorm). The mixer of layer i is
``layer_pattern[i % len(layer_pattern)]``:

    K  Kimi Delta Attention (per-channel gate; ``kda.per_head_gate`` turns it into gated DeltaNet)
    M  gated multi-head latent attention, NoPE (the hybrid's global layer)
    A  dense multi-head attention with RoPE (the baseline)

so "KKKM" is the paper's 3 KDA : 1 MLA hybrid and "A" the dense transformer. The MLP is a SwiGLU
or an MoE (plain or latent); the residual stream is standard or Attention Residuals.

``forward`` returns :class:`HybridOutput` (logits, the summed MoE auxiliary loss, per-MoE-layer
expert loads). Decoding runs the recurrent / cached path: :meth:`HybridLM.prefill` then
:meth:`HybridLM.step` one token at a time; :func:`greedy_decode` wraps both.
Right padding needs no mask (the model is causal); left padding is refused.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
from pydantic import Field, field_validator, model_validator

from paperworks.core.io import ArtifactError, load_safetensors, safetensors_metadata, save_safetensors
from paperworks.core.lm.hybrid.attn_res import ResidualMode, ResidualStream
from paperworks.core.lm.hybrid.kda import KDAConfig, KimiDeltaAttention
from paperworks.core.lm.hybrid.mla import DenseAttention, GatedMLA
from paperworks.core.lm.hybrid.moe import MoE, MoEConfig, SwiGLU
from paperworks.core.params import StrictModel

MIXERS = {"K": "Kimi Delta Attention", "M": "gated MLA (NoPE)", "A": "dense attention (RoPE)"}


class HybridLMConfig(StrictModel):
    """Every variant of the hybrid-LM track (usable as a nested params model)."""

    vocab_size: int = Field(ge=4)
    hidden_size: int = Field(128, ge=8)
    num_layers: int = Field(4, ge=1)
    num_heads: int = Field(2, ge=1)
    head_dim: int = Field(64, ge=2)
    layer_pattern: str = Field("KKKM", description="mixer letters K/M/A, tiled over num_layers")
    kda: KDAConfig = KDAConfig()
    mla_kv_rank: int = Field(32, ge=1, description="latent rank r of gated MLA's KV")
    rope_theta: float = Field(10000.0, gt=0)
    mlp: Literal["dense", "moe"] = "dense"
    mlp_hidden: int = Field(384, ge=1, description="SwiGLU width of the dense MLP")
    moe: MoEConfig = MoEConfig()
    residual: ResidualMode = "standard"
    attnres_blocks: int = Field(2, ge=1, description="blocks of block_attnres (must divide 2 * num_layers)")
    init_std: float = Field(0.02, gt=0)

    @field_validator("layer_pattern")
    @classmethod
    def _letters(cls, v: str) -> str:
        bad = sorted(set(v) - set(MIXERS))
        if not v or bad:
            raise ValueError(f"layer_pattern {v!r}: letters must be from {sorted(MIXERS)} ({MIXERS}); got {bad}")
        return v

    @model_validator(mode="after")
    def _shapes(self):
        if self.residual == "block_attnres" and (2 * self.num_layers) % self.attnres_blocks:
            raise ValueError(
                f"attnres_blocks={self.attnres_blocks} must divide 2 * num_layers = {2 * self.num_layers} sublayers"
            )
        if "A" in self.mixers() and self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE in dense attention layers")
        return self

    def mixers(self) -> str:
        """The mixer letter of every layer."""
        return "".join(self.layer_pattern[i % len(self.layer_pattern)] for i in range(self.num_layers))


@dataclass
class HybridOutput:
    logits: torch.Tensor                   # (B, T, V)
    aux_loss: torch.Tensor                 # scalar: sum of the MoE layers' auxiliary losses (0 if none)
    expert_load: torch.Tensor | None       # (n_moe_layers, n_experts) tokens per expert, or None
    cache: list | None = None              # per-layer decoding caches (prefill only)
    stream_rms: torch.Tensor | None = None  # (2·layers + 1,) RMS of each sublayer's input (probe only)


class HybridLM(nn.Module):
    def __init__(self, cfg: HybridLMConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.mixers = nn.ModuleList([self._mixer(letter) for letter in cfg.mixers()])
        self.mlps = nn.ModuleList([
            MoE(d, cfg.moe) if cfg.mlp == "moe" else SwiGLU(d, cfg.mlp_hidden) for _ in range(cfg.num_layers)
        ])
        self.mixer_norms = nn.ModuleList([nn.RMSNorm(d, eps=1e-6) for _ in range(cfg.num_layers)])
        self.mlp_norms = nn.ModuleList([nn.RMSNorm(d, eps=1e-6) for _ in range(cfg.num_layers)])
        self.stream = ResidualStream(d, 2 * cfg.num_layers, cfg.residual, cfg.attnres_blocks)
        self.final_norm = nn.RMSNorm(d, eps=1e-6)
        self.lm_head = nn.Linear(d, cfg.vocab_size, bias=False)
        for m in self.modules():   # small normal init for projections; gates, norms, pseudo-queries keep theirs
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=cfg.init_std)

    def _mixer(self, letter: str) -> nn.Module:
        c = self.cfg
        if letter == "K":
            return KimiDeltaAttention(c.hidden_size, c.num_heads, c.head_dim, c.kda)
        if letter == "M":
            return GatedMLA(c.hidden_size, c.num_heads, c.head_dim, c.mla_kv_rank)
        return DenseAttention(c.hidden_size, c.num_heads, c.head_dim, c.rope_theta)

    def _mlp(self, i: int, x):
        out = self.mlps[i](x)
        return out if isinstance(out, tuple) else (out, None)

    def _run(self, h, mix, rms: list | None = None):
        """Walk the layers; ``mix(i, x)`` runs mixer i. Returns (final hidden, aux loss, loads).
        ``rms``, when a list, receives the RMS of every sublayer's input and of the final norm's input."""
        aux, loads = h.new_zeros(()), []
        s = self.stream.start(h)

        def read(index):
            x = self.stream.read(s, index)
            if rms is not None:
                rms.append(x.detach().square().mean().sqrt())
            return x

        for i in range(self.cfg.num_layers):
            s = self.stream.write(s, mix(i, self.mixer_norms[i](read(2 * i))))
            out, stats = self._mlp(i, self.mlp_norms[i](read(2 * i + 1)))
            if stats is not None:
                aux, loads = aux + stats.aux_loss, loads + [stats.load]
            s = self.stream.write(s, out)
        return self.final_norm(read(2 * self.cfg.num_layers)), aux, (torch.stack(loads) if loads else None)

    def forward(self, input_ids, attention_mask=None, use_cache: bool = False, return_cache: bool = False,
                recurrent: bool = False, probe: bool = False) -> HybridOutput:
        """input_ids (B, T) → :class:`HybridOutput`. ``recurrent`` runs KDA token by token (reference path);
        ``return_cache`` also returns the decoding caches after the last position (prefill); ``probe`` fills
        ``stream_rms`` (RMS of the residual stream read by each sublayer, then by the final norm)."""
        if attention_mask is not None:
            _check_right_padded(attention_mask)
        caches: list = [None] * self.cfg.num_layers

        def mix(i, x):
            m = self.mixers[i]
            kwargs = {"recurrent": recurrent} if isinstance(m, KimiDeltaAttention) else {}
            if return_cache:
                y, caches[i] = m(x, return_cache=True, **kwargs)
                return y
            return m(x, **kwargs)

        rms: list | None = [] if probe else None
        h, aux, loads = self._run(self.embed(input_ids), mix, rms)
        return HybridOutput(self.lm_head(h), aux, loads, caches if return_cache else None,
                            torch.stack(rms) if probe else None)

    @torch.no_grad()
    def prefill(self, input_ids) -> tuple[torch.Tensor, list]:
        """Parallel pass over a prompt (B, P) → (logits of the last position (B, V), caches)."""
        out = self.forward(input_ids, return_cache=True)
        return out.logits[:, -1], out.cache

    @torch.no_grad()
    def step(self, token_ids, caches: list) -> tuple[torch.Tensor, list]:
        """One new token per row (B,) → (logits (B, V), updated caches); recurrent KDA, cached attention."""
        new = list(caches)

        def mix(i, x):
            y, new[i] = self.mixers[i].step(x, caches[i])
            return y

        h, _, _ = self._run(self.embed(token_ids), mix)
        return self.lm_head(h), new

    def cache_bytes(self, caches: list) -> int:
        return sum(c.nbytes() for c in caches)


def _check_right_padded(mask) -> None:
    m = mask.long()
    if bool((m[:, 1:] > m[:, :-1]).any()):
        raise ValueError("HybridLM: attention_mask has padding before tokens (left padding); "
                         "the recurrent layers need right padding")


def next_token_loss(model: HybridLM, batch: dict[str, torch.Tensor], ignore_index: int = -100):
    """Mean next-token cross-entropy over labelled tokens plus the MoE auxiliary loss.

    ``batch`` as from ``core.lm.encode_sft`` (input_ids, attention_mask, labels). Returns
    ``(total, cross_entropy, output)``; ``core.lm.sft_loss`` alone would drop the auxiliary term.
    """
    out = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"))
    logits = out.logits[:, :-1]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch["labels"][:, 1:].reshape(-1),
                         ignore_index=ignore_index)
    return ce + out.aux_loss, ce, out


def build_hybrid_lm(cfg: HybridLMConfig, seed: int | None = None) -> HybridLM:
    if seed is not None:
        torch.manual_seed(seed)
    return HybridLM(cfg)


@torch.no_grad()
def greedy_decode(model: HybridLM, prompt_ids, max_new_tokens: int) -> torch.Tensor:
    """Prompt (B, P) → (B, P + max_new_tokens), argmax at every step through the decoding caches."""
    was_training = model.training
    model.eval()
    logits, caches = model.prefill(prompt_ids)
    out = [prompt_ids]
    for i in range(max_new_tokens):
        token = logits.argmax(-1)
        out.append(token[:, None])
        if i + 1 < max_new_tokens:
            logits, caches = model.step(token, caches)
    model.train(was_training)
    return torch.cat(out, 1)


def parameter_counts(model: HybridLM) -> dict[str, int]:
    """Total parameters and those one token uses (routed experts count k/n of theirs)."""
    total = sum(p.numel() for p in model.parameters())
    inactive = 0
    for m in model.modules():
        if isinstance(m, MoE):
            routed = sum(p.numel() for p in m.experts.parameters())
            inactive += round(routed * (1 - m.active_fraction()))
    return {"total": total, "active": total - inactive}


def save_hybrid_checkpoint(model: HybridLM, path: Path | str, extra: dict | None = None) -> None:
    """Weights and buffers (router biases included) as safetensors; the config rides in the metadata."""
    meta = {"hybrid_lm_config": model.cfg.model_dump_json()}
    meta.update({k: str(v) for k, v in (extra or {}).items()})
    save_safetensors(path, model.state_dict(), metadata=meta)


def load_hybrid_checkpoint(path: Path | str) -> HybridLM:
    path = Path(path)
    meta = safetensors_metadata(path)
    if "hybrid_lm_config" not in meta:
        raise ArtifactError(f"{path}: no hybrid_lm_config in metadata")
    model = HybridLM(HybridLMConfig.model_validate(json.loads(meta["hybrid_lm_config"])))
    tensors = load_safetensors(path, {k: tuple(v.shape) for k, v in model.state_dict().items()})
    model.load_state_dict(tensors, strict=True)
    return model.eval()
