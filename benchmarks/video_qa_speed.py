"""Cost of the video QA track on one CPU thread: the cost-model constants and the stage time of a profile.

    PYTHONPATH=. python benchmarks/video_qa_speed.py                       # cost-model constants only
    PYTHONPATH=. python benchmarks/video_qa_speed.py --profile smoke       # + every video_qa stage of a profile
    PYTHONPATH=. python benchmarks/video_qa_speed.py --profile default --scale 0.25

1. ``cost.ms_per_frame`` (render one 64 × 64 frame + encode it with the patchify encoder) and
   ``cost.ms_per_call`` (one answerer forward over the global frames, one scorer forward over a
   crop), CPU time, fastest of 3 rounds — the constants of the CPU-ms model in ``params.yaml``.
2. With ``--profile``: a temporary copy of the repository on that profile runs the track's stage
   scripts in DVC order (``PAPERWORKS_THREADS=1``); per stage, CPU seconds of the child process
   and wall seconds. ``--scale s`` multiplies the number of videos (the linear part: rendering,
   encoding, inference) and prints the measured stages beside a linear extrapolation to scale 1
   (training steps do not depend on the number of videos, so they are not scaled).
The load average is printed before and after: on a shared machine, CPU seconds are the number
to compare with the budget (≤ 25 min of stage time for the default profile on 2 idle cores).
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from paperworks.core.render.scene import Scene  # noqa: E402
from paperworks.core.vision import encode_batched, frames_to_tensor  # noqa: E402
from paperworks.video_qa.models import FEATURE_DIM, Answerer, RelevanceScorer, make_featurizer  # noqa: E402
from paperworks.video_qa.params import AnswererParams, EncoderParams, ScorerParams, WorldParams  # noqa: E402
from paperworks.video_qa.world import Question, make_video  # noqa: E402

STAGES = ("world", "frames", "train", "infer", "evaluate")
SCALED = ("n_train_videos", "n_dev_videos", "n_test_videos")


def fastest(fn, rounds: int = 3) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        c0 = time.process_time()
        fn()
        best = min(best, time.process_time() - c0)
    return best


def cost_constants(n_frames: int = 600) -> dict[str, float]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    wp = WorldParams(n_train_videos=2, n_dev_videos=2, n_test_videos=2)
    scene = Scene(make_video(1, wp), 64, 64)
    from paperworks.core.profile import compose

    encoder = make_featurizer(EncoderParams(**compose("default", REPO / "conf")["video_qa"]["encoder"]))  # the default's sizes
    ts = list(range(n_frames))
    render = fastest(lambda: scene.frames(ts)) / n_frames
    frames = scene.frames(ts)
    encode = fastest(lambda: encode_batched(encoder, frames, prepare=frames_to_tensor)) / n_frames
    answerer, scorer = Answerer(FEATURE_DIM, AnswererParams(steps=10)).eval(), RelevanceScorer(FEATURE_DIM, ScorerParams(steps=10)).eval()
    q = Question("v", "q", "local", "circle", "", ("red", "blue", "green", "white"), 0, 0, 1)
    from paperworks.video_qa.pipeline import answer_logits, relevance

    emb = encode_batched(encoder, frames[:64], prepare=frames_to_tensor)
    idx = np.arange(64)
    calls = 50
    answer = fastest(lambda: [answer_logits(answerer, emb, idx, n_frames, q) for _ in range(calls)]) / calls
    score = fastest(lambda: [relevance(scorer, emb[:32], emb.mean(0), q) for _ in range(calls)]) / calls
    return {"render_ms": render * 1e3, "encode_ms": encode * 1e3, "ms_per_frame": (render + encode) * 1e3,
            "answerer_call_ms": answer * 1e3, "scorer_call_ms": score * 1e3}


def run_profile(profile: str, scale: float) -> list[tuple[str, float, float, float]]:
    from tests.conftest import copy_repo

    rows = []
    with tempfile.TemporaryDirectory(prefix="video_qa_bench_") as tmp:
        root = copy_repo(Path(tmp) / "repo", REPO)
        env = dict(os.environ, PYTHONPATH=str(root), PAPERWORKS_THREADS="1", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
        subprocess.run([sys.executable, "-m", "paperworks.core.profile", profile], cwd=root, env=env, check=True,
                       capture_output=True)
        params = yaml.safe_load((root / "params.yaml").read_text())
        world = params["video_qa"]["world"]
        for k in SCALED:
            world[k] = max(2, int(round(world[k] * scale)))
        (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        for stage in STAGES:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            w0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", f"stages.video_qa.{stage}"], cwd=root, env=env, check=True,
                           capture_output=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            rows.append((stage, cpu, time.perf_counter() - w0, (after.ru_maxrss / 1024)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=("smoke", "default", "paper"))
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the number of videos (linear stages)")
    args = ap.parse_args()
    print("load average before:", os.getloadavg())
    c = cost_constants()
    print("\n| cost-model constant (one thread, CPU) | ms |\n| --- | ---: |")
    for k, v in c.items():
        print(f"| {k} | {v:.3f} |")
    if args.profile:
        rows = run_profile(args.profile, args.scale)
        print(f"\n| stage ({args.profile}, videos × {args.scale:g}) | CPU s | wall s | peak RSS MiB (max so far) |\n| --- | ---: | ---: | ---: |")
        for stage, cpu, wall, rss in rows:
            print(f"| video_qa_{stage} | {cpu:.1f} | {wall:.1f} | {rss:.0f} |")
        total_cpu, total_wall = sum(r[1] for r in rows), sum(r[2] for r in rows)
        print(f"| **total** | {total_cpu:.1f} | {total_wall:.1f} | |")
        if args.scale != 1.0:
            print(f"\nlinear extrapolation to scale 1 (upper bound: training does not scale): "
                  f"≤ {total_cpu / args.scale:.0f} CPU s")
    print("\nload average after:", os.getloadavg())


if __name__ == "__main__":
    main()
