"""Stage selfdistill_sweep@<alpha>-<rho>: one short SR-OPSD run of the α × ρ grid (validation probe).

    python -m stages.selfdistill.sweep --alpha 0.5 --rho 0.75
"""
from __future__ import annotations

import argparse

from pydantic import ValidationError

from paperworks.core.io import write_json
from paperworks.core.params import format_validation_error, global_seed, load_section, read_params_file, ParamsError
from paperworks.core.stage import stage_main
from paperworks.selfdistill.params import MethodSpec, Params
from paperworks.selfdistill.pipeline import DATA, load_base, load_inputs
from paperworks.selfdistill.runner import run_seed


def sweep_name(alpha: float, rho: float) -> str:
    return f"a{alpha}_r{rho}"


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha", type=float, required=True)
    ap.add_argument("--rho", type=float, required=True)
    args = ap.parse_args()
    p = load_section("selfdistill", Params)
    try:
        spec = MethodSpec(alpha=args.alpha, rho=args.rho, direction="reverse", teacher="ema")
    except ValidationError as e:
        raise ParamsError(format_validation_error("selfdistill.sweep", e)) from None
    tasks, tok = load_inputs(p)
    base = load_base(p, tok)
    name = sweep_name(args.alpha, args.rho)
    runs = [run_seed(p, base, tok, tasks, "sweep", spec, s, global_seed(read_params_file()), steps=p.sweep.steps, final=False,
                     label=f"sweep_{name}")[0]  # short runs: the last validation probe is the result
            for s in p.sweep.seeds]
    result = {"method": "sweep", "spec": spec.model_dump(), "runs": runs}
    write_json(DATA / "sweep" / f"{sweep_name(args.alpha, args.rho)}.json", result)
    for r in result["runs"]:
        print(sweep_name(args.alpha, args.rho), r["seed"], {k: round(v, 3) for k, v in r["history"][-1].items()})


if __name__ == "__main__":
    main()
