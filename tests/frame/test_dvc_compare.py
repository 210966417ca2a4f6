"""DVC can compare what the project claims (issue 22: items 2 and 7, and the "done when").

- An experiment (`dvc exp run -S control.tree.max_depth=5`) is compared with `dvc exp show
  --only-changed`: the changed param and the changed control metrics are columns, and the claims
  are columns keyed by claim id (scalars, not a list DVC drops).
- `dvc metrics diff` reports a claim's difference and interval moving between two commits.
- A param no stage but the report reads (`control.eval.success_pairs`) leaves the training stages
  up to date (`dvc status`): param deps are narrowed to the keys a stage reads.

On the smoke profile no TD3 teacher learns to balance, so every control claim is 0 vs 0 there
and an experiment cannot move it; the metrics-diff test moves claims with two commits of a
metrics file instead (cheap, no training).
"""
from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import VENV_BIN, dvc, tool_env


def git(repo: Path, *args: str) -> None:
    env = dict(tool_env(), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def set_param(repo: Path, dotted: str, value) -> None:
    data = yaml.safe_load((repo / "params.yaml").read_text())
    node = data
    *path, leaf = dotted.split(".")
    for key in path:
        node = node[key]
    node[leaf] = value
    (repo / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.integration
def test_experiment_on_tree_depth_shows_in_exp_show_and_unread_keys_rerun_nothing(smoke_repo: Path, tmp_path: Path) -> None:
    dvc(smoke_repo, "repro", "--glob", "control_*")  # reused when the control smoke test ran first
    work = tmp_path / "work"
    shutil.copytree(smoke_repo, work, symlinks=True)  # experiments rewrite the workspace: not the shared copy
    git(work, "add", "-A")
    git(work, "commit", "-qm", "smoke baseline")

    # item 7: only control_evaluate reads success_pairs, so only it goes stale
    depth = yaml.safe_load((work / "params.yaml").read_text())["control"]["tree"]["max_depth"]
    current = yaml.safe_load((work / "params.yaml").read_text())["control"]["eval"]["success_pairs"]
    set_param(work, "control.eval.success_pairs", 0.5 if current != 0.5 else 0.6)
    status = json.loads(dvc(work, "status", "--json", "control_teacher", "control_teacher_eval", "control_rollouts",
                            "control_distill", "control_evaluate").stdout)
    assert list(status) == ["control_evaluate"], status
    assert status["control_evaluate"] == [{"changed deps": {"params.yaml": {"control.eval.success_pairs": "modified"}}}]
    git(work, "checkout", "params.yaml")

    # the done-when check: an experiment on the tree depth, compared by DVC
    assert depth != 5
    dvc(work, "exp", "run", "-q", "-n", "depth5", "-S", "control.tree.max_depth=5", "control_evaluate")
    shown = dvc(work, "exp", "show", "--csv", "--only-changed", "--keep", "claim_summary").stdout
    rows = {r["Experiment"] or r["rev"]: r for r in csv.DictReader(io.StringIO(shown))}
    exp, base = rows["depth5"], rows["master"] if "master" in rows else rows["main"]
    assert (base["control.tree.max_depth"], exp["control.tree.max_depth"]) == (str(depth), "5")
    claim_columns = [c for c in exp if c.startswith("claim_summary.")]
    metrics = json.loads((work / "metrics/control.json").read_text())
    for claim_id in metrics["claim_summary"]:
        assert f"claim_summary.{claim_id}.diff" in claim_columns and f"claim_summary.{claim_id}.verdict" in claim_columns
    moved = [c for c in exp if c.startswith("summary.") and exp[c] != base[c]]
    assert moved, "a depth-5 tree changed none of the control metrics"


def test_metrics_diff_shows_each_claim_moving(tmp_path: Path) -> None:
    """Two commits of a metrics file whose claims moved: `dvc metrics diff` names each claim by id."""
    from paperworks.core.claims import claim_summary

    repo = tmp_path / "r"
    (repo / "metrics").mkdir(parents=True)
    (repo / "dvc.yaml").write_text("metrics:\n  - metrics/t.json\n")
    git(repo, "init", "-q")
    subprocess.run([str(VENV_BIN / "dvc"), "init", "-q"], cwd=repo, env=tool_env(), check=True)

    def claims(diff: float, verdict: str) -> list[dict]:
        return [{"id": "tree_vs_teacher", "diff": diff, "ci_low": diff - 0.1, "ci_high": diff + 0.1, "p_holm": 0.5,
                 "verdict": verdict, "role": "headline", "kind": "superiority"}]

    for diff, verdict in ((0.05, "unresolved"), (0.30, "method better")):
        c = claims(diff, verdict)
        (repo / "metrics/t.json").write_text(json.dumps({"claims": c, "claim_summary": claim_summary(c)}))
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", verdict)
    out = json.loads(dvc(repo, "metrics", "diff", "HEAD~1", "HEAD", "--json").stdout)["metrics/t.json"]
    assert out["claim_summary.tree_vs_teacher.diff"]["old"] == 0.05
    assert out["claim_summary.tree_vs_teacher.diff"]["new"] == 0.30
    assert out["claim_summary.tree_vs_teacher.ci_high"]["diff"] == pytest.approx(0.25)


def test_dvc_metrics_are_the_tracks_metrics_files_only() -> None:
    """`dvc metrics show` / `dvc exp show` list what the tracks measure (metrics/<track>.json, with the
    claims keyed by id), not the last logged value of every training run: dvclive's per-run
    metrics.json is an output and its curves are plots."""
    from tests.conftest import REPO

    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    declared = [next(iter(m)) if isinstance(m, dict) else m
                for stage in stages.values() for m in stage.get("metrics", [])]
    assert declared and all(p.startswith("metrics/") for p in declared), [p for p in declared if not p.startswith("metrics/")]


def test_training_stages_can_be_restored_from_the_run_cache() -> None:
    """DVC saves no run-cache entry for a stage with an uncached output that is not declared as a
    metric or plot (dvc/stage/__init__.py, `no_cache_outs`): such a stage retrains wherever its
    dvc.lock entry is missing. Every stage that logs with dvclive (a `live` path) must therefore
    keep its uncached files under `plots:`/`metrics:` only."""
    from tests.conftest import REPO

    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    offenders = []
    for name, stage in stages.items():
        outs = stage.get("outs", [])
        paths = [next(iter(o)) if isinstance(o, dict) else o for o in [*outs, *stage.get("plots", [])]]
        if not any("live" in p for p in paths):
            continue
        offenders += [f"{name}: {next(iter(o))}" for o in outs
                      if isinstance(o, dict) and next(iter(o.values())).get("cache") is False]
    assert not offenders, offenders


def test_only_hybrid_stages_depend_on_the_whole_lm_folder() -> None:
    """`paperworks/core/lm/hybrid/` (KDA, MLA, MoE) lives inside core/lm; a stage that lists the
    folder goes stale on every hybrid-kernel change although it never imports one (an MoE change
    once made selfdistill and video_qa stale). Other tracks list core/lm's files instead."""
    from tests.conftest import REPO

    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    whole_folder = {name for name, stage in stages.items()
                    if any(str(d).rstrip("/") == "paperworks/core/lm" for d in stage.get("deps", []))}
    assert whole_folder and all(n.startswith(("hybrid_lm_", "params_check")) for n in whole_folder), sorted(whole_folder)
    listed = {str(d) for stage in stages.values() for d in stage.get("deps", []) if str(d).startswith("paperworks/core/lm/")}
    top_level = {f"paperworks/core/lm/{p.name}" for p in (REPO / "paperworks/core/lm").glob("*.py")}
    assert top_level <= listed, sorted(top_level - listed)  # a new core/lm module must be listed somewhere
