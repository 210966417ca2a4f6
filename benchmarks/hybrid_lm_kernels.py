"""Kernel costs of the hybrid LM's token mixers on this machine's CPU (one thread by default).

    python benchmarks/hybrid_lm_kernels.py [--threads 1] [--contexts 256,512,1024,2048,4096]

Table 1: fwd+bwd CPU seconds of the KDA kernels — factorised chunkwise (training path) vs the
token-by-token recurrence, per-head-gate (gated DeltaNet) chunkwise, and causal SDPA attention for scale.
Table 3 (``--train``): training tokens/s (CPU time) of whole d=128 L=4 models at T=256, B=8.
Table 2: decoding one token per row with a cache already holding `context` tokens, for one layer of
each mixer (d=128, 2 heads × 64, MLA latent rank 32, batch 8): CPU ms per token step and the cache's
MiB (what a server keeps per layer for the batch). Times are `time.process_time`, i.e. CPU seconds
(≈ an idle core's wall time), so the machine's load inflates them less than wall-clock would.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F

from paperworks.core.lm.hybrid.kda import KDAConfig, KimiDeltaAttention, kda_chunkwise, kda_recurrent
from paperworks.core.lm.hybrid.mla import DenseAttention, GatedMLA, GrowingCache, KVCache
from paperworks.core.lm.hybrid.model import HybridLMConfig, build_hybrid_lm, next_token_loss, parameter_counts
from paperworks.core.lm.hybrid.moe import MoEConfig

D_MODEL, HEADS, HEAD_DIM, KV_RANK, BATCH = 128, 2, 64, 32, 8


def cpu_seconds(fn, reps: int) -> float:
    fn()                                   # warm-up (allocator, dispatch)
    t0 = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - t0) / reps


def kernel_inputs(b, t, h, d, lower_bound=-2.5, per_head=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, t, h, d, generator=g) for _ in range(3))
    gate = torch.randn(b, t, h, 1 if per_head else d, generator=g)
    beta = torch.randn(b, t, h, generator=g)
    return [x.requires_grad_(True) for x in (q, k, v, gate, beta)]


def kda_fwd_bwd(b, t, chunk, recurrent=False, per_head=False):
    def run():
        q, k, v, gate, beta = kernel_inputs(b, t, HEADS, HEAD_DIM, per_head=per_head)
        qn, kn = F.normalize(q, dim=-1) * HEAD_DIM ** -0.5, F.normalize(k, dim=-1)
        g = (-2.5 * torch.sigmoid(gate)).expand(b, t, HEADS, HEAD_DIM)
        if recurrent:
            o, _ = kda_recurrent(qn, kn, v, g, torch.sigmoid(beta))
        else:
            o, _ = kda_chunkwise(qn, kn, v, g, torch.sigmoid(beta), chunk)
        o.square().sum().backward()
    return run


def sdpa_fwd_bwd(b, t):
    def run():
        q, k, v = (torch.randn(b, HEADS, t, HEAD_DIM, requires_grad=True) for _ in range(3))
        F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum().backward()
    return run


def decode_row(layer, cache, steps: int) -> tuple[float, float]:
    """CPU ms per one-token step and the cache's MiB before stepping."""
    mib = cache.nbytes() / 2 ** 20
    x = torch.randn(BATCH, D_MODEL)
    state = {"cache": cache}

    def one():
        _, state["cache"] = layer.step(x, state["cache"])

    with torch.no_grad():
        ms = cpu_seconds(one, steps) * 1e3
    return ms, mib


TRAIN_VARIANTS = {
    "dense MHA + SwiGLU": dict(layer_pattern="A"),
    "hybrid 3 KDA : 1 MLA": dict(),
    "hybrid, gated DeltaNet gate": dict(kda=KDAConfig(per_head_gate=True)),
    "hybrid + MoE 8 top-2 (QB)": dict(mlp="moe"),
    "hybrid + LatentMoE 64 top-8 (latent 64)": dict(mlp="moe", moe=MoEConfig(num_experts=64, top_k=8, expert_hidden=48,
                                                                            latent_dim=64)),
    "hybrid + MoE + block AttnRes (2 blocks)": dict(mlp="moe", residual="block_attnres"),
    "hybrid + MoE + full AttnRes": dict(mlp="moe", residual="full_attnres"),
}


def train_tokens_per_second(overrides: dict, steps: int = 3, seq: int = 256, batch: int = 8) -> tuple[float, dict]:
    model = build_hybrid_lm(HybridLMConfig(vocab_size=64, **overrides), seed=0).train()
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    ids = torch.randint(0, 64, (batch, seq + 1), generator=torch.Generator().manual_seed(0))
    data = {"input_ids": ids, "labels": ids}

    def step():
        loss, _, _ = next_token_loss(model, data)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return batch * (seq + 1) / cpu_seconds(step, steps), parameter_counts(model)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--contexts", default="256,512,1024,2048,4096")
    ap.add_argument("--steps", type=int, default=20, help="decode steps timed per context")
    ap.add_argument("--train", action="store_true", help="also time whole-model training steps")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"threads={args.threads}  load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")

    print(f"\nKDA kernels, fwd+bwd CPU s (B=2, H={HEADS}, K=V={HEAD_DIM}, gate bound -2.5)")
    print("| kernel | T=256 | T=512 |\n| --- | ---: | ---: |")
    rows = [
        ("chunkwise factorised C=16", lambda t: kda_fwd_bwd(2, t, 16), 3),
        ("chunkwise factorised C=32", lambda t: kda_fwd_bwd(2, t, 32), 3),
        ("chunkwise C=32, per-head gate (gated DeltaNet)", lambda t: kda_fwd_bwd(2, t, 32, per_head=True), 3),
        ("recurrent (token by token)", lambda t: kda_fwd_bwd(2, t, 0, recurrent=True), 1),
        ("SDPA causal softmax attention (reference)", lambda t: sdpa_fwd_bwd(2, t), 3),
    ]
    for name, make, reps in rows:
        cells = [f"{cpu_seconds(make(t), reps):.3f}" for t in (256, 512)]
        print(f"| {name} | {' | '.join(cells)} |", flush=True)

    contexts = [int(c) for c in args.contexts.split(",")]
    print(f"\nDecode one token per row (B={BATCH}, d={D_MODEL}, {HEADS}×{HEAD_DIM} heads, MLA rank {KV_RANK}): "
          "CPU ms/step · cache MiB per layer")
    print("| context | KDA ms | KDA MiB | gated MLA ms | MLA MiB | dense attn ms | dense MiB |\n"
          "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    kda = KimiDeltaAttention(D_MODEL, HEADS, HEAD_DIM, KDAConfig()).eval()
    mla = GatedMLA(D_MODEL, HEADS, HEAD_DIM, KV_RANK).eval()
    dense = DenseAttention(D_MODEL, HEADS, HEAD_DIM).eval()
    for ctx in contexts:
        kda_cache = kda.empty_cache(BATCH)
        kda_cache.state.normal_()              # the state's size does not depend on the context
        mla_cache = GrowingCache(torch.randn(BATCH, ctx, KV_RANK))
        dense_cache = KVCache(torch.randn(BATCH, HEADS, ctx, HEAD_DIM), torch.randn(BATCH, HEADS, ctx, HEAD_DIM))
        cells = []
        for layer, cache in ((kda, kda_cache), (mla, mla_cache), (dense, dense_cache)):
            ms, mib = decode_row(layer, cache, args.steps)
            cells += [f"{ms:.3f}", f"{mib:.3f}"]
        print(f"| {ctx} | {' | '.join(cells)} |", flush=True)
    if args.train:
        print("\nTraining, d=128 L=4 2×64 heads, T=256 B=8, vocab 64: tokens/s (CPU time)")
        print("| variant | params total | params active | train tok/s |\n| --- | ---: | ---: | ---: |")
        for name, overrides in TRAIN_VARIANTS.items():
            tps, counts = train_tokens_per_second(overrides)
            print(f"| {name} | {counts['total'] / 1e6:.2f}M | {counts['active'] / 1e6:.2f}M | {tps:,.0f} |", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
