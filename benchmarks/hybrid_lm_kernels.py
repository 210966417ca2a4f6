"""Kernel costs of the hybrid LM's token mixers on this machine's CPU (one thread by default).

    python benchmarks/hybrid_lm_kernels.py [--threads 1] [--contexts 256,512,1024,2048,4096]

Table 1: fwd+bwd CPU seconds of the KDA kernels — factorised chunkwise (training path) vs the
token-by-token recurrence, per-head-gate (gated DeltaNet) chunkwise, and causal SDPA attention for scale.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--contexts", default="256,512,1024,2048,4096")
    ap.add_argument("--steps", type=int, default=20, help="decode steps timed per context")
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
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
