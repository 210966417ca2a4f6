"""Probes of one trained model: per-sequence held-out loss, per-query recall (teacher-forced
argmax at every predicted answer), expert loads and the residual stream's RMS per sublayer on
held-out data, and decoding cost (CPU ms per token, cache MiB) vs context."""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from paperworks.core.lm.hybrid import build_hybrid_lm
from paperworks.core.lm.hybrid.moe import dead_experts, max_violation
from paperworks.hybrid_lm.corpus import KIND_NAMES


@torch.no_grad()
def _logits(model, tokens: np.ndarray, batch: int):
    model.eval()
    for i in range(0, len(tokens), batch):
        ids = torch.as_tensor(tokens[i: i + batch])
        yield i, model(ids)


@torch.no_grad()
def sequence_losses(model, tokens: np.ndarray, kinds: np.ndarray, batch: int = 16) -> np.ndarray:
    """Mean next-token cross-entropy over each sequence's predicted tokens (nats), shape (N,)."""
    out = np.full(len(tokens), np.nan)
    for i, o in _logits(model, tokens, batch):
        tgt = torch.as_tensor(tokens[i: i + batch, 1:])
        mask = torch.as_tensor(kinds[i: i + batch, 1:] > 0)
        ce = F.cross_entropy(o.logits[:, :-1].transpose(1, 2).float(), tgt, reduction="none")
        out[i: i + len(tgt)] = ((ce * mask).sum(1) / mask.sum(1).clamp(min=1)).double().numpy()
    return out


@torch.no_grad()
def query_hits(model, tokens: np.ndarray, kinds: np.ndarray, batch: int = 16) -> list[dict]:
    """One row per predicted answer: sequence, position, kind name, whether argmax hit it."""
    rows = []
    for i, o in _logits(model, tokens, batch):
        pred = o.logits[:, :-1].argmax(-1).numpy()
        k = kinds[i: i + batch, 1:]
        tgt = tokens[i: i + batch, 1:]
        for r, pos in zip(*np.nonzero(k > 0)):
            rows.append({"seq": int(i + r), "pos": int(pos + 1), "kind": KIND_NAMES[int(k[r, pos])],
                         "hit": int(pred[r, pos] == tgt[r, pos])})
    return rows


@torch.no_grad()
def routing_and_norms(model, tokens: np.ndarray, batch: int = 16) -> dict:
    """Expert loads over held-out tokens (per MoE layer: MaxVio, dead experts, shares) and the
    mean RMS of the residual stream read by each sublayer (the Attention-Residuals probe)."""
    model.eval()
    load, rms = None, []
    for i in range(0, len(tokens), batch):
        o = model(torch.as_tensor(tokens[i: i + batch]), probe=True)
        rms.append(o.stream_rms.double().numpy())
        if o.expert_load is not None:
            load = o.expert_load.double() if load is None else load + o.expert_load
    out = {"stream_rms": np.mean(rms, 0).tolist()}
    if load is not None:
        out["heldout_maxvio"] = [max_violation(layer) for layer in load]
        out["heldout_dead_experts"] = [dead_experts(layer) for layer in load]
        out["heldout_share"] = (load / load.sum(-1, keepdim=True)).tolist()
    return out


@torch.no_grad()
def decode_cost(cfg, contexts: list[int], batch: int, steps: int, seed: int, repeats: int = 1) -> list[dict]:
    """CPU ms per decoded token (whole model, one token per row) after prefilling ``context``
    tokens, and the decoding cache's MiB. Weights are random: cost does not depend on them.

    Each context times ``repeats`` blocks of ``steps`` steps and reports the median block: one
    block of 16 steps (~0.1 s) moved by 2× between runs on a 2-core machine with other work on it.
    """
    model = build_hybrid_lm(cfg, seed=seed).eval()
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for c in contexts:
        prompt = torch.randint(cfg.vocab_size, (batch, c), generator=gen)
        logits, caches = model.prefill(prompt)
        token = logits.argmax(-1)
        logits, caches = model.step(token, caches)   # warm-up (allocator, dispatch)
        blocks = []
        for _ in range(repeats):
            t0 = time.process_time()
            for _ in range(steps):
                logits, caches = model.step(logits.argmax(-1), caches)
            blocks.append(1000 * (time.process_time() - t0) / steps)
        rows.append({"context": c, "ms_per_token_step": float(np.median(blocks)), "repeats": repeats,
                     "cache_mib": model.cache_bytes(caches) / 2**20, "batch": batch})
    return rows
