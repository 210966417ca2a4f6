"""Run one method for one seed and collect what the evaluate stage needs (pure of file I/O
except the dvclive logger handed in and the machine's timings, which go to ``logs/``: a tracked
output must be the same bytes on every rerun)."""
from __future__ import annotations

import time

from paperworks.core.io import write_run_log
from paperworks.core.lm import log_row
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.selfdistill.evaluation import final_eval
from paperworks.selfdistill.grpo import train_grpo
from paperworks.selfdistill.opsd import train_opsd
from paperworks.selfdistill.params import MethodSpec, Params
from paperworks.selfdistill.pipeline import eval_subset, grpo_config, opsd_config, split

TIMING_KEYS = ("seconds_per_step", "train_seconds")  # machine facts: logged, never in the run record


def run_seed(p: Params, base, tok, tasks, method: str, spec: MethodSpec | None, seed_id: int, global_seed: int,
             steps: int | None = None, grpo_lr: float | None = None, live=None, final: bool = True, label: str | None = None):
    """Train ``method`` (``grpo`` or a distillation variant) for one seed from the base.

    Returns (run record, student). Every method derives the same seed from ``seed_id``: paired runs
    see the same sampling seed and the same prompt order. The curves are probed on the validation
    subset; ``final`` adds the whole test set's evaluation.
    """
    train, test = split(tasks, "train"), split(tasks, "test")
    evals = eval_subset(split(tasks, "val"), p.opsd.n_eval_per_family)
    seed = derive_seed(global_seed, "selfdistill", "opsd", seed_id)
    seed_everything(seed)

    def log(row):
        if live is not None:
            log_row(live, row)

    t0 = time.perf_counter()
    if method == "grpo":
        cfg = grpo_config(p, seed, grpo_lr if grpo_lr is not None else p.opsd.lr, steps)
        student, history, cost = train_grpo(base, tok, train, evals, cfg, log=log, desc=f"grpo s{seed_id}")
        config = {"lr": cfg.lr, **p.grpo.model_dump(exclude={"lrs", "tune_seed"})}
    else:
        cfg = opsd_config(p, spec, seed, steps)
        student, _, history, cost = train_opsd(base, tok, train, evals, cfg, log=log, desc=f"{method} s{seed_id}")
        config = {"lr": cfg.lr, **spec.model_dump()}
    cost["train_seconds"] = time.perf_counter() - t0
    write_run_log(f"selfdistill_{label or method}_s{seed_id}", {k: cost.pop(k) for k in TIMING_KEYS if k in cost})
    fin = final_eval(student, tok, test, p.opsd.max_new_tokens, p.eval.pass_k, p.eval.temperature) if final else {}
    record = {"method": method, "seed": seed_id, "config": config, "steps": cfg.steps, "history": history, "final": fin,
              "cost": cost}
    return record, student
