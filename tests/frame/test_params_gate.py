"""A rejected parameter must not delete outputs (issue 23, item 5), shown on a toy DVC project.

DVC deletes a stage's outputs before it runs the stage's command, so a stage that
validates its own params (every stage here does) has already lost its outputs when it
refuses a value: ``dvc exp run -S seed=-1 control_distill@0-0`` deleted a trained teacher.
The gate: a root stage ``params_check`` (``python -m paperworks.core.params --stamp …``)
whose constant output every stage depends on. DVC runs it first; when it fails, DVC stops
before touching anything downstream; when it passes, its unchanged output reruns nothing.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from paperworks.core.params import STAMP_TEXT
from paperworks.core.profile import compose
from tests.conftest import REPO, VENV_BIN, tool_env

STAGE = '''
from paperworks.control.params import Params
from paperworks.core.params import load_section
from paperworks.core.stage import stage_main


@stage_main
def main() -> None:
    p = load_section("control", Params)
    with open("out/depth.txt", "w") as fh:
        fh.write(str(p.tree.max_depth))


main()
'''

GATE = """
  params_check:
    cmd: python -m paperworks.core.params --stamp checked/params.ok
    deps: [params.yaml]
    outs: [checked/params.ok]
"""


def toy_dvc_yaml(gated: bool) -> str:
    return "stages:" + (GATE if gated else "") + f"""
  control_use:
    cmd: python use.py
    deps: [use.py{', checked/params.ok' if gated else ''}]
    params: [control.tree.max_depth]
    outs: [out/depth.txt]
"""


def sh(cmd: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(tool_env(), PYTHONPATH=str(REPO), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc


def toy_repo(root: Path, gated: bool) -> Path:
    root.mkdir()
    (root / "params.yaml").write_text(yaml.safe_dump(compose("smoke", REPO / "conf"), sort_keys=False))
    (root / "use.py").write_text(STAGE)
    (root / "dvc.yaml").write_text(toy_dvc_yaml(gated))
    (root / "out").mkdir()
    (root / "checked").mkdir()
    dvc = str(VENV_BIN / "dvc")
    for cmd in (["git", "init", "-q"], [dvc, "init", "-q"], [dvc, "repro"], ["git", "add", "-A"], ["git", "commit", "-qm", "built"]):
        sh(cmd, root)
    assert (root / "out/depth.txt").read_text() == "7"
    return root


@pytest.mark.parametrize("gated", [False, True], ids=["stage validates itself", "params_check gate"])
def test_rejected_param_keeps_outputs_only_behind_the_gate(gated: bool, tmp_path: Path) -> None:
    repo = toy_repo(tmp_path / "toy", gated)
    proc = sh([str(VENV_BIN / "dvc"), "exp", "run", "-S", "control.tree.max_depth=0"], repo, check=False)
    assert proc.returncode != 0
    assert "control.tree.max_depth" in proc.stdout + proc.stderr  # the reason reaches the user
    if gated:
        assert (repo / "out/depth.txt").read_text() == "7", "the gate let DVC delete an output"
    else:
        # what issue 23 reported: DVC deleted the output before the stage refused the value
        assert not (repo / "out/depth.txt").exists()


def test_a_valid_change_elsewhere_reruns_nothing_through_the_gate(tmp_path: Path) -> None:
    repo = toy_repo(tmp_path / "toy", gated=True)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["insurance"]["tune"]["n_trials"] = 3  # a key control_use does not read
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = sh([str(VENV_BIN / "dvc"), "repro"], repo).stdout
    assert "Running stage 'params_check'" in out and "Running stage 'control_use'" not in out
    assert (repo / "checked/params.ok").read_text() == STAMP_TEXT


def test_every_stage_of_the_project_waits_for_the_params_check() -> None:
    """The gate is wired into the real dvc.yaml: every stage depends on its stamp, and the check
    stage depends on every params model it imports (they are found dynamically, so the import
    closure test cannot see them)."""
    from paperworks.core.params import CORE_SECTIONS, track_models

    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    check = stages.pop("params_check")
    assert check["outs"] == ["data/params_check.ok"] and "params.yaml" in check["deps"]
    for track in track_models():
        assert f"paperworks/{track}/params.py" in check["deps"], track
    for ref in CORE_SECTIONS.values():
        assert ref.split(":")[0].replace(".", "/") + ".py" in check["deps"]
    missing = [name for name, st in stages.items() if "data/params_check.ok" not in st.get("deps", [])]
    assert missing == [], f"stages that do not wait for params_check: {missing}"
