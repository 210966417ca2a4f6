"""control_teacher_eval@T — score teacher T on the fixed held-out episodes: nominal starts, the hard
set (10× start noise + observation noise) and under bounded torque pulses; carry its training record."""
from __future__ import annotations

import argparse

from paperworks.control.distill import behaviour, disturbed_response, run_episodes, short_behaviour, trace
from paperworks.control.env import control_dt
from paperworks.control.layout import disturbance_seeds, heldout_seeds, robust_seeds, teacher_dir, teacher_eval_path
from paperworks.control.params import Params
from paperworks.control.policies import Actor
from paperworks.core.io import ArtifactError, read_json, write_json
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main

TRAIN_KEYS = ("solved", "seed", "attempt", "replaced_seeds", "failed_seeds", "kept_step", "kept_min_return",
              "steps_to_first_pass", "env_steps", "validation")


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", type=int, required=True)
    args = ap.parse_args()
    p = load_section("control", Params)
    g = global_seed(read_params_file())
    actor = Actor.load(teacher_dir(args.teacher) / "actor.safetensors", p.teacher.net_arch)
    train_path = teacher_dir(args.teacher) / "train.json"
    train = read_json(train_path)
    missing = [k for k in TRAIN_KEYS if k not in train]
    if missing:
        raise ArtifactError(f"{train_path}: missing {missing} (trained by an older teacher stage?)")
    e, env_id, T = p.eval, p.env.id, p.env.max_steps
    dt = control_dt(env_id)
    held = heldout_seeds(g, e.episodes)
    nominal = run_episodes(actor, env_id, held, T)
    write_json(teacher_eval_path(args.teacher), {
        "teacher": args.teacher, "training": {k: train[k] for k in TRAIN_KEYS},
        "validation_curve": [{"attempt": a["attempt"], **pt} for a in train["attempts"] for pt in a["curve"]],
        "nominal": behaviour(nominal, None, dt, e.deadband, e.steady_from, T),
        "hard": short_behaviour(run_episodes(actor, env_id, robust_seeds(g, e.episodes), T,
                                             reset_noise_scale=e.reset_noise_scale, obs_noise=e.obs_noise)),
        "disturbed": disturbed_response(actor, env_id, held, disturbance_seeds(g, e.episodes), T, e.disturbance),
        "trace": trace(nominal[0]),
    })


if __name__ == "__main__":
    main()
