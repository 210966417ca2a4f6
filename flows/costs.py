"""Stage costs from the runs this work tree has seen: ``python -m flows.costs`` (``make costs``).

Every stage script appends one line per run to ``logs/stage_costs.jsonl`` (see
:mod:`paperworks.core.stage`): its command, wall and CPU seconds, peak memory, threads and the
load average when it started. This matches each line to its DVC stage by the stage's resolved
command, keeps the latest successful run of each stage, and prints per track: the stages, the
track's total stage time, and the DAG's critical path (the longest chain of wall time through
the dependencies), which bounds any parallel schedule from below. Wall times measured under a
load above the number of cores are flagged: they say little about an idle machine.
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path

from paperworks.core.stage import COST_LOG


@dataclass(frozen=True)
class Cost:
    stage: str
    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    threads: int
    load_at_start: float
    started: str


def normalise(cmd: str) -> str:
    return " ".join(cmd.split())


def stage_commands(repo_root: str | Path = ".") -> dict[str, str]:
    """DVC stage name → its resolved command (whitespace normalised)."""
    import contextlib

    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    with contextlib.chdir(repo_root), Repo(".") as repo:
        return {s.addressing: normalise(s.cmd if isinstance(s.cmd, str) else " && ".join(s.cmd))
                for s in repo.index.stages if isinstance(s, PipelineStage)}


def latest_costs(lines: list[str], commands: dict[str, str]) -> dict[str, Cost]:
    """The latest successful run of each stage (lines in file order; unknown commands skipped)."""
    by_cmd = {cmd: stage for stage, cmd in commands.items()}
    out: dict[str, Cost] = {}
    for line in lines:
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a killed writer
        stage = by_cmd.get(normalise(r.get("cmd", "")))
        if stage is None or r.get("status") != "ok":
            continue
        out[stage] = Cost(stage, r["wall_s"], r["cpu_s"], r["peak_rss_mib"], r["threads"], r["load_at_start"], r["started"])
    return out


def critical_path(dag: dict[str, list[str]], wall: dict[str, float]) -> tuple[float, list[str]]:
    """Longest chain of wall time through the DAG (stages without a recorded cost count 0)."""
    memo: dict[str, tuple[float, list[str]]] = {}

    def longest(stage: str) -> tuple[float, list[str]]:
        if stage not in memo:
            best = max((longest(up) for up in dag.get(stage, [])), key=lambda t: t[0], default=(0.0, []))
            memo[stage] = (best[0] + wall.get(stage, 0.0), [*best[1], stage])
        return memo[stage]

    return max((longest(s) for s in dag), key=lambda t: t[0], default=(0.0, []))


def track_of(stage: str, tracks: list[str]) -> str:
    """The track a stage belongs to (stages are named ``<track>_<verb>``); frame stages otherwise."""
    name = stage.split("@")[0]
    return next((t for t in sorted(tracks, key=len, reverse=True) if name.startswith(t + "_")), "frame")


def render(costs: dict[str, Cost], dag: dict[str, list[str]], cores: int, tracks: list[str]) -> str:
    lines = []
    for track in sorted({track_of(s, tracks) for s in dag}):
        stages = [s for s in dag if track_of(s, tracks) == track]
        have = [costs[s] for s in stages if s in costs]
        lines += [f"## {track}: {len(have)}/{len(stages)} stages with a recorded run", "",
                  "| stage | wall s | CPU s | peak RSS MiB | threads | load at start | started (UTC) |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for c in sorted(have, key=lambda c: c.started):
            flag = " ⚠" if c.load_at_start > cores else ""
            lines.append(f"| {c.stage} | {c.wall_s:.1f} | {c.cpu_s:.1f} | {c.peak_rss_mib:.0f} | {c.threads} | "
                         f"{c.load_at_start:.2f}{flag} | {c.started} |")
        sub = {s: [u for u in dag[s] if u in stages] for s in stages}
        total, path = critical_path(sub, {c.stage: c.wall_s for c in have})
        lines += ["", f"Stage time {sum(c.wall_s for c in have) / 60:.1f} min; critical path {total / 60:.1f} min: "
                      f"{' → '.join(path) if path else '–'}", ""]
    total, path = critical_path(dag, {s: c.wall_s for s, c in costs.items()})
    lines.append(f"Whole DAG: stage time {sum(c.wall_s for c in costs.values()) / 60:.1f} min over {len(costs)} "
                 f"recorded stages; critical path {total / 60:.1f} min. ⚠ = started at a load above {cores} cores.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from flows.pipeline import read_dag
    from paperworks.core.params import track_models

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", default=str(COST_LOG))
    args = ap.parse_args(argv)
    log = Path(args.log)
    if not log.exists():
        print(f"{log}: no stage has run in this work tree yet (run `make run` or `dvc repro`)")
        return 0
    costs = latest_costs(log.read_text().splitlines(), stage_commands())
    print(render(costs, read_dag("."), os.cpu_count() or 1, list(track_models())), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
