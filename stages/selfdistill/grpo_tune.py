"""Stage selfdistill_grpo_tune@<lr>: GRPO at one peak learning rate, on the full budget, with the
tuning seed (not a claim seed), judged on the validation probe only.

    python -m stages.selfdistill.grpo_tune --lr 0.0003
"""
from __future__ import annotations

import argparse

from paperworks.core.io import write_json
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.selfdistill.params import Params
from paperworks.selfdistill.pipeline import load_base, load_inputs, tune_file
from paperworks.selfdistill.runner import run_seed


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, required=True)
    args = ap.parse_args()
    p = load_section("selfdistill", Params)
    if args.lr not in p.grpo.lrs:
        raise ParamsError(f"  selfdistill.grpo.lrs: {args.lr:g} is not one of {p.grpo.lrs}")
    tasks, tok = load_inputs(p)
    base = load_base(p, tok)
    record, _ = run_seed(p, base, tok, tasks, "grpo", None, p.grpo.tune_seed, global_seed(read_params_file()),
                         grpo_lr=args.lr, final=False, label=f"grpo_tune_lr{args.lr:g}")
    write_json(tune_file(args.lr), record)
    first, last = record["history"][0], record["history"][-1]
    print(f"grpo lr={args.lr:g}: validation accuracy {first['acc']:.3f} → {last['acc']:.3f}")


if __name__ == "__main__":
    main()
