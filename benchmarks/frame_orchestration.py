"""Orchestration overhead on an up-to-date pipeline: no-op `dvc repro` vs the Prefect flow.

Run after `make run` (or on whatever state the workspace is in; stages that are not up
to date would run, so the script refuses unless `dvc status` is clean). Prints a table.

    python benchmarks/frame_orchestration.py [--repeats 3] [--targets 'control_*']
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return dt, proc.stdout + proc.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--targets", nargs="*", default=None)
    args = ap.parse_args()
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    _, status = timed([str(BIN / "dvc"), "status", *(args.targets or [])], env)
    if "up to date" not in status:
        print("pipeline is not up to date (run `make run` first); `dvc status` says:\n" + status)
        return 1
    repro_cmd = [str(BIN / "dvc"), "repro", *(["--glob", *args.targets] if args.targets else [])]
    flow_cmd = [sys.executable, "-m", "flows.pipeline", *(["--targets", *args.targets] if args.targets else [])]
    rows = []
    for name, cmd, target in (("no-op `dvc repro`", repro_cmd, 5.0), ("Prefect flow (ephemeral API)", flow_cmd, 20.0)):
        times = [timed(cmd, env)[0] for _ in range(args.repeats)]
        rows.append((name, statistics.median(times), min(times), max(times), target))
    print(f"\n{'command':32} {'median s':>9} {'min s':>7} {'max s':>7} {'target s':>9}  met")
    for name, med, lo, hi, target in rows:
        print(f"{name:32} {med:9.2f} {lo:7.2f} {hi:7.2f} {target:9.1f}  {'yes' if med <= target else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
