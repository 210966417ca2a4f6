"""Online training on the search episodes: GRPO, OPSD, MAPD (and the SFT used by warm start and
trace imitation). One student, one loop, the method only changes the loss:

    GRPO   L = L_pg
    OPSD   L = L_pg + λ_t · KL(π(·|q, y<t) ‖ sg π(·|q, answer, y<t))
    MAPD   L = L_pg + λ_t · KL(π(·|q, y<t) ‖ sg π(·|q, protocol, y<t))

Both KL branches are the *same weights*; the privileged branch runs under no_grad (stop-gradient).
λ_t ramps linearly from 0 to λ over ``kl_warmup_steps`` (λ = 1 collapsed both branches in the
calibration run). Tool-inserted tokens are masked out of L_pg and of the KL.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from paperworks.core.lm.sampling import completion_logits
from paperworks.core.lm.train import IGNORE, TrainConfig, log_row, make_optimizer
from paperworks.protocol_distill.episode import Codec, Completion, exact_match
from paperworks.protocol_distill.rollout import left_pad, rollout
from paperworks.protocol_distill.search import SearchTool


# ---------------------------------------------------------------- supervised data (warm start, traces)
def sft_batch(codec: Codec, prompts: Sequence[list[int]], completions: Sequence[Completion], max_positions: int) -> dict[str, torch.Tensor]:
    """Right-padded ``prompt + completion``; labels only on model-written completion tokens."""
    rows, labels = [], []
    for p, c in zip(prompts, completions, strict=True):
        ids = [codec.word_to_id.get(w, codec.unk) for w in c.words]
        row = list(p) + ids
        if len(row) > max_positions:
            raise ValueError(f"example of {len(row)} tokens exceeds max_positions={max_positions}")
        rows.append(row)
        labels.append([IGNORE] * len(p) + [t if m else IGNORE for t, m in zip(ids, c.model_mask)])
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), codec.pad, dtype=torch.long)
    lab = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, l) in enumerate(zip(rows, labels)):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(l)] = torch.tensor(l)
        mask[i, : len(r)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": lab}


def labelled_token_nll(model, batch: dict[str, torch.Tensor], chunk_rows: int = 8) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over the labelled tokens of a right-padded batch, and their count.

    The same sum as one padded forward over the whole batch, computed cheaper: rows go through the
    decoder in length-sorted chunks of ``chunk_rows``, each trimmed to its longest row, and the LM head
    sees only positions that carry a label. Warm-start demonstrations average 78 tokens while a random
    batch of 32 pads to ≈ 200, and 19 % of positions are labelled; one SFT step took 192 ms padded and
    84 ms this way (one thread, Intel Xeon, load 0.2).
    """
    lengths = batch["attention_mask"].sum(1)
    order = torch.argsort(lengths, descending=True, stable=True)
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    total = torch.zeros((), dtype=torch.float32)
    count = 0
    for start in range(0, len(order), chunk_rows):
        rows = order[start:start + chunk_rows]
        width = int(lengths[rows].max())
        labels = batch["labels"][rows, 1:width]
        labelled = labels != IGNORE
        if not bool(labelled.any()):
            continue
        hidden = decoder(input_ids=batch["input_ids"][rows, :width], attention_mask=batch["attention_mask"][rows, :width],
                         use_cache=False).last_hidden_state[:, :-1]
        logits = head(hidden[labelled]).float()
        total = total + torch.nn.functional.cross_entropy(logits, labels[labelled], reduction="sum")
        count += int(labelled.sum())
    return total, count


def packed_sft_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The core ``sft_loss`` (mean cross-entropy over the batch's labelled tokens, token-weighted) via
    :func:`labelled_token_nll`: the ``loss_fn`` of warm start and trace imitation. It lives here, not in
    ``core.lm``, because every LM stage of the project declares ``core/lm/train.py`` as a dep."""
    total, count = labelled_token_nll(model, batch)
    if count == 0:
        raise ValueError("packed_sft_loss: no labelled tokens in the batch")
    return total / count


@torch.no_grad()
def heldout_loss(model, data: dict[str, torch.Tensor], batch_size: int = 64) -> float:
    """Mean next-token cross-entropy over every labelled token of ``data`` (token-weighted, not
    batch-weighted), in eval mode: the held-out curve the convergence check reads. Unlike the
    training loss it does not keep falling while the model memorises its training examples (which
    word *this* fact's document uses), and it is the same examples at every point, so it is smooth."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, data["input_ids"].shape[0], batch_size):
        nll, n = labelled_token_nll(model, {k: v[start:start + batch_size] for k, v in data.items()})
        total += float(nll)
        count += n
    if was_training:
        model.train()
    if count == 0:
        raise ValueError("heldout_loss: no labelled tokens in the held-out examples")
    return total / count


# ---------------------------------------------------------------- the loss terms
def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def group_advantages(rewards: torch.Tensor, normalise_std: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """GRPO advantage over groups: rewards (P, G) → (r − mean_g) / (std_g + eps) (or r − mean_g)."""
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not normalise_std:
        return centred
    return centred / (rewards.std(dim=1, keepdim=True, unbiased=False) + eps)


def masked_mean_per_row(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.float()
    return (x * m).sum(1) / m.sum(1).clamp(min=1)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip_eps: float) -> torch.Tensor:
    """Clipped-ratio GRPO loss: per-sequence token mean, then batch mean."""
    ratio = torch.exp(logp - old_logp)
    a = adv[:, None]
    per_token = -torch.minimum(ratio * a, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * a)
    return masked_mean_per_row(per_token, mask).mean()


def kl_to_privileged(student_logits: torch.Tensor, privileged_logits: torch.Tensor, mask: torch.Tensor,
                     direction: str = "reverse") -> torch.Tensor:
    """Mean per-token KL between the student's and the privileged branch's next-token distributions.

    ``reverse``: KL(π_student ‖ π_privileged) (on-policy distillation); ``forward``: KL(π_privileged ‖ π_student).
    The privileged logits are detached here: the distillation target never receives gradient.
    """
    log_s = torch.log_softmax(student_logits.float(), dim=-1)
    log_p = torch.log_softmax(privileged_logits.detach().float(), dim=-1)
    if direction == "reverse":
        kl = (log_s.exp() * (log_s - log_p)).sum(-1)
    elif direction == "forward":
        kl = (log_p.exp() * (log_p - log_s)).sum(-1)
    else:
        raise ValueError(f"kl direction must be 'reverse' or 'forward', got {direction!r}")
    m = mask.float()
    return (kl * m).sum() / m.sum().clamp(min=1)


def kl_weight(step: int, kl_coef: float, warmup_steps: int) -> float:
    """λ_t: linear warm-up from 0 to λ, then constant."""
    if warmup_steps <= 0:
        return kl_coef
    return kl_coef * min(1.0, step / warmup_steps)


# ---------------------------------------------------------------- online training
@dataclass
class OnlineConfig:
    method: str                  # "grpo" | "opsd" | "mapd"
    steps: int = 40
    prompts_per_step: int = 8
    group_size: int = 8
    lr: float = 1e-3
    temperature: float = 1.0
    clip_eps: float = 0.2
    normalise_std: bool = True
    kl_coef: float = 0.1
    kl_warmup_steps: int = 10
    kl_direction: str = "reverse"
    max_completion: int = 64
    max_searches: int = 4
    grad_clip: float = 1.0
    probe_every: int = 10


@dataclass
class OnlineItem:
    prompt: list[int]                 # <bos> question <act>
    privileged: list[int] | None      # <bos> question + protocol/answer <act>; None = no valid context
    answer: str


def train_online(model, codec: Codec, tool: SearchTool, items: list[OnlineItem], cfg: OnlineConfig, seed: int,
                 live_dir: Path | str | None = None, probe: Callable[[], dict[str, float]] | None = None) -> list[dict]:
    """GRPO (+ KL to the privileged branch for OPSD/MAPD) for ``cfg.steps`` updates; returns the log rows."""
    from tqdm import tqdm

    if cfg.method not in ("grpo", "opsd", "mapd"):
        raise ValueError(f"unknown online method {cfg.method!r}")
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    opt, sched = make_optimizer(model, TrainConfig(steps=cfg.steps, lr=cfg.lr, warmup_steps=0, min_lr_ratio=1.0,
                                                   weight_decay=0.0, grad_clip=cfg.grad_clip))
    live = None
    if live_dir is not None:
        from dvclive import Live

        live = Live(str(live_dir), dvcyaml=False, save_dvc_exp=False, report=None)
    history = []
    for step in tqdm(range(cfg.steps), desc=cfg.method, mininterval=2.0):
        batch = [items[i] for i in rng.choice(len(items), size=cfg.prompts_per_step, replace=False)]
        prompts = [it.prompt for it in batch for _ in range(cfg.group_size)]
        ro = rollout(model, codec, prompts, tool, cfg.max_completion, cfg.max_searches, cfg.temperature, generator=gen)
        rewards = torch.tensor([exact_match(a, it.answer) for a, it in zip(ro.answers, (it for it in batch for _ in range(cfg.group_size)))])
        adv = group_advantages(rewards.view(cfg.prompts_per_step, cfg.group_size), cfg.normalise_std).view(-1)
        model.train()
        logits = completion_logits(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
        logp = token_logprobs(logits, ro.completion_ids)
        # one update per batch of rollouts: the old policy is the current one (ratio 1, clip inactive)
        loss_pg = policy_loss(logp, logp.detach(), adv, ro.loss_mask, cfg.clip_eps)
        loss = loss_pg
        kl_value, lam = 0.0, 0.0
        if cfg.method in ("opsd", "mapd"):
            rows = [i for i, it in enumerate(it for it in batch for _ in range(cfg.group_size)) if it.privileged is not None]
            if rows:
                priv = [batch[i // cfg.group_size].privileged for i in rows]
                p_ids, p_mask = left_pad(priv, codec.pad)
                with torch.no_grad():  # stop-gradient: the privileged branch is a target, not a learner
                    p_logits = completion_logits(model, p_ids, p_mask, ro.completion_ids[rows], ro.completion_mask[rows])
                kl = kl_to_privileged(logits[rows], p_logits, ro.loss_mask[rows], cfg.kl_direction)
                lam = kl_weight(step, cfg.kl_coef, cfg.kl_warmup_steps)
                loss = loss + lam * kl
                kl_value = kl.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        groups = rewards.view(cfg.prompts_per_step, cfg.group_size)
        row = {"step": step + 1, "reward": float(rewards.mean()), "loss_pg": loss_pg.item(), "kl": kl_value, "lambda": lam,
               "all_zero_groups": float((groups.sum(1) == 0).float().mean()),
               "model_tokens": float(ro.loss_mask.sum(1).float().mean()), "answered": float(np.mean([a is not None for a in ro.answers]))}
        if probe is not None and ((step + 1) % cfg.probe_every == 0 or step == cfg.steps - 1):
            row.update(probe())
        history.append(row)
        if live is not None:
            log_row(live, row)
    if live is not None:
        live.end()
    model.eval()
    return history
