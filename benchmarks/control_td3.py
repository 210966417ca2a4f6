"""TD3 on InvertedPendulum-v5: wall time and env steps to the first deterministic evaluation
return of 1000 — our configuration (paper / TD3-paper values) vs Stable-Baselines3's defaults.

    python benchmarks/control_td3.py [--configs ours sb3] [--seeds 0 1] [--max-steps 40000] [--threads 1]

Each run stops at its first solved evaluation (deterministic policy, 3 fixed episodes, every
1000 steps) or at --max-steps. Prints a table; numbers depend on how loaded the machine is.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paperworks.control.td3 import TD3Config, train_td3  # noqa: E402
from paperworks.core.seeding import derive_seed, seed_everything  # noqa: E402

CONFIGS = {
    "ours": ("ours (lr 3e-4, [256,256], starts 1000)", dict()),
    "sb3": ("SB3 defaults (lr 1e-3, [400,300], starts 100)", dict(sb3_defaults=True)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--max-steps", type=int, default=40_000)
    ap.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    ap.add_argument("--threads", type=int, default=int(os.environ.get("PAPERWORKS_THREADS", "1")))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    eval_seeds = [derive_seed(0, "control", "bench_td3_eval", i) for i in range(3)]
    rows = []
    for key in args.configs:
        name, over = CONFIGS[key]
        for s in args.seeds:
            cfg = TD3Config(total_timesteps=args.max_steps, stop_after_solved_evals=1, **over)
            seed = derive_seed(0, "control", "bench_td3", s)
            seed_everything(seed)
            t0 = time.perf_counter()
            res = train_td3(cfg, seed, eval_seeds, progress=False, log=lambda pt, t0=t0: print(
                f"    {key} seed {s}: step {pt['step']} eval {pt['eval_return']:.0f} ({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr, flush=True))
            rows.append((name, s, res.steps_to_solved, res.env_steps, time.perf_counter() - t0,
                         res.curve[-1]["eval_return"] if res.curve else float("nan")))
            print(f"  done: {name} seed {s}: solved at {res.steps_to_solved}", file=sys.stderr)
    print(f"\nTD3 on InvertedPendulum-v5, {args.threads} torch thread(s), cap {args.max_steps} steps")
    print(f"{'config':<48} {'seed':>4} {'steps to 1000':>14} {'env steps':>10} {'wall s':>8} {'last eval':>9}")
    for name, s, solved, steps, wall, last in rows:
        shown = str(solved) if solved is not None else f">{steps}"
        print(f"{name:<48} {s:>4} {shown:>14} {steps:>10} {wall:>8.1f} {last:>9.0f}")


if __name__ == "__main__":
    main()
