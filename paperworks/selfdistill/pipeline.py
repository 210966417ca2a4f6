"""Kedro-like glue between stages and the method: load/validate artifacts, build configs.

Pure helpers; the stage scripts do the reading and writing.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from paperworks.core.io import ArtifactError, read_parquet
from paperworks.core.lm import load_checkpoint, load_tokenizer
from paperworks.selfdistill.grpo import GRPOConfig
from paperworks.selfdistill.opsd import OPSDConfig
from paperworks.selfdistill.params import MethodSpec, Params
from paperworks.selfdistill.tasks import FAMILIES, TASK_SCHEMA

DATA = Path("data/selfdistill")
MODELS = Path("models/selfdistill")
PLOTS = Path("plots/selfdistill")
TASKS_FILE = DATA / "tasks.parquet"
TOKENIZER_FILE = DATA / "tokenizer.json"
BASE_FILE = MODELS / "base.safetensors"
SPLITS = ("sft", "train", "val", "test")


def run_file(method: str, seed: int) -> Path:
    return DATA / "runs" / method / f"seed{seed}.json"


def tune_file(lr: float) -> Path:
    return DATA / "grpo_tune" / f"lr{lr:g}.json"


def load_tasks(path: Path = TASKS_FILE) -> pd.DataFrame:
    df = read_parquet(path, TASK_SCHEMA)
    bad = sorted(set(df["split"]) - set(SPLITS)) + sorted(set(df["family"]) - set(FAMILIES))
    if bad:
        raise ArtifactError(f"{path}: unexpected split/family values {bad}")
    for name in SPLITS:
        if not (df["split"] == name).any():
            raise ArtifactError(f"{path}: no '{name}' rows")
    return df


def split(tasks: pd.DataFrame, name: str) -> pd.DataFrame:
    return tasks[tasks["split"] == name].reset_index(drop=True)


def eval_subset(test: pd.DataFrame, n_per_family: int) -> pd.DataFrame:
    """The first n prompts of each family: the fixed held-out (validation) set of the curves."""
    return test.groupby("family", sort=False).head(n_per_family).reset_index(drop=True)


def load_base(p: Params, tok):
    model, _, _ = load_checkpoint(BASE_FILE, cfg=p.model, vocab_size=len(tok))
    return model.eval()


def load_inputs(p: Params):
    tasks = load_tasks()
    tok = load_tokenizer(TOKENIZER_FILE)
    return tasks, tok


def opsd_config(p: Params, spec: MethodSpec, seed: int, steps: int | None = None) -> OPSDConfig:
    o = p.opsd
    steps = steps or o.steps
    return OPSDConfig(alpha=spec.alpha, rho=spec.rho, direction=spec.direction, teacher=spec.teacher, ema_beta=o.ema_beta,
                      steps=steps, prompts_per_step=o.prompts_per_step, lr=o.lr, warmup_steps=o.warmup_steps,
                      grad_clip=o.grad_clip, temperature=o.temperature, max_new_tokens=o.max_new_tokens,
                      eval_every=min(o.eval_every, steps), seed=seed)


def grpo_config(p: Params, seed: int, lr: float, steps: int | None = None) -> GRPOConfig:
    """GRPO on the distillation methods' budget, schedule shape and evaluation steps; only the
    peak learning rate is its own (tuned on validation)."""
    o, g = p.opsd, p.grpo
    steps = steps or o.steps
    return GRPOConfig(steps=steps, prompts_per_step=o.prompts_per_step, group_size=g.group_size, lr=lr,
                      warmup_steps=o.warmup_steps, grad_clip=o.grad_clip, clip_eps=g.clip_eps, kl_coef=g.kl_coef,
                      adv_eps=g.adv_eps, temperature=o.temperature, max_new_tokens=o.max_new_tokens,
                      eval_every=min(o.eval_every, steps), seed=seed)


def pick_grpo_lr(tuning: dict[float, dict]) -> tuple[float, pd.DataFrame]:
    """The peak learning rate whose tuning run ended highest on validation (ties: the smaller lr),
    and the table of every tried lr (start and final validation accuracy)."""
    if not tuning:
        raise ValueError("no GRPO tuning runs")
    def zero_groups(r: dict) -> float:
        v = [h["train_zero_reward_groups"] for h in r["history"] if "train_zero_reward_groups" in h]
        return float(np.mean(v)) if v else float("nan")

    rows = [{"lr": lr, "start_acc": r["history"][0]["acc"], "final_acc": r["history"][-1]["acc"], "steps": r["history"][-1]["step"],
             "zero_reward_groups": zero_groups(r)} for lr, r in sorted(tuning.items())]
    table = pd.DataFrame(rows)
    best = table.sort_values(["final_acc", "lr"], ascending=[False, True]).iloc[0]
    return float(best["lr"]), table
