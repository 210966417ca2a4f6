"""Kedro-like glue between stages and the method: load/validate artifacts, build configs.

Pure helpers; the stage scripts do the reading and writing.
"""
from __future__ import annotations

from pathlib import Path

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


def load_tasks(path: Path = TASKS_FILE) -> pd.DataFrame:
    df = read_parquet(path, TASK_SCHEMA)
    bad = sorted(set(df["split"]) - {"sft", "train", "test"}) + sorted(set(df["family"]) - set(FAMILIES))
    if bad:
        raise ArtifactError(f"{path}: unexpected split/family values {bad}")
    for split in ("sft", "train", "test"):
        if not (df["split"] == split).any():
            raise ArtifactError(f"{path}: no '{split}' rows")
    return df


def eval_subset(test: pd.DataFrame, n_per_family: int) -> pd.DataFrame:
    """The first n test prompts of each family: the fixed held-out set of the curves."""
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
    steps = steps or spec.steps or o.steps
    return OPSDConfig(alpha=spec.alpha, rho=spec.rho, direction=spec.direction, teacher=spec.teacher, ema_beta=o.ema_beta,
                      steps=steps, prompts_per_step=o.prompts_per_step, lr=o.lr, warmup_steps=o.warmup_steps,
                      grad_clip=o.grad_clip, temperature=o.temperature, max_new_tokens=o.max_new_tokens,
                      eval_every=min(o.eval_every, steps), seed=seed)


def grpo_config(p: Params, seed: int) -> GRPOConfig:
    o, g = p.opsd, p.grpo
    return GRPOConfig(steps=g.steps or o.steps, prompts_per_step=o.prompts_per_step, group_size=g.group_size, lr=o.lr,
                      warmup_steps=o.warmup_steps, grad_clip=o.grad_clip, clip_eps=g.clip_eps, kl_coef=g.kl_coef,
                      adv_eps=g.adv_eps, temperature=o.temperature, max_new_tokens=o.max_new_tokens,
                      eval_every=min(o.eval_every, g.steps or o.steps), seed=seed)
