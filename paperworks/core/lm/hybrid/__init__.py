"""Hybrid LM backbone (paper 08): Kimi Delta Attention, gated MLA, Attention Residuals, (Latent)MoE
with Quantile Balancing, and a typed config that builds any variant. See README.md in this folder."""
from paperworks.core.lm.hybrid.attn_res import DepthAttention, ResidualStream
from paperworks.core.lm.hybrid.kda import (
    KDACache, KDAConfig, KimiDeltaAttention, kda_chunkwise, kda_recurrent, kda_step,
)
from paperworks.core.lm.hybrid.mla import DenseAttention, GatedMLA, GrowingCache, KVCache
from paperworks.core.lm.hybrid.model import (
    HybridLM, HybridLMConfig, HybridOutput, build_hybrid_lm, greedy_decode, load_hybrid_checkpoint,
    next_token_loss, parameter_counts, save_hybrid_checkpoint,
)
from paperworks.core.lm.hybrid.moe import MoE, MoEConfig, RoutingStats, dead_experts, max_violation

__all__ = [
    "DepthAttention", "ResidualStream",
    "KDACache", "KDAConfig", "KimiDeltaAttention", "kda_chunkwise", "kda_recurrent", "kda_step",
    "DenseAttention", "GatedMLA", "GrowingCache", "KVCache",
    "HybridLM", "HybridLMConfig", "HybridOutput", "build_hybrid_lm", "greedy_decode", "load_hybrid_checkpoint",
    "next_token_loss", "parameter_counts", "save_hybrid_checkpoint",
    "MoE", "MoEConfig", "RoutingStats", "dead_experts", "max_violation",
]
