"""Per-sample cost of the eval_agent benchmark on one thread: drawing a sample and reading it with the detector.

    PYTHONPATH=. python benchmarks/eval_agent_speed.py [--n 300]

Prints CPU ms per sample for each family (draw = edit + realise + render + noise; detect = background
fit, median, components and their features). The default profile's bench stage is ≈ 80,000 samples.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from paperworks.eval_agent.params import DIMS, ZooParams  # noqa: E402
from paperworks.eval_agent.tools import components  # noqa: E402
from paperworks.eval_agent.world import FAMILIES, STRATA, build_zoo, draw, make_prompt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    n = ap.parse_args().n
    p = ZooParams()
    zoo = build_zoo(p, 0)
    print(f"{'family':<8}{'draw ms':>10}{'detect ms':>12}{'objects/img':>14}")
    for fam in FAMILIES:
        gens = [g for g in zoo if g.family == fam]
        rng = np.random.default_rng(1)
        jobs = []
        for i in range(n):
            dim = DIMS[i % len(DIMS)]
            jobs.append((gens[i % len(gens)], dim, make_prompt(dim, int(rng.integers(len(STRATA[dim]))), rng), i))
        t = time.process_time()
        imgs = [draw(g, dim, pr, s, p.noise_max)[0] for g, dim, pr, s in jobs]
        t_draw = (time.process_time() - t) / n * 1000
        t = time.process_time()
        found = [len(components(img)[0]) for img in imgs]
        t_det = (time.process_time() - t) / n * 1000
        print(f"{fam:<8}{t_draw:>10.2f}{t_det:>12.2f}{np.mean(found):>14.2f}")


if __name__ == "__main__":
    main()
