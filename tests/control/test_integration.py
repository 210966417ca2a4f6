"""The control track's smoke profile end to end through DVC, in a temporary copy of the repo."""
from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import yaml

from tests.conftest import assert_claims_meet_standard, dvc


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.integration
def test_control_smoke_through_dvc(smoke_repo, tmp_path):
    dvc(smoke_repo, "repro", "--glob", "control_*")
    m = json.loads((smoke_repo / "metrics/control.json").read_text())
    claims = {c["id"]: c for c in assert_claims_meet_standard(m, "control", smoke_repo)}
    head = claims["tree_vs_teacher"]
    params = yaml.safe_load((smoke_repo / "params.yaml").read_text())["control"]
    assert head["kind"] == "non_inferiority" and head["units"]["cluster"] == "teacher" and head["role"] == "headline"
    assert head["margin"] == params["claims"]["tree_vs_teacher_margin"]
    assert head["statement"].startswith(f"Depth-{params['tree']['max_depth']} tree")
    assert [c["id"] for c in m["claims"] if c["role"] == "headline"] == [
        "tree_vs_teacher", "noisy_vs_clean_rollouts", "urgency_vs_raw_state"]
    assert claims["tree_vs_teacher_hard"]["table_name"] == "balanced_hard"
    # the smoke teacher cannot balance: every claim says so instead of a verdict
    assert all(c["verdict"].startswith("not tested") for c in m["claims"])
    assert "every pair's teacher balances n/n" in head["verdict"]
    assert {"teacher", "headline", "clean_rollouts", "no_urgency", "viper", "dagger"} <= set(m["summary"])
    assert m["teachers"]["slots"] == 1 and m["teachers"]["per_slot"]["0"]["solved"] is False
    assert {"teacher", "headline"} <= set(m["bounded"]) and m["bounded"]["max_abs_leaf_torque"] <= 3.0
    plots = smoke_repo / "plots/control"
    for name in ("tree.png", "bangbang.png", "bounded.png", "balanced_vs_depth.png", "recipes.csv", "recipes_hard.csv",
                 "bounded.csv", "teachers.csv", "trace.csv", "depth_sweep.csv"):
        assert (plots / name).stat().st_size > 0, name
    for table in ("balanced", "balanced_hard"):
        assert (smoke_repo / f"metrics/units/control/{table}.csv").stat().st_size > 0
    assert "IF " in (plots / "rules.md").read_text()
    curve = json.loads((plots / "live_teacher_0/metrics.json").read_text())
    assert "eval" in curve
    res = json.loads((smoke_repo / "data/control/distill/teacher_0_draw_0/results.json").read_text())
    assert res["recipes"]["headline"].endswith(f"depth={params['tree']['max_depth']}|best-of-{params['tree']['selection_candidates']}")

    # a second repro is a no-op
    again = dvc(smoke_repo, "repro", "--glob", "control_*")
    assert "Running stage" not in again.stdout

    # the same seed gives the same dataset, byte for byte
    data = smoke_repo / "data/control/rollouts/teacher_0_draw_0.parquet"
    before = _sha(data)
    dvc(smoke_repo, "repro", "--force", "--single-item", "control_rollouts@0-0")
    assert _sha(data) == before

    # a report-only key reruns the report alone — in a copy: the shared smoke copy keeps its params
    work = tmp_path / "work"
    shutil.copytree(smoke_repo, work, symlinks=True)
    params_file = work / "params.yaml"
    params = yaml.safe_load(params_file.read_text())
    params["control"]["eval"]["success_pairs"] = 0.5
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    out = dvc(work, "repro", "--glob", "control_*").stdout
    assert "Running stage 'control_evaluate'" in out
    assert "Running stage 'control_distill@0-0'" not in out and "Running stage 'control_teacher_eval@0'" not in out

    # control.tree.max_depth changes the headline tree, and only the stages that read it rerun
    params["control"]["tree"]["max_depth"] = 3
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    out = dvc(work, "repro", "--glob", "control_*").stdout
    assert "Running stage 'control_distill@0-0'" in out
    assert "Running stage 'control_teacher@0'" not in out and "Running stage 'control_rollouts@0-0'" not in out
    tree = json.loads((work / "data/control/distill/teacher_0_draw_0/tree_headline.json").read_text())
    assert tree["depth"] <= 3
