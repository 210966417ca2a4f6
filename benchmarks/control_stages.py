"""Wall time and peak RSS of every control stage, run in DAG order in a temporary copy of the repo.

    python benchmarks/control_stages.py [--profile default|smoke] [--reuse-teachers]

Each stage's command (read from dvc.yaml through DVC's own index) runs as a child process;
peak RSS comes from ``os.wait4``'s rusage of that child. ``--reuse-teachers`` copies the
trained teachers from this workspace instead of retraining them (their wall time is then
the one recorded in models/control/teacher_*/train.json, marked "(recorded)").
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import copy_repo, tool_env  # noqa: E402


def ordered_stages(repo: Path) -> list:
    import networkx as nx
    from dvc.repo import Repo

    graph = Repo(str(repo)).index.graph            # edges: stage -> what it depends on
    order = list(reversed(list(nx.topological_sort(graph))))
    return [s for s in order if getattr(s, "name", "").startswith("control_")]


def run_child(cmd: str, cwd: Path, env: dict) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(shlex.split(cmd), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{proc.stderr.read().decode()[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime   # what the stage costs on an idle core (the host may be shared)
    return wall, usage.ru_maxrss / 1024, cpu   # ru_maxrss is KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default", choices=["smoke", "default", "paper"])
    ap.add_argument("--reuse-teachers", action="store_true")
    args = ap.parse_args()
    env = tool_env()
    env.setdefault("PAPERWORKS_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="control_bench_") as tmp:
        repo = copy_repo(Path(tmp) / "repo", ROOT)
        subprocess.run([sys.executable, "-m", "paperworks.core.profile", args.profile], cwd=repo, env=env, check=True,
                       capture_output=True)
        if args.reuse_teachers:
            shutil.copytree(ROOT / "models/control", repo / "models/control", dirs_exist_ok=True)
        rows = []
        for stage in ordered_stages(repo):
            name = stage.name
            if args.reuse_teachers and name.startswith("control_teacher@"):
                t = name.split("@")[1]
                recorded = ROOT / f"logs/control/teacher_{t}.json"  # written by the stage, outside its outputs
                wall = (sum(a["wall_s"] for a in json.loads(recorded.read_text())["attempts"]) if recorded.exists()
                        else float("nan"))
                rows.append((name, wall, float("nan"), float("nan"), "(recorded)"))
                continue
            wall, rss, cpu = run_child(stage.cmd, repo, env)
            rows.append((name, wall, rss, cpu, ""))
            print(f"  {name}: {wall:.1f} s", file=sys.stderr)
    print(f"\ncontrol stages, profile '{args.profile}', PAPERWORKS_THREADS={env['PAPERWORKS_THREADS']}")
    print(f"{'stage':<28} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>13}")
    for name, wall, rss, cpu, note in rows:
        print(f"{name:<28} {wall:>8.1f} {cpu:>8.1f} {rss:>13.0f} {note}")
    print(f"{'total':<28} {sum(r[1] for r in rows):>8.1f} {sum(r[3] for r in rows if r[3] == r[3]):>8.1f} "
          f"{max((r[2] for r in rows if r[2] == r[2]), default=0):>13.0f}")


if __name__ == "__main__":
    main()
