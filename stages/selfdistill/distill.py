"""Stage selfdistill_distill@<method>-<seed>: one OPSD variant (reverse/forward KL, SR-OPSD or the
frozen-teacher control) for one seed, from the base model, on the shared long budget.

    python -m stages.selfdistill.distill --method sr_opsd --seed 0
"""
from __future__ import annotations

import argparse

from paperworks.core.io import write_json
from paperworks.core.lm import save_checkpoint
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.selfdistill.params import Params
from paperworks.selfdistill.pipeline import MODELS, PLOTS, load_base, load_inputs, run_file
from paperworks.selfdistill.runner import run_seed


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", required=True)
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    p = load_section("selfdistill", Params)
    if args.method not in p.opsd.run:
        raise ParamsError(f"  selfdistill.opsd.run: '{args.method}' is not run (configured: {', '.join(p.opsd.run)})")
    if args.seed not in p.opsd.seeds:
        raise ParamsError(f"  selfdistill.opsd.seeds: {args.seed} is not one of {p.opsd.seeds}")
    tasks, tok = load_inputs(p)
    base = load_base(p, tok)
    from dvclive import Live

    live = Live(str(PLOTS / f"live_{args.method}_s{args.seed}"), dvcyaml=False, save_dvc_exp=False, report=None)
    record, student = run_seed(p, base, tok, tasks, args.method, p.methods[args.method], args.seed,
                               global_seed(read_params_file()), live=live)
    live.end()
    save_checkpoint(student, MODELS / "runs" / args.method / f"seed{args.seed}.safetensors", p.model, len(tok))
    write_json(run_file(args.method, args.seed), record)
    print(args.method, args.seed, {k: round(v, 3) for k, v in record["final"].items()})


if __name__ == "__main__":
    main()
