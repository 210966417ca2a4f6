"""Serial `dvc repro` vs the Prefect flow in two one-thread lanes, on the same DAG from nothing.

Each mode runs in a fresh copy of the work tree (tracked files and untracked ones git does not
ignore: no outputs, an empty DVC cache of its own), switched to ``--profile``, so every stage the
targets need runs:

- ``serial``: ``dvc repro --glob <targets>``, one stage at a time, torch with as many threads as
  cores (what ``dvc repro`` does by default);
- ``parallel``: ``python -m flows.pipeline --targets <targets> --max-parallel 2`` with
  ``PAPERWORKS_THREADS=1``: two independent stages at a time, one thread each.

- ``in-place``: the ``parallel`` command in this work tree itself (no copy: what ``make run`` does
  for one track), so the outputs and ``dvc.lock`` stay here to be committed; from nothing only
  where this work tree has none of the targets' outputs (a fresh clone).

DVC decides what runs and writes ``dvc.lock`` in all three. The table gives wall time, the stages'
summed CPU time (``logs/stage_costs.jsonl`` of the copy), the load average before and after, and
whether the track's metrics file came out byte-identical to the one committed here.
Rows are appended to ``benchmarks/results/run_modes.txt``. Run it on a quiet machine, one at a time::

    python benchmarks/run_modes.py --targets 'person_search_*' --profile default --modes serial parallel

Several globs make one DAG (their stages and everything upstream, scheduled together), e.g. four tracks in one
run: ``--targets 'control_*' 'insurance_*' 'person_search_*' 'selfdistill_*'``; the last column then says, per
track, whether its metrics file came out byte-identical to the committed one.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.conftest import copy_repo, tool_env  # noqa: E402

RESULTS = ROOT / "benchmarks/results/run_modes.txt"
HEADER = (f"{'date (UTC)':<17} {'targets':<18} {'profile':<8} {'mode':<9} {'stages':>6} {'wall s':>7} "
          f"{'stage cpu s':>11} {'load before':>11} {'load after':>10}  metrics = committed")


def mode_command(mode: str, targets: list[str]) -> tuple[list[str], dict[str, str]]:
    env = tool_env()
    if mode == "serial":
        env.pop("PAPERWORKS_THREADS", None)
        env.pop("OMP_NUM_THREADS", None)
        return [str(Path(sys.executable).parent / "dvc"), "repro", "--glob", *targets], env
    if mode in ("parallel", "in-place"):
        env.update(PAPERWORKS_THREADS="1", OMP_NUM_THREADS="1")
        return [sys.executable, "-m", "flows.pipeline", "--targets", *targets, "--max-parallel", "2"], env
    raise SystemExit(f"--modes: unknown mode {mode!r}; allowed: serial, parallel, in-place")


def sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def run_in_place(targets: list[str], profile: str, metrics_files: list[str]) -> str:
    cmd, env = mode_command("in-place", targets)
    committed = {f: subprocess.run(["git", "show", f"HEAD:{f}"], cwd=ROOT, capture_output=True).stdout for f in metrics_files}
    subprocess.run([sys.executable, "-m", "paperworks.core.profile", profile], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    log = ROOT / "logs/stage_costs.jsonl"
    seen = len(log.read_text().splitlines()) if log.exists() else 0
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, text=True)
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()[0]
    if proc.returncode != 0:
        raise SystemExit(f"in-place: {' '.join(cmd)} failed (exit {proc.returncode})")
    costs = [json.loads(line) for line in log.read_text().splitlines()[seen:] if line]
    same = {f: (ROOT / f).is_file() and (ROOT / f).read_bytes() == committed[f] for f in metrics_files}
    return _row("in-place", targets, profile, len(costs), wall, sum(c["cpu_s"] for c in costs), load_before,
                load_after, same)


def _row(mode: str, targets: list[str], profile: str, stages: int, wall: float, cpu: float, load_before: float,
         load_after: float, same: dict[str, bool]) -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    same_text = "; ".join(f"{'yes' if ok else 'no'} ({f})" for f, ok in same.items())
    return (f"{stamp:<17} {' '.join(targets):<18} {profile:<8} {mode:<9} {stages:>6} {wall:>7.0f} "
            f"{cpu:>11.0f} {load_before:>11.2f} {load_after:>10.2f}  {same_text}")


def run_mode(mode: str, targets: list[str], profile: str, metrics_files: list[str]) -> str:
    if mode == "in-place":
        return run_in_place(targets, profile, metrics_files)
    cmd, env = mode_command(mode, targets)
    with tempfile.TemporaryDirectory(prefix=f"run-modes-{mode}-") as tmp:
        repo = copy_repo(Path(tmp) / "repo", ROOT)
        subprocess.run([sys.executable, "-m", "paperworks.core.profile", profile], cwd=repo, env=env, check=True,
                       capture_output=True)
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        load_after = os.getloadavg()[0]
        if proc.returncode != 0:
            raise SystemExit(f"{mode}: {' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        costs = [json.loads(line) for line in (repo / "logs/stage_costs.jsonl").read_text().splitlines() if line]
        same = {f: sha256(repo / f) == sha256(ROOT / f) for f in metrics_files}
    return _row(mode, targets, profile, len(costs), wall, sum(c["cpu_s"] for c in costs), load_before, load_after, same)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", nargs="+", required=True, help="stage globs, e.g. 'person_search_*' (several: one DAG)")
    ap.add_argument("--profile", default="default", choices=["smoke", "default", "paper"])
    ap.add_argument("--modes", nargs="+", default=["serial", "parallel"], choices=["serial", "parallel", "in-place"])
    ap.add_argument("--metrics", nargs="+", help="metrics files to compare with the committed ones "
                    "(default: metrics/<track>.json of each target)")
    args = ap.parse_args()
    metrics_files = args.metrics or [f"metrics/{t.rstrip('*').rstrip('_')}.json" for t in args.targets]
    print(f"# {os.cpu_count()} cores; serial and parallel each in a fresh copy with an empty DVC cache, in-place in this work tree")
    print(HEADER, flush=True)
    for mode in args.modes:
        row = run_mode(mode, args.targets, args.profile, metrics_files)
        print(row, flush=True)
        new = not RESULTS.exists()
        with RESULTS.open("a") as fh:
            if new:
                fh.write(HEADER + "\n")
            fh.write(row + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
