"""Run one method over its seeds and collect what the evaluate stage needs (pure of file I/O
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
from paperworks.selfdistill.pipeline import eval_subset, grpo_config, opsd_config


TIMING_KEYS = ("seconds_per_step", "train_seconds")  # machine facts: logged, never in the run record


def run_seeds(p: Params, base, tok, tasks, method: str, spec: MethodSpec | None, seeds, global_seed: int,
              steps: int | None = None, live=None, final: bool = True):
    """Train ``method`` once per seed from the same base; returns (result dict, {seed: student})."""
    train = tasks[tasks["split"] == "train"].reset_index(drop=True)
    test = tasks[tasks["split"] == "test"].reset_index(drop=True)
    evals = eval_subset(test, p.opsd.n_eval_per_family)
    runs, students = [], {}
    for i, s in enumerate(seeds):
        # same derived seed for every method: paired comparisons see the same prompt order
        seed = derive_seed(global_seed, "selfdistill", "opsd", s)
        seed_everything(seed)
        tag = f"s{s}/"

        def log(row, tag=tag):
            if live is not None:
                log_row(live, row, prefix=tag)

        t0 = time.perf_counter()
        if method == "grpo":
            student, history, cost = train_grpo(base, tok, train, evals, grpo_config(p, seed), log=log, desc=f"grpo s{s}")
        else:
            cfg = opsd_config(p, spec, seed, steps)
            student, _, history, cost = train_opsd(base, tok, train, evals, cfg, log=log, desc=f"{method} s{s}")
        cost["train_seconds"] = time.perf_counter() - t0
        label = method if spec is None or method != "sweep" else f"sweep_a{spec.alpha:g}_r{spec.rho:g}"
        write_run_log(f"selfdistill_{label}_s{s}", {k: cost.pop(k) for k in TIMING_KEYS if k in cost})
        fin = final_eval(student, tok, test, p.opsd.max_new_tokens, p.eval.pass_k, p.eval.temperature) if final else {}
        runs.append({"seed": s, "history": history, "final": fin, "cost": cost})
        students[s] = student
    result = {"method": method, "spec": spec.model_dump() if spec else {"grpo": p.grpo.model_dump()}, "runs": runs}
    return result, students
