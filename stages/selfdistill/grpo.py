"""Stage selfdistill_grpo@<seed>: the RLVR baseline (GRPO on the exact-match reward) for one seed,
same base, budget, schedule shape and evaluation steps as the distillation methods, at the peak
learning rate that ended highest on validation in the tuning runs (selfdistill_grpo_tune)."""
from __future__ import annotations

import argparse

from paperworks.core.io import read_json, write_json
from paperworks.core.lm import save_checkpoint
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.selfdistill.params import Params
from paperworks.selfdistill.pipeline import MODELS, PLOTS, load_base, load_inputs, pick_grpo_lr, run_file, tune_file
from paperworks.selfdistill.runner import run_seed


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    p = load_section("selfdistill", Params)
    if args.seed not in p.opsd.seeds:
        raise ParamsError(f"  selfdistill.opsd.seeds: {args.seed} is not one of {p.opsd.seeds}")
    lr, _ = pick_grpo_lr({lr: read_json(tune_file(lr)) for lr in p.grpo.lrs})
    tasks, tok = load_inputs(p)
    base = load_base(p, tok)
    from dvclive import Live

    live = Live(str(PLOTS / f"live_grpo_s{args.seed}"), dvcyaml=False, save_dvc_exp=False, report=None)
    record, student = run_seed(p, base, tok, tasks, "grpo", None, args.seed, global_seed(read_params_file()), grpo_lr=lr, live=live)
    live.end()
    save_checkpoint(student, MODELS / "runs" / "grpo" / f"seed{args.seed}.safetensors", p.model, len(tok))
    write_json(run_file("grpo", args.seed), record)
    print("grpo", args.seed, f"lr={lr:g}", {k: round(v, 3) for k, v in record["final"].items()})


if __name__ == "__main__":
    main()
