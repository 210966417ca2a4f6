"""Train one hybrid-LM variant on the corpus: AdamW with warm-up + cosine (``core.lm.train``),
loss = next-token cross-entropy on the predicted tokens + the MoE auxiliary loss (``next_token_loss``;
``core.lm.sft_loss`` would drop it). Logs loss, MaxVio and dead experts of each step's routing,
and counts tokens, analytic FLOPs and CPU seconds, so comparisons can be read at equal tokens,
equal FLOPs or equal CPU time."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from paperworks.core.lm.hybrid import HybridLMConfig, build_hybrid_lm, next_token_loss, parameter_counts
from paperworks.core.lm.hybrid.moe import dead_experts, max_violation
from paperworks.core.lm.train import TrainConfig, log_row, make_optimizer
from paperworks.hybrid_lm.corpus import labels as make_labels
from paperworks.hybrid_lm.params import TrainParams


def forward_flops_per_token(cfg: HybridLMConfig, context: int) -> float:
    """Analytic forward FLOPs per token (multiply-add = 2 FLOPs), averaged over a causal sequence.

    Matmuls: 2 × (active parameters outside the embedding table) — routed experts count k/n.
    Sequence mixing per layer: softmax attention (A, M) reads (T+1)/2 earlier positions on
    average for scores and values: 2·2·H·D·(T+1)/2. KDA's chunkwise form does, per token and head,
    intra-chunk scores and values over (C+1)/2 positions plus the state read, the delta-rule read
    and the rank-1 write of a D×D state: 2·2·H·D·(C+1)/2 + 3·2·H·D². Norms, gates and the
    router's top-k are left out (a few percent at this size).
    """
    model = build_hybrid_lm(cfg, seed=0)
    active = parameter_counts(model)["active"] - model.embed.weight.numel()
    h, d = cfg.num_heads, cfg.head_dim
    mixing = 0.0
    for letter in cfg.mixers():
        if letter == "K":
            c = min(cfg.kda.chunk_size, context)
            mixing += 2 * 2 * h * d * (c + 1) / 2 + 3 * 2 * h * d * d
        else:
            mixing += 2 * 2 * h * d * (context + 1) / 2
    return 2.0 * active + mixing


def train_run(cfg: HybridLMConfig, tp: TrainParams, data: dict[str, np.ndarray], seed: int,
              live_dir: Path | str | None = None, desc: str = "hybrid_lm") -> tuple[torch.nn.Module, dict]:
    """Train one model; returns (model in eval mode, run record with history and cost)."""
    from tqdm import tqdm

    tokens = torch.as_tensor(data["tokens"])
    targets = torch.as_tensor(make_labels(data["tokens"], data["kind"]))
    n, context = tokens.shape
    model = build_hybrid_lm(cfg, seed=seed)
    counts = parameter_counts(model)
    flops_token = forward_flops_per_token(cfg, context)
    tc = TrainConfig(steps=tp.steps, batch_size=tp.batch_size, lr=tp.lr, warmup_steps=tp.warmup_steps,
                     min_lr_ratio=tp.min_lr_ratio, weight_decay=tp.weight_decay, grad_clip=tp.grad_clip,
                     log_every=tp.log_every)
    opt, sched = make_optimizer(model, tc)
    rng = np.random.default_rng(seed)
    live = None
    if live_dir is not None:
        from dvclive import Live

        live = Live(str(live_dir), dvcyaml=False, save_dvc_exp=False, report=None)
    history, step_maxvio, load_log, interval_load = [], [], [], None
    running = {"ce": [], "aux": [], "maxvio": [], "dead": []}
    order, cursor, cpu = rng.permutation(n), 0, 0.0
    model.train()
    for step in tqdm(range(tp.steps), desc=desc, mininterval=5.0):
        if cursor + tp.batch_size > n:
            order, cursor = rng.permutation(n), 0
        idx = torch.as_tensor(order[cursor: cursor + tp.batch_size])
        cursor += tp.batch_size
        t0 = time.process_time()
        total, ce, out = next_token_loss(model, {"input_ids": tokens[idx], "labels": targets[idx]})
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tp.grad_clip)
        opt.step()
        sched.step()
        cpu += time.process_time() - t0
        running["ce"].append(ce.item())
        running["aux"].append(float(out.aux_loss))
        if out.expert_load is not None:   # (MoE layers, experts): routing of this step's batch
            running["maxvio"].append(float(np.mean([max_violation(l) for l in out.expert_load])))
            running["dead"].append(float(np.mean([dead_experts(l) for l in out.expert_load])))
            step_maxvio.append(running["maxvio"][-1])
            interval_load = out.expert_load.double() if interval_load is None else interval_load + out.expert_load
        if (step + 1) % tp.log_every == 0 or step == tp.steps - 1:
            row = {"step": step + 1, "loss": float(np.mean(running["ce"])), "lr": sched.get_last_lr()[0],
                   "tokens": (step + 1) * tp.batch_size * context, "cpu_s": cpu}
            if running["aux"] and any(running["aux"]):
                row["aux_loss"] = float(np.mean(running["aux"]))
            if running["maxvio"]:
                row["maxvio"] = float(np.mean(running["maxvio"]))
                row["dead_experts"] = float(np.mean(running["dead"]))
            if interval_load is not None:   # expert-load curves: each expert's share of the interval's assignments
                share = interval_load / interval_load.sum(-1, keepdim=True)
                load_log.append({"step": step + 1, "share": share.tolist()})
                interval_load = None
            running = {k: [] for k in running}
            history.append(row)
            if live is not None:
                log_row(live, {k: v for k, v in row.items() if k != "tokens"})
    if live is not None:
        live.end()
    model.eval()
    tokens_seen = tp.steps * tp.batch_size * context
    record = {
        "history": history,
        "step_maxvio": step_maxvio,         # MaxVio of every step's routing, mean over MoE layers (MoE only)
        "load_log": load_log,               # per log interval: (MoE layers, experts) share of assignments
        "params": counts,
        "cost": {"tokens": tokens_seen, "flops_per_token_fwd": flops_token,
                 "train_flops": 3.0 * flops_token * tokens_seen,   # backward ≈ 2× forward
                 "cpu_s": cpu, "cpu_s_per_1k_tokens": 1000 * cpu / tokens_seen},
    }
    return model, record
