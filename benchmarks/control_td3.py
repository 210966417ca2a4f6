"""TD3 on InvertedPendulum-v5: env steps, wall and CPU time to a solved teacher — our configuration
(the default profile's control.teacher) vs Stable-Baselines3's TD3 defaults, on the same seeds,
side by side in one run.

    python benchmarks/control_td3.py [--configs ours sb3] [--seeds 0 1] [--cap 100000] [--threads 1] [--jobs 2]

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


def run_one(key: str, s: int, cap: int, threads: int) -> tuple:
    """One (configuration, seed) run to its first solved evaluation or the cap; a table row."""
    import torch

    torch.set_num_threads(threads)
    raw = compose("default", ROOT / "conf")
    p = validate_section("control", Params, raw["control"])
    t = p.teacher
    validation = [ValidationEpisode(vs, n) for vs, n in teacher_validation_episodes(raw["seed"], t)]
    ours = dict(total_timesteps=cap, learning_starts=t.learning_starts, learning_rate=t.learning_rate,
                net_arch=tuple(t.net_arch), batch_size=t.batch_size, buffer_size=t.buffer_size,
                exploration_noise=t.exploration_noise, eval_every=t.eval_every, stop_after_passes=1)
    names = {"ours": f"ours (lr {t.learning_rate:g}, {t.net_arch}, batch {t.batch_size}, starts {t.learning_starts})",
             "sb3": "SB3 defaults (lr 1e-3, [400,300], batch 256, starts 100)"}
    cfg = TD3Config(**ours, sb3_defaults=key == "sb3")
    seed = derive_seed(0, "control", "bench_td3", s)
    seed_everything(seed)
    load0, t0, c0 = os.getloadavg()[0], time.perf_counter(), _cpu_s()
    res = train_td3(cfg, seed, validation, progress=False, log=lambda pt: print(
        f"    {key} seed {s}: step {pt['step']} min {pt['eval_min']:.0f} ({time.perf_counter() - t0:.0f} s)",
        file=sys.stderr, flush=True))
    return (names[key], s, res.steps_to_first_pass, res.env_steps, time.perf_counter() - t0,
            _cpu_s() - c0, load0, os.getloadavg()[0], len(validation))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--cap", type=int, default=100_000)
    ap.add_argument("--configs", nargs="+", choices=["ours", "sb3"], default=["ours", "sb3"])
    ap.add_argument("--threads", type=int, default=int(os.environ.get("PAPERWORKS_THREADS", "1")))
    ap.add_argument("--jobs", type=int, default=1,
                    help="(config, seed) runs at once, one process each (2 on a 2-core machine: both configs share the load)")
    args = ap.parse_args()
    jobs = [(key, s) for s in args.seeds for key in args.configs]  # interleaved: both configs run under the same load
    if args.jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # spawn, not fork: a forked child of a process with torch's thread pools can deadlock
        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=mp.get_context("spawn")) as pool:
            rows = list(pool.map(run_one, *zip(*[(k, s, args.cap, args.threads) for k, s in jobs])))
    else:
        rows = [run_one(k, s, args.cap, args.threads) for k, s in jobs]
    rows.sort(key=lambda r: (r[0], r[1]))
    n_val = rows[0][-1] if rows else 0
    print(f"\nTD3 on InvertedPendulum-v5, {args.threads} torch thread(s) per run, {args.jobs} run(s) at once, cap {args.cap} "
          f"steps, solved = {n_val}/{n_val} validation episodes balanced")
    print(f"{'config':<58} {'seed':>4} {'steps to solved':>15} {'env steps':>9} {'wall s':>7} {'CPU s':>7} {'ms/step':>7} {'load':>11}")
    for name, s, solved, steps, wall, cpu, l0, l1, _n in rows:
        shown = str(solved) if solved is not None else f">{steps}"
        print(f"{name:<58} {s:>4} {shown:>15} {steps:>9} {wall:>7.1f} {cpu:>7.1f} {1000 * cpu / steps:>7.2f} {l0:>5.1f}→{l1:<5.1f}")


if __name__ == "__main__":
    main()
