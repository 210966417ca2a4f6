"""Stage selfdistill_distill@<method>: OPSD (reverse/forward KL), SR-OPSD or the frozen-teacher
control, over every seed, from the same base model and with the same budget.

    python -m stages.selfdistill.distill --method sr_opsd
"""
from __future__ import annotations

import argparse

from paperworks.core.io import write_json
from paperworks.core.lm import save_checkpoint
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.selfdistill.params import METHODS, Params
from paperworks.selfdistill.pipeline import DATA, MODELS, PLOTS, load_base, load_inputs
from paperworks.selfdistill.runner import run_seeds


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", required=True)
    args = ap.parse_args()
    p = load_section("selfdistill", Params)
    if args.method not in p.methods:
        raise ParamsError(f"  selfdistill.methods.{args.method}: not configured (allowed: {', '.join(METHODS)})")
    spec = p.methods[args.method]
    tasks, tok = load_inputs(p)
    base = load_base(p, tok)
    from dvclive import Live

    live = Live(str(PLOTS / f"live_{args.method}"), dvcyaml=False, save_dvc_exp=False, report=None)
    result, students = run_seeds(p, base, tok, tasks, args.method, spec, p.opsd.seeds, global_seed(read_params_file()), live=live)
    live.end()
    for s, student in students.items():
        save_checkpoint(student, MODELS / "runs" / args.method / f"seed{s}.safetensors", p.model, len(tok))
    write_json(DATA / "runs" / f"{args.method}.json", result)
    for r in result["runs"]:
        print(args.method, r["seed"], {k: round(v, 3) for k, v in r["final"].items()})


if __name__ == "__main__":
    main()
