"""TD3 on InvertedPendulum-v5: env steps, wall and CPU time to a solved teacher — our configuration
(the default profile's control.teacher) vs Stable-Baselines3's TD3 defaults, on the same seeds,
side by side in one run.

    python benchmarks/control_td3.py [--configs ours sb3] [--seeds 0 1] [--cap 100000] [--threads 1]

"Solved" is what the teacher stage asks for: an evaluation every ``eval_every`` steps that balances
every teacher-validation episode of the default profile (10, some at a wider start noise). Each run
stops at its first solved evaluation or at the cap. Prints a table with the load average at the start
and end of each run (numbers depend on how loaded the machine is).
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paperworks.control.layout import teacher_validation_episodes  # noqa: E402
from paperworks.control.params import Params  # noqa: E402
from paperworks.control.td3 import TD3Config, ValidationEpisode, train_td3  # noqa: E402
from paperworks.core.params import validate_section  # noqa: E402
from paperworks.core.profile import compose  # noqa: E402
from paperworks.core.seeding import derive_seed, seed_everything  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--cap", type=int, default=100_000)
    ap.add_argument("--configs", nargs="+", choices=["ours", "sb3"], default=["ours", "sb3"])
    ap.add_argument("--threads", type=int, default=int(os.environ.get("PAPERWORKS_THREADS", "1")))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    raw = compose("default", ROOT / "conf")
    p = validate_section("control", Params, raw["control"])
    t = p.teacher
    validation = [ValidationEpisode(s, n) for s, n in teacher_validation_episodes(raw["seed"], t)]
    ours = dict(total_timesteps=args.cap, learning_starts=t.learning_starts, learning_rate=t.learning_rate,
                net_arch=tuple(t.net_arch), batch_size=t.batch_size, buffer_size=t.buffer_size,
                exploration_noise=t.exploration_noise, eval_every=t.eval_every, stop_after_passes=1)
    names = {"ours": f"ours (lr {t.learning_rate:g}, {t.net_arch}, batch {t.batch_size}, starts {t.learning_starts})",
             "sb3": "SB3 defaults (lr 1e-3, [400,300], batch 256, starts 100)"}
    rows = []
    for key in args.configs:
        cfg = TD3Config(**ours, sb3_defaults=key == "sb3")
        for s in args.seeds:
            seed = derive_seed(0, "control", "bench_td3", s)
            seed_everything(seed)
            load0, t0, c0 = os.getloadavg()[0], time.perf_counter(), _cpu_s()
            res = train_td3(cfg, seed, validation, progress=False, log=lambda pt, t0=t0, key=key, s=s: print(
                f"    {key} seed {s}: step {pt['step']} min {pt['eval_min']:.0f} ({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr, flush=True))
            rows.append((names[key], s, res.steps_to_first_pass, res.env_steps, time.perf_counter() - t0,
                         _cpu_s() - c0, load0, os.getloadavg()[0]))
    print(f"\nTD3 on InvertedPendulum-v5, {args.threads} torch thread(s), cap {args.cap} steps, "
          f"solved = {len(validation)}/{len(validation)} validation episodes balanced")
    print(f"{'config':<58} {'seed':>4} {'steps to solved':>15} {'env steps':>9} {'wall s':>7} {'CPU s':>7} {'ms/step':>7} {'load':>11}")
    for name, s, solved, steps, wall, cpu, l0, l1 in rows:
        shown = str(solved) if solved is not None else f">{steps}"
        print(f"{name:<58} {s:>4} {shown:>15} {steps:>9} {wall:>7.1f} {cpu:>7.1f} {1000 * cpu / steps:>7.2f} {l0:>5.1f}→{l1:<5.1f}")


if __name__ == "__main__":
    main()
