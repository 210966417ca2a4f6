"""Nothing a run leaves behind lands in tracked folders or the work tree (issue 23, items 6, 10).

- ``atomic_path`` swaps a directory output with two renames; a kill between them left
  ``.<name>.old-*`` beside the output, inside a folder another stage depends on, so
  ``dvc status`` called that stage modified until someone deleted it by hand.
- MuJoCo writes its warnings to ``MUJOCO_LOG.TXT`` in the current directory — the work tree.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paperworks.core.io import atomic_path
from tests.conftest import REPO

KILLED_BETWEEN_RENAMES = """
import os, signal, sys
from paperworks.core import io

real_replace, calls = os.replace, []

def replace_then_die(src, dst):
    calls.append(src)
    if len(calls) == 2:  # the old output is moved aside; die before the new one moves in
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst)

io.os.replace = replace_then_die
with io.atomic_path(sys.argv[1]) as tmp:
    tmp.mkdir()
    (tmp / "f").write_text("second")
"""


def write_dir(target: Path, content: str) -> None:
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "f").write_text(content)


def test_a_kill_between_the_two_renames_leaves_nothing_after_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "distill" / "teacher_0"
    write_dir(target, "first")
    proc = subprocess.run([sys.executable, "-c", KILLED_BETWEEN_RENAMES, str(target)], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert proc.returncode == -9
    left = sorted(p.name for p in target.parent.iterdir())
    assert any(".old-" in n for n in left) and any(".tmp-" in n for n in left), left  # what the kill left
    write_dir(target, "third")
    assert sorted(p.name for p in target.parent.iterdir()) == ["teacher_0"]
    assert (target / "f").read_text() == "third"


def test_old_and_tmp_leftovers_of_files_and_dirs_are_swept(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    for stale in (".out.json.old-1a2b3c4d", ".out.json.tmp-5e6f7a8b"):
        (tmp_path / stale).write_text("stale")
    (tmp_path / ".out.json.old-deadbeef").mkdir()
    (tmp_path / ".out.json.old-deadbeef" / "x").write_text("stale")
    (tmp_path / ".other.json.old-00000000").write_text("not ours")  # another output's: left alone
    with atomic_path(target) as tmp:
        tmp.write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.json.old-00000000", "out.json"]


MUJOCO_WARNING = """
import sys
import mujoco

def warn(env):  # a NaN state: MuJoCo logs "Nan, Inf or huge value in QPOS"
    env.data.qpos[0] = float("nan")
    mujoco.mj_checkPos(env.model, env.data)

if sys.argv[1] == "episodes":  # the env every episode (teacher eval, rollouts, trees) runs in
    from paperworks.control.env import make_env
    warn(make_env("InvertedPendulum-v5"))
else:  # the teacher's training env, built by SB3 first thing in the process
    from paperworks.control.td3 import TD3Config, build_model
    model = build_model(TD3Config(env_id="InvertedPendulum-v5", net_arch=(8,), buffer_size=1000), seed=0)
    warn(model.env.envs[0].unwrapped)
"""


@pytest.mark.parametrize("entry", ["episodes", "td3"])
def test_mujoco_warnings_go_to_logs_not_the_work_tree(entry: str, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), PAPERWORKS_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", MUJOCO_WARNING, entry], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists(), "MuJoCo wrote its log into the work tree"
    assert "QPOS" in (tmp_path / "logs" / "mujoco.log").read_text()


def test_logs_are_ignored_by_git_and_dvc() -> None:
    for path in ("logs/mujoco.log", "logs/control/teacher_0.json", "MUJOCO_LOG.TXT", "stages/MUJOCO_LOG.TXT"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO).returncode == 0, f"{path} must be git-ignored"
    assert {"/logs/", "MUJOCO_LOG.TXT"} <= set((REPO / ".dvcignore").read_text().split())
