"""Params validate before any work and name the key path and the allowed values."""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from paperworks.core.params import ParamsError, validate_section
from paperworks.core.profile import compose
from paperworks.insurance.params import Params

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def section():
    return compose("default", REPO / "conf")["insurance"]


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_every_profile_validates(profile):
    validate_section("insurance", Params, compose(profile, REPO / "conf")["insurance"])


def test_paper_grid_has_18_configurations_and_default_a_declared_subset(section):
    paper = validate_section("insurance", Params, compose("paper", REPO / "conf")["insurance"])
    assert len(paper.grid.backbones) * len(paper.grid.losses) * len(paper.grid.freezes) == 18
    p = validate_section("insurance", Params, section)
    assert set(p.grid.losses) == {"lambdaloss", "listnet", "plistmle"}  # the subset keeps every listwise loss


def test_min_epochs_above_the_cap_is_rejected(section):
    bad = copy.deepcopy(section)
    bad["train"]["min_epochs"] = bad["train"]["epochs"] + 1
    with pytest.raises(ParamsError, match="min_epochs"):
        validate_section("insurance", Params, bad)


def test_unknown_loss_names_key_and_allowed(section):
    bad = copy.deepcopy(section)
    bad["grid"]["losses"] = ["listnet", "hinge"]
    with pytest.raises(ParamsError) as e:
        validate_section("insurance", Params, bad)
    assert "insurance.grid.losses.1" in str(e.value) and "'lambdaloss', 'listnet' or 'plistmle'" in str(e.value)


def test_unknown_freezing_names_key(section):
    bad = copy.deepcopy(section)
    bad["grid"]["freezes"] = ["all"]
    with pytest.raises(ParamsError, match=r"insurance\.grid\.freezes\.0"):
        validate_section("insurance", Params, bad)


def test_out_of_range_and_unknown_keys(section):
    bad = copy.deepcopy(section)
    bad["seeds"]["n_seeds"] = 0
    bad["train"]["learning_rate"] = 1e-4
    with pytest.raises(ParamsError) as e:
        validate_section("insurance", Params, bad)
    assert "insurance.seeds.n_seeds" in str(e.value) and "insurance.train.learning_rate" in str(e.value)


def test_split_fractions_must_sum_to_one(section):
    bad = copy.deepcopy(section)
    bad["data"]["split_fractions"] = [0.5, 0.1, 0.1]
    with pytest.raises(ParamsError, match="split_fractions"):
        validate_section("insurance", Params, bad)


def test_stage_fails_before_work(tmp_path, section):
    bad = copy.deepcopy(section)
    bad["grid"]["losses"] = ["hinge"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"seed": 1, "insurance": bad}))
    proc = subprocess.run([sys.executable, "-m", "stages.insurance.generate"], cwd=tmp_path, capture_output=True,
                          text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert "insurance.grid.losses.0" in proc.stderr
    assert not (tmp_path / "data").exists()  # nothing was written
