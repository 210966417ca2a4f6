"""Param deps (issue 22, item 7): a DVC stage sees only the params keys its dvc.yaml entry declares.

Inside a stage (DVC exports ``DVC_STAGE``) ``load_section``, ``read_params_file`` and
``global_seed`` validate the whole section, then hand over a view where each undeclared key is an
:class:`UndeclaredParam` that fails, naming the key, as soon as the stage uses it. So every smoke
run through DVC checks each stage's declared params against what its code actually reads.
"""
from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest
import yaml

from paperworks.control.params import Params as ControlParams
from paperworks.core.params import (
    ParamsError, UndeclaredParam, global_seed, load_section, read_params_file, stage_params,
)
from paperworks.core.profile import compose
from tests.conftest import REPO, VENV_BIN, tool_env

TOY_DVC_YAML = """
stages:
  narrow:
    cmd: python use.py
    params:
      - seed
      - control.tree.max_depth
      - control.rollouts
  grid:
    matrix:
      teacher: ${control.grid.teachers}
      flag: [true, false]
      part: [max_depth, kd]
    cmd: python use.py
    params:
      - control.tree.${item.part}
  frame:
    cmd: python use.py
    params:
      - profile
"""


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    params = compose("smoke", REPO / "conf")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (tmp_path / "dvc.yaml").write_text(TOY_DVC_YAML)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PAPERWORKS_PARAMS_GUARD", raising=False)
    return tmp_path


def test_declared_keys_read_undeclared_keys_fail_naming_key(toy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DVC_STAGE", "narrow")
    p = load_section("control", ControlParams)
    assert p.tree.max_depth + 0 == yaml.safe_load((toy / "params.yaml").read_text())["control"]["tree"]["max_depth"]
    assert p.rollouts.sigma in p.rollouts.sigma_sweep  # a declared section covers its keys
    assert isinstance(p.eval, UndeclaredParam)
    kd = p.tree.kd  # handing an undeclared key along is not reading it
    for use in (lambda: kd * 2, lambda: float(kd), lambda: f"{kd}", lambda: kd == 1.0, lambda: bool(kd),
                lambda: list(p.eval), lambda: p.eval.success_pairs + 1, lambda: p.grid.teachers[0] + 1):
        with pytest.raises(ParamsError, match=r"stage 'narrow' reads params key 'control\.(tree\.kd|eval|grid)"):
            use()
    assert global_seed(read_params_file()) >= 0
    copy.deepcopy(p)  # copying a view is not a read
    with pytest.raises(ParamsError, match="'profile'"):
        str(read_params_file()["profile"])


def test_outside_dvc_or_switched_off_everything_is_readable(toy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DVC_STAGE", raising=False)
    assert load_section("control", ControlParams).eval.success_pairs is not None
    monkeypatch.setenv("DVC_STAGE", "narrow")
    monkeypatch.setenv("PAPERWORKS_PARAMS_GUARD", "off")
    assert load_section("control", ControlParams).eval.success_pairs is not None


def test_undeclared_seed_fails_naming_seed(toy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DVC_STAGE", "frame")
    assert read_params_file()["profile"] == "smoke"
    with pytest.raises(ParamsError, match="reads params key 'seed'"):
        global_seed(read_params_file())


def test_matrix_names_resolve_like_dvc(toy: Path) -> None:
    """DVC names a matrix combination by its values joined with '-' (booleans lower-case); the
    item then interpolates into the params list. Checked against DVC's own resolver."""
    from dvc.repo import Repo

    subprocess.run(["git", "init", "-q"], cwd=toy, check=True)
    subprocess.run([str(VENV_BIN / "dvc"), "init", "-q"], cwd=toy, check=True, env=tool_env())
    theirs = {s.addressing: [k for d in s.deps if hasattr(d, "params") for k in d.params] for s in Repo(str(toy)).index.stages}
    assert "grid@0-true-kd" in theirs
    assert {name: list(stage_params(name) or ()) for name in theirs} == theirs
    assert stage_params("nosuch") is None and stage_params("grid@9-true-kd") is None


def test_every_declared_key_exists_in_every_profile() -> None:
    """A typo in a dvc.yaml params entry (DVC only reports it once the stage runs) fails here."""
    from paperworks.core.params import _lookup

    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for profile in ("smoke", "default", "paper"):
        data = compose(profile, REPO / "conf")
        for name, stage in stages.items():
            items = {}
            if "matrix" in stage:  # the first combination stands for the group
                first = {k: (_lookup(data, v[2:-1]) if isinstance(v, str) else v)[0] for k, v in stage["matrix"].items()}
                items = {"item": first}
            for key in stage.get("params", []):
                if isinstance(key, str):
                    resolved = key
                    for k, v in items.get("item", {}).items():
                        resolved = resolved.replace("${item.%s}" % k, str(v))
                    _lookup(data, resolved)  # raises ParamsError naming the key


def test_a_matrix_stage_may_check_its_item_against_the_grid(toy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DVC_STAGE", "grid@0-true-kd")
    p = load_section("control", ControlParams)
    assert 0 in p.grid.teachers and p.tree.kd >= 0  # the matrix source and the item's own key
    with pytest.raises(ParamsError, match="control.tree.max_depth"):
        p.tree.max_depth + 1
    with pytest.raises(ParamsError, match="control.grid.draws"):
        len(p.grid.draws)


USE_UNDECLARED = '''
from paperworks.control.params import Params
from paperworks.core.params import load_section
from paperworks.core.stage import stage_main


@stage_main
def main() -> None:
    p = load_section("control", Params)
    text = f"{p.tree.max_depth} {p.eval.success_pairs}"
    with open("out.txt", "w") as fh:
        fh.write(text)


main()
'''


def test_dvc_stage_reading_an_undeclared_key_fails_naming_it(toy: Path) -> None:
    """Through DVC itself: the stage declares control.tree.max_depth but also reads
    control.eval.success_pairs; `dvc repro` fails with one line naming stage and key."""
    (toy / "dvc.yaml").write_text("stages:\n  use:\n    cmd: python use.py\n    params: [control.tree.max_depth]\n"
                                  "    outs: [out.txt]\n")
    (toy / "use.py").write_text(USE_UNDECLARED)
    env = dict(tool_env(), PYTHONPATH=str(REPO))
    subprocess.run(["git", "init", "-q"], cwd=toy, check=True)
    subprocess.run([str(VENV_BIN / "dvc"), "init", "-q"], cwd=toy, check=True, env=env)
    proc = subprocess.run([str(VENV_BIN / "dvc"), "repro"], cwd=toy, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "stage 'use' reads params key 'control.eval.success_pairs'" in proc.stdout + proc.stderr
    assert not (toy / "out.txt").exists()
    (toy / "dvc.yaml").write_text((toy / "dvc.yaml").read_text().replace("[control.tree.max_depth]",
                                                                         "[control.tree.max_depth, control.eval]"))
    proc = subprocess.run([str(VENV_BIN / "dvc"), "repro"], cwd=toy, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
