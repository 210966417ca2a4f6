"""control_teacher@T — train one TD3 teacher; write actor + critic (safetensors) and its curve (dvclive)."""
from __future__ import annotations

import argparse

from paperworks.control.layout import live_dir, teacher_dir
from paperworks.control.params import Params
from paperworks.control.policies import export_sb3
from paperworks.control.td3 import TD3Config, train_td3
from paperworks.core.io import atomic_path, write_json, write_run_log
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main


def config(p: Params) -> TD3Config:
    t = p.teacher
    return TD3Config(
        env_id=p.env.id, total_timesteps=t.total_timesteps, learning_starts=t.learning_starts,
        learning_rate=t.learning_rate, net_arch=tuple(t.net_arch), batch_size=t.batch_size,
        buffer_size=t.buffer_size, exploration_noise=t.exploration_noise, eval_every=t.eval_every,
        eval_episodes=t.eval_episodes, stop_after_solved_evals=t.stop_after_solved_evals, max_steps=p.env.max_steps,
    )


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", type=int, required=True)
    args = ap.parse_args()
    p = load_section("control", Params)
    g = global_seed(read_params_file())
    cfg = config(p)
    seed = derive_seed(g, "control", "teacher", args.teacher)
    seed_everything(seed)
    eval_seeds = [derive_seed(g, "control", "teacher_eval", i) for i in range(cfg.eval_episodes)]

    from dvclive import Live

    with atomic_path(live_dir(args.teacher)) as live_tmp, atomic_path(teacher_dir(args.teacher)) as model_tmp:
        live = Live(str(live_tmp), dvcyaml=False, save_dvc_exp=False, report=None)

        def log(point: dict) -> None:
            live.step = point["step"]
            live.log_metric("eval/return", point["eval_return"])
            live.log_metric("eval/min_return", point["eval_min"])
            live.next_step()

        res = train_td3(cfg, seed, eval_seeds, log=log)
        live.summary["steps_to_solved"] = res.steps_to_solved
        live.end()
        model_tmp.mkdir()
        meta = {"env": p.env.id, "net_arch": ",".join(map(str, cfg.net_arch)), "seed": str(seed)}
        export_sb3(res.model, model_tmp / "actor.safetensors", model_tmp / "critic.safetensors", meta)
        write_json(model_tmp / "train.json", {
            "teacher": args.teacher, "seed": seed, "env_steps": res.env_steps,
            "steps_to_solved": res.steps_to_solved, "curve": res.curve,
            "final_eval_return": res.curve[-1]["eval_return"] if res.curve else None,
        })
    # the wall time differs per run: outside the tracked output, so reruns keep its hash
    write_run_log(f"control/teacher_{args.teacher}", {"wall_s": res.wall_s, "env_steps": res.env_steps})


if __name__ == "__main__":
    main()
