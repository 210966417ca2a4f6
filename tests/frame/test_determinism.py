"""Same params + seed → same bytes, across separate processes (issue 23, item 4).

A tracked output whose bytes change on every rerun changes its DVC hash, so everything
downstream reruns. Two sources did that: safetensors' metadata order (a Rust HashMap,
reseeded per process) and wall times written into outputs.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import yaml

from paperworks.core.profile import compose
from tests.conftest import REPO, tool_env

WRITE_CHECKPOINT = """
import sys, torch
from paperworks.core.io import save_safetensors
g = torch.Generator().manual_seed(0)
tensors = {name: torch.randn(3, 4, generator=g) for name in ("w2", "b1", "w1", "b2")}
meta = {f"key_{i:02d}": str(i * 7) for i in range(12)}   # 12! orders: a random one never repeats
save_safetensors(sys.argv[1], tensors, meta)
"""


def digests(root: Path) -> dict[str, str]:
    return {
        str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(root.rglob("*")) if f.is_file()
    }


def run_py(args: list[str], cwd: Path) -> None:
    env = dict(tool_env(), PYTHONPATH=str(REPO), PAPERWORKS_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stderr[-3000:]}"


def test_checkpoint_bytes_do_not_depend_on_the_process(tmp_path: Path) -> None:
    paths = [tmp_path / f"{i}.safetensors" for i in range(2)]
    for p in paths:
        run_py(["-c", WRITE_CHECKPOINT, str(p)], tmp_path)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    from paperworks.core.io import load_safetensors, safetensors_metadata

    assert load_safetensors(paths[0], {n: (3, 4) for n in ("w1", "b1", "w2", "b2")})["w1"].shape == (3, 4)
    assert safetensors_metadata(paths[0]) == {f"key_{i:02d}": str(i * 7) for i in range(12)}


def test_a_stage_rerun_in_another_process_writes_the_same_bytes(tmp_path: Path) -> None:
    """The control teacher (actor/critic checkpoints, train.json, dvclive curve) and its
    evaluation JSON, each run twice in fresh processes from the same params."""
    params = compose("smoke", REPO / "conf")
    c = params["control"]
    c["env"]["max_steps"] = 40
    c["teacher"].update(total_timesteps=240, learning_starts=100, eval_every=120, validation_episodes=1, validation_wide_episodes=0,
                        net_arch=[16, 16], batch_size=16, buffer_size=1000)
    c["eval"].update(episodes=1, steady_from=20)
    runs = []
    for name in ("first", "second"):
        work = tmp_path / name
        work.mkdir()
        (work / "params.yaml").write_text(yaml.safe_dump(params))
        run_py(["-m", "stages.control.teacher", "--teacher", "0"], work)
        run_py(["-m", "stages.control.teacher_eval", "--teacher", "0"], work)
        assert (work / "logs/control/teacher_0.json").is_file(), "the wall time must still be recorded, in logs/"
        runs.append({top: digests(work / top) for top in ("models", "data", "plots")})
    assert runs[0]["models"], "the teacher stage wrote no checkpoint"
    assert "teacher_eval/teacher_0.json" in "\n".join(runs[0]["data"])
    for top in ("models", "data", "plots"):
        differ = [f for f in runs[0][top] if runs[0][top][f] != runs[1][top].get(f)]
        assert not differ, f"tracked outputs under {top}/ differ between two identical runs: {differ}"
