"""The control track's smoke profile end to end through DVC, in a temporary copy of the repo."""
from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from tests.conftest import assert_claims_meet_standard, dvc


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.integration
def test_control_smoke_through_dvc(smoke_repo):
    dvc(smoke_repo, "repro", "--glob", "control_*")
    m = json.loads((smoke_repo / "metrics/control.json").read_text())
    claims = {c["id"]: c for c in assert_claims_meet_standard(m, "control", smoke_repo)}
    head = claims["tree_vs_teacher"]
    assert head["kind"] == "non_inferiority" and head["units"]["cluster"] == "teacher" and head["role"] == "headline"
    assert head["statement"].startswith("Depth-7 tree")
    assert {"teacher", "headline", "viper", "dagger"} <= set(m["summary"])
    plots = smoke_repo / "plots/control"
    for name in ("tree.png", "bangbang.png", "balanced_vs_depth.png", "recipes.csv", "trace.csv", "depth_sweep.csv"):
        assert (plots / name).stat().st_size > 0, name
    assert "IF " in (plots / "rules.md").read_text()
    curve = json.loads((plots / "live_teacher_0/metrics.json").read_text())
    assert "eval" in curve
    res = json.loads((smoke_repo / "data/control/distill/teacher_0_draw_0/results.json").read_text())
    assert res["recipes"]["headline"].endswith("depth=7")

    # a second repro is a no-op
    again = dvc(smoke_repo, "repro", "--glob", "control_*")
    assert "Running stage" not in again.stdout

    # the same seed gives the same dataset, byte for byte
    data = smoke_repo / "data/control/rollouts/teacher_0_draw_0.parquet"
    before = _sha(data)
    dvc(smoke_repo, "repro", "--force", "--single-item", "control_rollouts@0-0")
    assert _sha(data) == before

    # control.tree.max_depth changes the headline tree, and only the stages that read it rerun
    params_file = smoke_repo / "params.yaml"
    params = yaml.safe_load(params_file.read_text())
    params["control"]["tree"]["max_depth"] = 3
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    out = dvc(smoke_repo, "repro", "--glob", "control_*").stdout
    assert "Running stage 'control_distill@0-0'" in out
    assert "Running stage 'control_teacher@0'" not in out and "Running stage 'control_rollouts@0-0'" not in out
    tree = json.loads((smoke_repo / "data/control/distill/teacher_0_draw_0/tree_headline.json").read_text())
    assert tree["depth"] <= 3
