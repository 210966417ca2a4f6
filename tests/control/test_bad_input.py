"""Bad input fails with a clear message (exit 2) and leaves existing outputs untouched."""
from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import yaml

from paperworks.control.layout import distill_dir, rollouts_path, teacher_dir
from paperworks.core.profile import compose
from tests.conftest import REPO
from tests.control.test_teacher_and_data import random_teacher


def _workdir(tmp_path, net, overrides=None):
    params = compose("smoke", REPO / "conf")
    params["control"]["teacher"]["net_arch"] = net
    for (section, key), value in (overrides or {}).items():
        params["control"][section][key] = value
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return tmp_path


def _stage(cwd, name, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO), PAPERWORKS_THREADS="1")
    return subprocess.run([sys.executable, "-m", f"stages.control.{name}", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_wrong_shape_checkpoint_fails_and_keeps_output(tmp_path):
    wd = _workdir(tmp_path, [256, 256])
    (wd / teacher_dir(0)).mkdir(parents=True)
    random_teacher(wd / teacher_dir(0), net=[16, 16])          # saved as 16×16, params say 256×256
    out = wd / rollouts_path(0, 0)
    out.parent.mkdir(parents=True)
    out.write_bytes(b"previous output")
    proc = _stage(wd, "rollouts", "--teacher", "0", "--draw", "0")
    assert proc.returncode == 2
    assert "checkpoint does not fit" in proc.stderr and "expected (256, 4)" in proc.stderr
    assert out.read_bytes() == b"previous output"


def test_dataset_missing_a_column_fails_and_keeps_output(tmp_path):
    wd = _workdir(tmp_path, [16, 16])
    (wd / teacher_dir(0)).mkdir(parents=True)
    random_teacher(wd / teacher_dir(0), net=[16, 16])
    data = wd / rollouts_path(0, 0)
    data.parent.mkdir(parents=True)
    pd.DataFrame({"sigma": [1.0], "x": [0.0], "theta": [0.0], "x_dot": [0.0], "theta_dot": [0.0],
                  "teacher_action": [0.0]}).to_parquet(data)   # no episode/t/applied_action/weight
    marker = wd / distill_dir(0, 0) / "results.json"
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    proc = _stage(wd, "distill", "--teacher", "0", "--draw", "0")
    assert proc.returncode == 2
    assert "missing column" in proc.stderr and "weight" in proc.stderr
    assert marker.read_text() == "{}" and sorted(p.name for p in marker.parent.iterdir()) == ["results.json"]


def test_unknown_env_id_fails_before_any_work(tmp_path):
    wd = _workdir(tmp_path, [16, 16], {("env", "id"): "HalfCheetah-v5"})
    proc = _stage(wd, "teacher", "--teacher", "0")
    assert proc.returncode == 2
    assert "control.env.id" in proc.stderr and "InvertedPendulum-v5" in proc.stderr
    assert not (wd / "models").exists() and not (wd / "plots").exists()
