"""Cost per update step of each selfdistill method at the default sizes, and peak memory.

    python benchmarks/selfdistill_step_cost.py [--threads 2] [--steps 10] [--batch 32]

Each method runs in its own process (so peak RSS is its own) from a freshly initialised
default-size model on freshly generated default-profile tasks (no DVC outputs needed).
Prints: full-sequence forward passes per step, wall and CPU seconds per update step (CPU
includes the two validation probes, at step 0 and the last step), peak RSS.
``--batch`` overrides opsd.prompts_per_step (samples per update step) to read the cost curve.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("reverse_kl", "forward_kl", "sr_opsd", "frozen_teacher", "grpo")


def one(method: str, steps: int, threads: int, batch: int | None = None) -> dict:
    import pandas as pd
    import torch

    sys.path.insert(0, str(ROOT))
    from paperworks.core.lm import build_model, train_tokenizer
    from paperworks.core.profile import compose
    from paperworks.selfdistill.grpo import train_grpo
    from paperworks.selfdistill.opsd import train_opsd
    from paperworks.selfdistill.params import Params
    from paperworks.selfdistill.pipeline import eval_subset, grpo_config, opsd_config
    from paperworks.selfdistill.tasks import make_tasks

    torch.set_num_threads(threads)
    p = Params.model_validate(compose("default", ROOT / "conf")["selfdistill"])
    if batch:
        p = p.model_copy(update={"opsd": p.opsd.model_copy(update={"prompts_per_step": batch})})
    small = p.data.model_copy(update={"n_sft": 30, "n_train_prompts": 300, "n_test_per_family": 8, "n_val_per_family": 8})
    tasks = pd.DataFrame(make_tasks(small, 0))
    tok = train_tokenizer(list(tasks["privileged_prompt"]) + list(tasks["completion"]))
    model = build_model(p.model, len(tok), seed=0)
    train = tasks[tasks.split == "train"].reset_index(drop=True)
    evals = eval_subset(tasks[tasks.split == "val"], p.opsd.n_eval_per_family)
    import time

    cpu0 = time.process_time()
    if method == "grpo":
        cfg = grpo_config(p, 0, p.opsd.lr)
        cfg.steps, cfg.eval_every = steps, steps
        _, _, cost = train_grpo(model, tok, train, evals, cfg)
    else:
        cfg = opsd_config(p, p.methods[method], 0, steps)
        cfg.eval_every = steps
        _, _, _, cost = train_opsd(model, tok, train, evals, cfg)
    cost["cpu_seconds_per_step"] = (time.process_time() - cpu0) / steps
    cost["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return cost


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--one", choices=METHODS)
    ap.add_argument("--batch", type=int, default=0, help="samples per update step (0: the default profile's)")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.steps, args.threads, args.batch or None)))
        return
    print(f"threads={args.threads} steps={args.steps} batch={args.batch or 'default'} "
          "(random-init default-size model: completions run to max length)")
    print("| method | forward passes/step | generate calls/step | wall s/step | CPU s/step (with 2 probes) | peak RSS MiB |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")
    for m in METHODS:
        out = subprocess.run([sys.executable, __file__, "--one", m, "--steps", str(args.steps), "--threads", str(args.threads),
                              "--batch", str(args.batch)],
                             check=True, capture_output=True, text=True).stdout
        c = json.loads(out.strip().splitlines()[-1])
        print(f"| {m} | {c['forward_passes_per_step']} | {c['generate_calls_per_step']} | {c['seconds_per_step']:.3f} | {c['cpu_seconds_per_step']:.3f} | {c['peak_rss_mib']:.0f} |")


if __name__ == "__main__":
    main()
