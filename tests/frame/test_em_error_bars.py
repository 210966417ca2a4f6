"""em_by_method.png carries error bars (issue 22, item 8): the t interval over seeds of each run's EM.

The frame owns this check because the issue is about plots DVC shows; the figure itself is
protocol_distill's (stages/protocol_distill/evaluate.py: em_figure)."""
from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest

from paperworks.core.stats import mean_ci
from paperworks.protocol_distill.world import MULTI_HOP_SETS

matplotlib.use("Agg")


def test_em_bars_are_seed_means_with_their_t_interval() -> None:
    from stages.protocol_distill.evaluate import em_figure

    rng = np.random.default_rng(0)
    single = next(s for s in ("nq", "popqa", "triviaqa") if s not in MULTI_HOP_SETS)
    multi = sorted(MULTI_HOP_SETS)[0]
    rows = [{"size": "tiny", "run": run, "seed": seed, "qset": qset, "em": float(rng.random() < p + 0.1 * seed)}
            for run, p in (("grpo", 0.3), ("mapd_gpt", 0.5)) for seed in range(3) for qset in (single, multi)
            for _ in range(40)]
    df = pd.DataFrame(rows)
    fig = em_figure(df, 0.95)
    ax = fig.axes[0]
    bars = [c for c in ax.containers if hasattr(c, "errorbar") and c.errorbar is not None]
    assert len(bars) == 2  # single-hop and multi-hop, each with error bars
    for container, part in zip(bars, (df[df.qset == single], df[df.qset == multi])):
        caps = container.errorbar.lines[2][0].get_segments()  # one vertical segment per run
        for (run, g), rect, seg in zip(part.groupby("run"), container.patches, caps):
            ci = mean_ci(g.groupby("seed")["em"].mean().values, 0.95)
            assert rect.get_height() == pytest.approx(ci["mean"])
            assert (seg[0][1], seg[1][1]) == pytest.approx((ci["ci_low"], ci["ci_high"]))
