"""Refuse to build the report from outputs that DVC does not vouch for.

A run killed while an evaluate stage was writing leaves a mixed set in ``metrics/`` and
``plots/`` (an old metrics JSON beside missing or new pictures). The report reads exactly
those directories, so before ``make report`` this check compares every output there with what
``dvc.lock`` records and refuses when one differs ("modified", "deleted"). Stale *inputs* (a changed param or script) are not
refused: the outputs are then a consistent older result, which is what a report may show.
A stage whose input files are not in this work tree (a fresh clone that never ran it, with
nothing pulled) cannot have been interrupted here: its outputs are what git holds, and it
is not checked (the count is printed).

    python -m flows.report_guard            # exit 0: consistent; exit 1: names stages and files
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from dvc.exceptions import DvcException

import flows  # noqa: F401  (DVC_NO_ANALYTICS)

REPORT_INPUTS = ("metrics/", "plots/")


def changed_report_outputs(repo_root: Path, skipped: list[str] | None = None) -> dict[str, dict[str, str]]:
    """``{stage: {path: change}}`` for outputs under ``metrics/`` or ``plots/`` that differ
    from ``dvc.lock``.

    Only those outputs are hashed (``Output.status``), not the stages' dependencies: ``dvc
    status <stages>`` would hash every input dataset too (two minutes on this repository) and
    call a stage changed for an absent ``data/`` output that the report never reads.
    """
    from dvc.dependency import ParamsDependency
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    changed: dict[str, dict[str, str]] = {}
    with contextlib.chdir(repo_root), Repo(".") as repo:
        for stage in repo.index.stages:
            if not isinstance(stage, PipelineStage):
                continue
            if any(not Path(dep.def_path).exists() for dep in stage.deps if not isinstance(dep, ParamsDependency)):
                if skipped is not None:
                    skipped.append(stage.addressing)
                continue
            for out in stage.outs:
                if str(out.def_path).startswith(REPORT_INPUTS):
                    for path, change in out.status().items():
                        if change == "not in cache" and not Path(path).exists():
                            # a cached output never produced or pulled here (e.g. control's dvclive summaries
                            # once any run has written data/params_check.ok): nothing half-written to refuse
                            continue
                        changed.setdefault(stage.addressing, {})[path] = change
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    args = ap.parse_args(argv)
    root = Path(args.repo).resolve()
    skipped: list[str] = []
    try:
        changed = changed_report_outputs(root, skipped)
    except DvcException as e:
        print(f"error: cannot check the report's inputs: {e}", file=sys.stderr)
        return 1
    if skipped:
        print(f"report guard: {len(skipped)} stage(s) not checked: their inputs are not in this work tree, so their "
              "outputs are the committed ones (`make pull` or a run brings the inputs)")
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
