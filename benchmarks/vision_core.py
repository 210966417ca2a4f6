"""Speed of the shared vision pieces on one CPU thread: scene rendering and encoder training.

    PYTHONPATH=. python benchmarks/vision_core.py [--frames 1200] [--steps 10]

Rendering: frames/s of ``core.render.scene.Scene`` over a 10-minute 2-fps scripted video
(image only; image + labels + truth; textured style; the degraded ``real`` domain).
Encoders at 64 × 64, batch 64, AdamW, cross-entropy over 64 classes: training steps/s and
frames/s, and inference frames/s, for the patchify encoder (default strides (2, 2), and (1, 2)
which keeps the 16 × 16 grid one layer longer) against the plain full-resolution 3 × 3-conv stack of the same widths, and
the 3D patchify encoder on 32 × 64 × 64 volumes. Rates are CPU time (``time.process_time``,
≈ an idle core; fastest of 3 rounds) with wall-clock beside them; the load average is printed
before and after.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from paperworks.core.render.scene import Scene, ScriptConfig, random_scene
from paperworks.core.vision import (
    EncoderConfig, PatchifyEncoder2D, PatchifyEncoder3D, PlainConvEncoder2D, count_parameters,
)


def timed(fn, repeats: int, rounds: int = 3) -> tuple[float, float]:
    """(CPU seconds, wall seconds) for ``repeats`` calls of ``fn``: the fastest of ``rounds`` rounds
    after one warm-up call (the machine is shared; the minimum is the least disturbed round)."""
    fn()
    best = (float("inf"), float("inf"))
    for _ in range(rounds):
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.process_time() - c0, time.perf_counter() - w0))
    return best


def render_rows(n_frames: int) -> list[tuple[str, float, float]]:
    spec = random_scene(0, ScriptConfig(n_frames=n_frames, n_events=12))
    textured = random_scene(0, ScriptConfig(n_frames=n_frames, n_events=12, style="textured"))
    rows = []
    for name, scene, call in [
        ("frame(t), flat", Scene(spec), lambda s, t: s.frame(t)),
        ("render(t): image + labels + truth", Scene(spec), lambda s, t: s.render(t)),
        ("frame(t), textured", Scene(textured), lambda s, t: s.frame(t)),
        ("frame(t, domain='real')", Scene(spec), lambda s, t: s.frame(t, domain="real")),
    ]:
        n = n_frames if "real" not in name else max(100, n_frames // 6)
        cpu, wall = timed(lambda: [call(scene, t) for t in range(n)], 1)
        rows.append((name, n / cpu, n / wall))
    return rows


def train_rows(steps: int) -> list[tuple[str, int, float, float, float, float]]:
    torch.manual_seed(0)
    x2, y2 = torch.rand(64, 3, 64, 64), torch.randint(64, (64,))
    x3, y3 = torch.rand(8, 1, 32, 64, 64), torch.randint(64, (8,))
    models = [
        ("patchify 4×4/4, strides (2, 2) (default)", PatchifyEncoder2D(EncoderConfig()), x2, y2, steps),
        ("patchify 4×4/4, strides (1, 2)", PatchifyEncoder2D(EncoderConfig(strides=(1, 2))), x2, y2, steps),
        ("plain 3×3 convs at full resolution", PlainConvEncoder2D(EncoderConfig()), x2, y2, max(2, steps // 5)),
        ("patchify 3D 4³/4, strides (2, 2), 32×64×64", PatchifyEncoder3D(), x3, y3, max(2, steps // 2)),
    ]
    rows = []
    for name, model, x, y, n in models:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

        cpu, wall = timed(step, n)
        with torch.no_grad():
            model.eval()
            xi = torch.cat([x] * 4)
            icpu, _ = timed(lambda: model(xi), max(2, n // 2))
            model.train()
        rows.append((name, count_parameters(model), n / cpu, n * len(x) / cpu, n * len(x) / wall,
                     max(2, n // 2) * len(xi) / icpu))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=1200)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    print(f"one torch thread; load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    print("\n| scene rendering (64×64) | frames/s (CPU) | frames/s (wall) |\n| --- | ---: | ---: |")
    for name, cpu, wall in render_rows(args.frames):
        print(f"| {name} | {cpu:,.0f} | {wall:,.0f} |")
    print("\n| encoder, batch 64 at 64×64 (3D: batch 8) | params | train steps/s (CPU) | train items/s (CPU) "
          "| train items/s (wall) | infer items/s (CPU) |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    rows = train_rows(args.steps)
    for name, n_params, sps, fps, fps_wall, infer in rows:
        print(f"| {name} | {n_params:,} | {sps:,.2f} | {fps:,.0f} | {fps_wall:,.0f} | {infer:,.0f} |")
    plain = rows[2][2]
    print(f"\ntraining speed-up over the plain conv stack: strides (2, 2) {rows[0][2] / plain:.1f}×, "
          f"strides (1, 2) {rows[1][2] / plain:.1f}×")
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
