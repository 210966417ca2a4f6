"""control_teacher@T — train teacher slot T: TD3 seeds (the slot's own, then its declared
reserves) until one passes its validation; write the kept checkpoint (actor + critic,
safetensors), the record of every attempt, and the curve (dvclive)."""
from __future__ import annotations

import argparse

from paperworks.control.layout import live_dir, teacher_dir, teacher_seed, teacher_validation_episodes
from paperworks.control.params import Params
from paperworks.control.policies import export_sb3
from paperworks.control.td3 import TD3Config, ValidationEpisode, train_td3
from paperworks.core.io import atomic_path, write_json, write_run_log
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import seed_everything
from paperworks.core.stage import stage_main


def config(p: Params) -> TD3Config:
    t = p.teacher
    return TD3Config(
        env_id=p.env.id, total_timesteps=t.total_timesteps, learning_starts=t.learning_starts,
        learning_rate=t.learning_rate, net_arch=tuple(t.net_arch), batch_size=t.batch_size,
        buffer_size=t.buffer_size, exploration_noise=t.exploration_noise, eval_every=t.eval_every,
        stop_after_passes=t.stop_after_passes, max_steps=p.env.max_steps,
    )


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", type=int, required=True)
    args = ap.parse_args()
    p = load_section("control", Params)
    g = global_seed(read_params_file())
    T, cfg = args.teacher, config(p)
    validation = [ValidationEpisode(s, noise) for s, noise in teacher_validation_episodes(g, p.teacher)]

    from dvclive import Live

    attempts, kept = [], None
    with atomic_path(live_dir(T)) as live_tmp, atomic_path(teacher_dir(T)) as model_tmp:
        live = Live(str(live_tmp), dvcyaml=False, save_dvc_exp=False, report=None)
        offset = 0   # the curve's x is env steps over all attempts of this slot
        for attempt in range(1 + p.teacher.reserve_attempts):
            seed = teacher_seed(g, T, attempt)
            seed_everything(seed)

            def log(point: dict, offset=offset, attempt=attempt) -> None:
                live.step = offset + point["step"]
                live.log_metric("eval/return", point["eval_return"])
                live.log_metric("eval/min_return", point["eval_min"])
                live.log_metric("eval/attempt", attempt)
                live.next_step()

            res = train_td3(cfg, seed, validation, log=log)
            offset += res.env_steps
            attempts.append({"attempt": attempt, "seed": seed, "solved": res.solved, "env_steps": res.env_steps,
                             "steps_to_first_pass": res.steps_to_first_pass, "kept_step": res.best_step,
                             "kept_min_return": res.best_min_return, "wall_s": res.wall_s, "curve": res.curve})
            if kept is None or res.best_min_return > kept[1].best_min_return:
                kept = (attempt, res)
            if res.solved:
                break
        attempt, res = kept
        live.summary["solved"] = res.solved
        live.summary["attempts"] = len(attempts)
        live.end()
        model_tmp.mkdir()
        meta = {"env": p.env.id, "net_arch": ",".join(map(str, cfg.net_arch)), "seed": str(attempts[attempt]["seed"]),
                "kept_step": str(res.best_step)}
        export_sb3(res.model, model_tmp / "actor.safetensors", model_tmp / "critic.safetensors", meta)
        # wall times differ per run: they go to the run log, not into this tracked record
        record = [{k: v for k, v in a.items() if k != "wall_s"} for a in attempts]
        write_json(model_tmp / "train.json", {
            "teacher": T, "solved": res.solved, "seed": attempts[attempt]["seed"], "attempt": attempt,
            "replaced_seeds": [a["seed"] for a in attempts[:attempt]] if res.solved else [],
            "failed_seeds": [a["seed"] for a in attempts if not a["solved"]],
            "kept_step": res.best_step, "kept_min_return": res.best_min_return,
            "steps_to_first_pass": attempts[attempt]["steps_to_first_pass"],
            "env_steps": sum(a["env_steps"] for a in attempts),
            "validation": [{"seed": v.seed, "reset_noise_scale": v.reset_noise_scale} for v in validation],
            "attempts": record,
        })
    write_run_log(f"control/teacher_{T}", {"attempts": [{k: a[k] for k in ("seed", "env_steps", "wall_s", "solved")}
                                                        for a in attempts]})


if __name__ == "__main__":
    main()
