"""`flows.report_guard` on a cached report output: never produced here vs deleted after a run."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import VENV_BIN, tool_env


def _repo(tmp_path: Path) -> Path:
    env = tool_env()
    for cmd in (["git", "init", "-q"], [str(VENV_BIN / "dvc"), "init", "-q"]):
        subprocess.run(cmd, cwd=tmp_path, check=True, env=env)
    (tmp_path / "src.txt").write_text("x\n")
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n"
        "  summary:\n"
        f"    cmd: {sys.executable} -c \"import pathlib; p = pathlib.Path('plots/live'); p.mkdir(parents=True, exist_ok=True); (p / 'metrics.json').write_text('{{}}')\"\n"
        "    deps: [src.txt]\n"
        "    outs: [plots/live/metrics.json]\n"
    )
    subprocess.run([str(VENV_BIN / "dvc"), "repro", "-q"], cwd=tmp_path, check=True, env=env)
    return tmp_path


def _guard(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.report_guard", "--repo", str(repo)], capture_output=True,
                          text=True, env=tool_env(), cwd=Path(__file__).resolve().parents[2])


def test_a_cached_output_never_produced_here_is_not_refused_but_a_deleted_one_is(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    out = repo / "plots/live/metrics.json"
    assert _guard(repo).returncode == 0
    out.unlink()  # deleted after a run while the cache still holds it: a mixed output set
    deleted = _guard(repo)
    assert deleted.returncode == 1 and "plots/live/metrics.json deleted" in deleted.stdout + deleted.stderr
    shutil.rmtree(repo / ".dvc/cache")  # a clone that never ran the stage nor pulled it: absent, not in cache
    assert _guard(repo).returncode == 0, _guard(repo).stdout + _guard(repo).stderr
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text('{"changed": 1}')  # present but not what dvc.lock records: refused
    assert _guard(repo).returncode == 1
