"""control_teacher_eval@T — score a teacher on the fixed held-out episodes (nominal + robustness)."""
from __future__ import annotations

import argparse

from paperworks.control.distill import behaviour, run_episodes, trace
from paperworks.control.env import control_dt
from paperworks.control.layout import heldout_seeds, robust_seeds, teacher_dir, teacher_eval_path
from paperworks.control.params import Params
from paperworks.control.policies import Actor
from paperworks.core.io import read_json, write_json
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", type=int, required=True)
    args = ap.parse_args()
    p = load_section("control", Params)
    g = global_seed(read_params_file())
    actor = Actor.load(teacher_dir(args.teacher) / "actor.safetensors", p.teacher.net_arch)
    train = read_json(teacher_dir(args.teacher) / "train.json")
    e, env_id, T = p.eval, p.env.id, p.env.max_steps
    dt = control_dt(env_id)
    nominal = run_episodes(actor, env_id, heldout_seeds(g, e.episodes), T)
    rseeds = robust_seeds(g, e.episodes)
    write_json(teacher_eval_path(args.teacher), {
        "teacher": args.teacher, "steps_to_solved": train.get("steps_to_solved"), "train_env_steps": train.get("env_steps"),
        "nominal": behaviour(nominal, None, dt, e.deadband, e.steady_from, T),
        "reset_noise": behaviour(run_episodes(actor, env_id, rseeds, T, reset_noise_scale=e.reset_noise_scale),
                                 None, dt, e.deadband, e.steady_from, T),
        "obs_noise": behaviour(run_episodes(actor, env_id, rseeds, T, obs_noise=e.obs_noise),
                               None, dt, e.deadband, e.steady_from, T),
        "trace": trace(nominal[0]),
    })


if __name__ == "__main__":
    main()
