"""On-policy self-distillation (OPSD) and SR-OPSD in one loop, CleanRL style.

Per update step:
1. the student samples one completion per prompt from the *plain* prompt (temperature 1: on-policy);
2. the self-teacher (EMA of the student, or the frozen base for the control) scores the same
   tokens given the *privileged* prompt (a verified worked solution in front);
3. the frozen reference π_ref (the base model) scores them given the plain prompt (only if α < 1);
4. target at every completion position: log π* ∝ α log p_T + (1−α) log p_ref (Prop. 3.1);
5. loss = mean over positions of D_ρ(student ‖ π*) — exact over the full vocabulary;
6. AdamW step with clipping, then θ_T ← β θ_T + (1−β) θ_S.
Logged per step (averaged between probes): loss, entropy, reward of the on-policy samples, the
learning rate; at each probe (validation): accuracy, entropy, KL(student ‖ base), and the
self-teacher's accuracy with the privileged context.
α = 1, ρ = 1, reverse = the standard reverse-KL OPSD; ``forward`` = D(π* ‖ student).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from paperworks.core.lm import TrainConfig, check_prompt_fits, completion_logits, encode_prompts, make_optimizer, sample
from paperworks.selfdistill.divergences import (
    anchored_target, check_alpha_rho, distill_divergence, ema_update, entropy, masked_mean,
)
from paperworks.selfdistill.evaluation import probe
from paperworks.selfdistill.tasks import FAMILIES, is_correct


@dataclass
class OPSDConfig:
    alpha: float = 1.0               # target placement: 1 = pure self-teacher, 0 = pure reference
    rho: float = 1.0                 # Rényi order of the projection: 1 = KL
    direction: str = "reverse"       # reverse: D(student ‖ target); forward: D(target ‖ student)
    teacher: str = "ema"             # ema | frozen (frozen = β = 1, the control)
    ema_beta: float = 0.99
    steps: int = 600
    prompts_per_step: int = 32
    lr: float = 1e-3
    warmup_steps: int = 10
    grad_clip: float = 1.0
    temperature: float = 1.0
    max_new_tokens: int = 40
    eval_every: int = 25
    seed: int = 0
    extra: dict = field(default_factory=dict)

    def validate(self, tok=None, prompts=None, max_positions: int | None = None) -> None:
        """Fail before any training: α ∉ [0, 1], ρ ≤ 0, β ∉ [0, 1), or a prompt that does not fit."""
        check_alpha_rho(self.alpha, self.rho)
        if not 0.0 <= self.ema_beta < 1.0:
            raise ValueError(f"ema_beta must lie in [0, 1) (use teacher='frozen' for β = 1), got {self.ema_beta}")
        if self.direction not in ("reverse", "forward"):
            raise ValueError(f"direction must be reverse|forward, got {self.direction!r}")
        if self.teacher not in ("ema", "frozen"):
            raise ValueError(f"teacher must be ema|frozen, got {self.teacher!r}")
        if tok is not None and prompts is not None and max_positions is not None:
            check_prompt_fits(tok, prompts, self.max_new_tokens, max_positions)


def _frozen(model):
    m = copy.deepcopy(model).eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def train_opsd(
    base_model,
    tok,
    train_rows,
    eval_rows,
    cfg: OPSDConfig,
    log: Callable[[dict], None] | None = None,
    desc: str = "opsd",
):
    """Run OPSD/SR-OPSD from ``base_model`` (left untouched). Returns (student, teacher, history, cost)."""
    cfg.validate(tok, list(train_rows["privileged_prompt"]) + list(eval_rows["privileged_prompt"]),
                 base_model.config.max_position_embeddings)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    student = copy.deepcopy(base_model).train()
    teacher = _frozen(base_model)                      # EMA copy (or frozen base)
    reference = _frozen(base_model)                    # π_ref = the base (the target uses it only if α < 1)
    opt, sched = make_optimizer(student, TrainConfig(lr=cfg.lr, warmup_steps=cfg.warmup_steps, weight_decay=0.0), cfg.steps)

    prompts = np.asarray(train_rows["prompt"], dtype=object)
    priv = np.asarray(train_rows["privileged_prompt"], dtype=object)
    answers = np.asarray(train_rows["answer"], dtype=object)
    fams = np.asarray(train_rows["family"], dtype=object)

    history: list[dict] = []
    window: list[dict] = []
    update_seconds: list[float] = []

    def checkpoint(step: int) -> None:
        row = {"step": step, **probe(student, teacher, tok, eval_rows, cfg.max_new_tokens, reference=reference)}
        if window:
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
        idx = rng.choice(len(prompts), size=cfg.prompts_per_step, replace=False)
        # 1. on-policy samples from the plain prompt
        s = sample(student, tok, list(prompts[idx]), cfg.max_new_tokens, temperature=cfg.temperature)
        # 2-3. teacher (privileged prompt) and reference (plain prompt) score the same tokens
        with torch.no_grad():
            t_ids, t_mask = encode_prompts(tok, list(priv[idx]))
            teacher_logits = completion_logits(teacher, t_ids, t_mask, s.completion_ids, s.completion_mask)
            ref_logits = None
            if cfg.alpha < 1.0:
                ref_logits = completion_logits(reference, s.prompt_ids, s.prompt_mask, s.completion_ids, s.completion_mask)
            target = anchored_target(teacher_logits, ref_logits, cfg.alpha)  # 4. Prop. 3.1
        student_logits = completion_logits(student, s.prompt_ids, s.prompt_mask, s.completion_ids, s.completion_mask)
        # 5. exact divergence over the vocabulary at every position of the student's own sample
        loss = masked_mean(distill_divergence(student_logits, target, cfg.rho, cfg.direction), s.completion_mask)
        lr = sched.get_last_lr()[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        if cfg.teacher == "ema":  # 6. the self-teacher follows the student slowly
            ema_update(teacher, student, cfg.ema_beta)
        update_seconds.append(time.perf_counter() - t0)

        with torch.no_grad():
            h = entropy(student_logits.detach())
            stats = {"loss": loss.item(), "entropy": masked_mean(h, s.completion_mask).item(), "lr": lr,
                     "reward": float(np.mean([is_correct(t, a) for t, a in zip(s.texts, answers[idx])])),
                     "length": float(s.completion_mask.sum(1).float().mean())}
            for fam in FAMILIES:
                sel = torch.as_tensor(fams[idx] == fam)
                if sel.any():
                    stats[f"entropy_{fam}"] = masked_mean(h[sel], s.completion_mask[sel]).item()
        window.append(stats)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            checkpoint(step)

    n_forward = 1 + 1 + (1 if cfg.alpha < 1.0 else 0)  # student (with grad) + teacher + reference
    cost = {"forward_passes_per_step": n_forward, "generate_calls_per_step": 1,
            "seconds_per_step": float(np.mean(update_seconds)), "samples_per_step": cfg.prompts_per_step}
    student.eval()
    return student, teacher, history, cost
