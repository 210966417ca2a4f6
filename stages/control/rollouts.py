"""control_rollouts@T-D — noisy oracle rollouts of teacher T, data draw D (Parquet)."""
from __future__ import annotations

import argparse

from paperworks.control.layout import rollouts_path, teacher_dir
from paperworks.control.params import Params
from paperworks.control.policies import Actor
from paperworks.control.rollouts import SCHEMA, collect
from paperworks.core.io import write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", type=int, required=True)
    ap.add_argument("--draw", type=int, required=True)
    args = ap.parse_args()
    p = load_section("control", Params)
    g = global_seed(read_params_file())
    actor = Actor.load(teacher_dir(args.teacher) / "actor.safetensors", p.teacher.net_arch)
    r = p.rollouts
    df = collect(actor, p.env.id, r.sigma_sweep, r.steps_per_sigma, p.env.max_steps, r.transient_steps,
                 r.transient_weight, derive_seed(g, "control", "rollouts", args.teacher, args.draw))
    write_parquet(rollouts_path(args.teacher, args.draw), df, SCHEMA)


if __name__ == "__main__":
    main()
