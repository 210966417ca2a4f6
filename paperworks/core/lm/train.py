"""Supervised training loop for the tiny LM: AdamW, linear warm-up + cosine decay, gradient
clipping, tqdm progress and dvclive curves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

IGNORE = -100


@dataclass
class TrainConfig:
    steps: int = 500
    batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1       # cosine decays to lr * min_lr_ratio
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    betas: tuple[float, float] = (0.9, 0.95)
    log_every: int = 10
    eval_every: int = 0             # 0 = no evaluation during training


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float = 0.1) -> float:
    """LR multiplier: linear 0→1 over ``warmup`` steps, then cosine 1→``min_ratio`` at ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model, cfg: TrainConfig, total_steps: int | None = None):
    """AdamW over trainable parameters (no decay on norms/biases) + warm-up/cosine schedule."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=cfg.betas,
    )
    total = total_steps or cfg.steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, cfg.warmup_steps, total, cfg.min_lr_ratio))
    return opt, sched


def encode_sft(tokenizer, prompts: Sequence[str], completions: Sequence[str], max_positions: int) -> dict[str, torch.Tensor]:
    """``<bos> prompt completion <eos>``, right-padded; loss only on completion + ``<eos>``.

    Raises ``ValueError`` when an example does not fit the context.
    """
    rows, labels = [], []
    for p, c in zip(prompts, completions, strict=True):
        pi = [tokenizer.bos_token_id] + tokenizer(p, add_special_tokens=False)["input_ids"]
        ci = tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if len(pi) + len(ci) > max_positions:
            raise ValueError(f"example of {len(pi) + len(ci)} tokens exceeds max_positions={max_positions}: {p[:60]!r}")
        rows.append(pi + ci)
        labels.append([IGNORE] * len(pi) + ci)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    lab = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, l) in enumerate(zip(rows, labels)):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(l)] = torch.tensor(l)
        mask[i, : len(r)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": lab}


def sft_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy over labelled tokens."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), batch["labels"][:, 1:].reshape(-1), ignore_index=IGNORE
    )


def _trim(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    width = int(batch["attention_mask"].sum(1).max())  # right-padded: drop all-pad columns
    return {k: v[:, :width] for k, v in batch.items()}


def log_row(live, row: dict, prefix: str = "") -> None:
    """One training-log row to dvclive at the row's ``step``; every other key becomes a metric."""
    live.step = int(row["step"])
    for k, v in row.items():
        if k != "step":
            live.log_metric(prefix + k, float(v))


def train_sft(
    model,
    data: dict[str, torch.Tensor],
    cfg: TrainConfig,
    seed: int = 0,
    live_dir: Path | str | None = None,
    eval_fn: Callable[[int], dict[str, float]] | None = None,
    desc: str = "sft",
    loss_fn: Callable[[object, dict[str, torch.Tensor]], torch.Tensor] | None = None,
) -> list[dict[str, float]]:
    """Train on ``data`` (from :func:`encode_sft`) for ``cfg.steps`` minibatches; returns the log rows.

    ``eval_fn(step) -> {name: value}`` runs every ``cfg.eval_every`` steps and at the end;
    every row is also logged to dvclive under ``live_dir`` when given. ``loss_fn(model, batch)``
    replaces the completion-masked LM loss (e.g. a loss that reads extra per-row fields such as task ids;
    it gets the batch untrimmed).
    """
    from tqdm import tqdm

    rng = np.random.default_rng(seed)
    n = data["input_ids"].shape[0]
    opt, sched = make_optimizer(model, cfg)
    live = None
    if live_dir is not None:
        from dvclive import Live

        live = Live(str(live_dir), dvcyaml=False, save_dvc_exp=False, report=None)
    history: list[dict[str, float]] = []
    model.train()
    order = rng.permutation(n)
    cursor = 0
    running = []
    for step in tqdm(range(cfg.steps), desc=desc, mininterval=2.0):
        if cursor + cfg.batch_size > n:
            order, cursor = rng.permutation(n), 0
        idx = torch.as_tensor(order[cursor: cursor + cfg.batch_size])
        cursor += cfg.batch_size
        batch = {k: v[idx] for k, v in data.items()}
        loss = sft_loss(model, _trim(batch)) if loss_fn is None else loss_fn(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        running.append(loss.item())
        last = step == cfg.steps - 1
        do_eval = eval_fn is not None and ((cfg.eval_every and (step + 1) % cfg.eval_every == 0) or last)
        if (step + 1) % cfg.log_every == 0 or last or do_eval:
            row = {"step": step + 1, "loss": float(np.mean(running)), "lr": sched.get_last_lr()[0], "grad_norm": float(grad_norm)}
            running = []
            if do_eval:
                model.eval()
                row.update(eval_fn(step + 1))
                model.train()
            history.append(row)
            if live is not None:
                log_row(live, row)
    if live is not None:
        live.end()
    model.eval()
    return history
