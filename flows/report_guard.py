"""Refuse to build the report from outputs that DVC does not vouch for.

A run killed while an evaluate stage was writing leaves a mixed set in ``metrics/`` and
``plots/`` (an old metrics JSON beside missing or new pictures). The report reads exactly
those directories, so before ``make report`` this check asks ``dvc status`` about every stage
with an output there and refuses when any such output differs from what ``dvc.lock`` records
("modified", "deleted", "not in cache"). Stale *inputs* (a changed param or script) are not
refused: the outputs are then a consistent older result, which is what a report may show.

    python -m flows.report_guard            # exit 0: consistent; exit 1: names stages and files
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from flows.dvc_cli import DvcError, run_dvc

REPORT_INPUTS = ("metrics/", "plots/")


def report_stages(repo_root: Path) -> list[str]:
    """Stages (``name`` or ``name@item``) with an output the report reads."""
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    with contextlib.chdir(repo_root), Repo(".") as repo:
        return sorted(
            stage.addressing
            for stage in repo.index.stages
            if isinstance(stage, PipelineStage)
            and any(str(out.def_path).startswith(REPORT_INPUTS) for out in stage.outs)
        )


def changed_report_outputs(repo_root: Path) -> dict[str, dict[str, str]]:
    """``{stage: {path: change}}`` for report outputs that differ from ``dvc.lock``."""
    stages = report_stages(repo_root)
    if not stages:
        return {}
    status = json.loads(run_dvc(["status", "--json", *stages], repo_root).stdout or "{}")
    changed: dict[str, dict[str, str]] = {}
    for stage, entries in status.items():
        for entry in entries:
            if isinstance(entry, dict) and "changed outs" in entry:
                changed.setdefault(stage, {}).update(entry["changed outs"])
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    args = ap.parse_args(argv)
    root = Path(args.repo).resolve()
    try:
        changed = changed_report_outputs(root)
    except DvcError as e:
        print(f"error: cannot check the report's inputs: {e}", file=sys.stderr)
        return 1
    if not changed:
        return 0
    lines = [f"  {stage}: " + ", ".join(f"{path} {change}" for path, change in sorted(files.items()))
             for stage, files in sorted(changed.items())]
    names = " ".join(sorted(changed))
    print("error: refusing to build the report: these outputs differ from dvc.lock (an interrupted run?)\n"
          + "\n".join(lines)
          + f"\nRerun them (`dvc repro {names}`) or restore the recorded outputs (`git checkout -- metrics plots` for the"
          + f" git-tracked files, `dvc checkout {names}` for cached ones), then `make report`.",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
