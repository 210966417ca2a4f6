"""GRPO on the exact-match reward: the RLVR baseline, on the same budget of samples per step.

Per update step: ``prompts_per_step / group_size`` prompts, ``group_size`` samples each;
A = (r − mean_group) / (std_group + ε); clipped-ratio surrogate per token (one update per
batch, so the ratio is 1 in value but carries the policy gradient); minus a k3 KL to the
frozen reference, ``exp(ref − logp) − (ref − logp) − 1``.

Diagnostics logged per step (averaged between probes): the share of groups whose rewards are all
zero (no learning signal, and the normalised advantage is 0 there) and of groups with no contrast
at all, the k3 KL to the reference on the samples, the learning rate; at each validation probe
also KL(student ‖ base) along the student's samples.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from paperworks.core.lm import TrainConfig, check_prompt_fits, completion_logits, make_optimizer, sample
from paperworks.selfdistill.divergences import entropy, masked_mean
from paperworks.selfdistill.evaluation import probe
from paperworks.selfdistill.tasks import FAMILIES, is_correct


@dataclass
class GRPOConfig:
    steps: int = 600
    prompts_per_step: int = 32       # samples per step (= OPSD's); prompts = this / group_size
    group_size: int = 4
    lr: float = 1e-3
    warmup_steps: int = 10
    grad_clip: float = 1.0
    clip_eps: float = 0.2
    kl_coef: float = 0.02
    adv_eps: float = 1e-4
    temperature: float = 1.0
    max_new_tokens: int = 40
    eval_every: int = 25
    seed: int = 0


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float) -> torch.Tensor:
    """(r − mean) / (std + ε) within each consecutive group of ``group_size`` samples."""
    g = rewards.view(-1, group_size)
    return ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True, unbiased=False) + eps)).view(-1)


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def train_grpo(base_model, tok, train_rows, eval_rows, cfg: GRPOConfig, log: Callable[[dict], None] | None = None, desc: str = "grpo"):
    """Returns (student, history, cost); ``base_model`` is left untouched."""
    if cfg.prompts_per_step % cfg.group_size:
        raise ValueError(f"prompts_per_step {cfg.prompts_per_step} must be a multiple of group_size {cfg.group_size}")
    check_prompt_fits(tok, list(train_rows["prompt"]), cfg.max_new_tokens, base_model.config.max_position_embeddings)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    student = copy.deepcopy(base_model).train()
    reference = copy.deepcopy(base_model).eval().requires_grad_(False)  # π_ref = the base (the KL term and the probe's KL)
    opt, sched = make_optimizer(student, TrainConfig(lr=cfg.lr, warmup_steps=cfg.warmup_steps, weight_decay=0.0), cfg.steps)
    prompts = np.asarray(train_rows["prompt"], dtype=object)
    answers = np.asarray(train_rows["answer"], dtype=object)
    fams = np.asarray(train_rows["family"], dtype=object)
    n_prompts = cfg.prompts_per_step // cfg.group_size
    history, window, update_seconds = [], [], []

    def checkpoint(step: int) -> None:
        row = {"step": step, **probe(student, None, tok, eval_rows, cfg.max_new_tokens, reference=reference)}
        for key in sorted({k for w in window for k in w}):
            row[f"train_{key}"] = float(np.mean([w[key] for w in window if key in w]))
        window.clear()
        history.append(row)
        if log is not None:
            log(row)
        student.train()

    checkpoint(0)
    for step in tqdm(range(1, cfg.steps + 1), desc=desc, mininterval=2.0):
        t0 = time.perf_counter()
        idx = rng.choice(len(prompts), size=n_prompts, replace=False)
        s = sample(student, tok, list(prompts[idx]), cfg.max_new_tokens, temperature=cfg.temperature,
                   num_return_sequences=cfg.group_size)
        rep_answers = np.repeat(answers[idx], cfg.group_size)
        rewards = torch.tensor([float(is_correct(t, a)) for t, a in zip(s.texts, rep_answers)])
        adv = group_advantages(rewards, cfg.group_size, cfg.adv_eps).unsqueeze(1)
        logits = completion_logits(student, s.prompt_ids, s.prompt_mask, s.completion_ids, s.completion_mask)
        logp = token_logprobs(logits, s.completion_ids)
        ratio = torch.exp(logp - logp.detach())          # old policy = the sampling policy (one update)
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv)
        per_token = -surrogate
        k3 = torch.zeros_like(logp)
        if cfg.kl_coef > 0:
            with torch.no_grad():
                ref_logp = token_logprobs(
                    completion_logits(reference, s.prompt_ids, s.prompt_mask, s.completion_ids, s.completion_mask), s.completion_ids)
            log_ratio = ref_logp - logp
            k3 = torch.exp(log_ratio) - log_ratio - 1
            per_token = per_token + cfg.kl_coef * k3
        loss = masked_mean(per_token, s.completion_mask)
        lr = sched.get_last_lr()[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        update_seconds.append(time.perf_counter() - t0)
        with torch.no_grad():
            h = entropy(logits.detach())
            groups = rewards.view(-1, cfg.group_size)
            stats = {"loss": loss.item(), "entropy": masked_mean(h, s.completion_mask).item(), "lr": lr,
                     "reward": float(rewards.mean()), "length": float(s.completion_mask.sum(1).float().mean()),
                     "zero_reward_groups": float((groups.sum(1) == 0).float().mean()),
                     "no_contrast_groups": float((groups.std(1, unbiased=False) == 0).float().mean())}
            if cfg.kl_coef > 0:
                stats["kl_k3"] = masked_mean(k3.detach(), s.completion_mask).item()
            rep_fams = np.repeat(fams[idx], cfg.group_size)
            for fam in FAMILIES:
                sel = torch.as_tensor(rep_fams == fam)
                if sel.any():
                    stats[f"entropy_{fam}"] = masked_mean(h[sel], s.completion_mask[sel]).item()
        window.append(stats)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            checkpoint(step)

    cost = {"forward_passes_per_step": 1 + (1 if cfg.kl_coef > 0 else 0), "generate_calls_per_step": 1,
            "seconds_per_step": float(np.mean(update_seconds)), "samples_per_step": cfg.prompts_per_step}
    student.eval()
    return student, history, cost
