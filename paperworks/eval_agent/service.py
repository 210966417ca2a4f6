"""``evaluate(generator, dim, …)``: one live agent session — the user-facing call.

The agent of :mod:`paperworks.eval_agent.agent` reads verdicts from a pool; here the pool is the
dimension's prompt file × samples, and a verdict is computed only when the agent asks for it
(draw the sample, read it with the tools or, for attribution, with the renderer's truth). The
answer holds the level, the estimate and interval, the samples and CPU seconds spent, the
weakest sub-aspect and the failing prompts as evidence.
"""
from __future__ import annotations

import time
from typing import Callable, Literal

import numpy as np

from paperworks.core.seeding import derive_seed
from paperworks.eval_agent.agent import Pool, level_name, run_agent, weakest_aspect
from paperworks.eval_agent.params import AgentParams, ZooParams
from paperworks.eval_agent.world import STRATA, BenchPrompt, Generator, check, draw


class LiveOutcomes:
    """Verdicts computed on first access (``read(indices) → 0/1 array``) and kept."""

    def __init__(self, n: int, read: Callable[[np.ndarray], np.ndarray]) -> None:
        self.cache = np.full(n, np.nan)
        self.read = read

    def __getitem__(self, rows) -> np.ndarray:
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        missing = np.unique(rows[np.isnan(self.cache[rows])])
        if len(missing):
            self.cache[missing] = self.read(missing)
        return self.cache[rows]

    def __len__(self) -> int:
        return len(self.cache)

    @property
    def samples_drawn(self) -> int:
        return int((~np.isnan(self.cache)).sum())


def evaluate(generator: Generator, dim: str, prompts: list[BenchPrompt], edges: tuple[float, ...], agent: AgentParams,
             zoo: ZooParams, seed: int, reader: Literal["tools", "renderer"] = "tools", tool_model=None) -> dict:
    """How good is ``generator`` on ``dim``? One scripted-planner session on freshly drawn samples."""
    pool_prompts = [b for b in prompts if b.dim == dim]
    if not pool_prompts:
        raise ValueError(f"no prompts for dimension {dim!r} (have: {sorted({b.dim for b in prompts})})")
    if reader == "tools" and tool_model is None:
        raise ValueError("reader='tools' needs tool_model (the fitted ToolHeads)")
    k = zoo.samples_per_prompt
    index = [(b, s) for b in pool_prompts for s in range(k)]

    def read(rows: np.ndarray) -> np.ndarray:
        from paperworks.eval_agent.tools import read_images

        drawn = [draw(generator, dim, index[r][0].prompt, derive_seed(seed, "eval_agent", "live", generator.name, dim, index[r][0].index, index[r][1]),
                      zoo.noise_max, zoo.image_size) for r in rows]
        parses = [t for _, t in drawn] if reader == "renderer" else read_images(tool_model, [img for img, _ in drawn], zoo.noise_max)
        return np.array([float(check(dim, index[r][0].prompt, q, zoo.quality_threshold)) for r, q in zip(rows, parses)])

    outcomes = LiveOutcomes(len(index), read)
    pool = Pool(np.array([b.index for b, _ in index]), np.array([s for _, s in index]), np.array([b.stratum for b, _ in index]), outcomes)
    weights = np.bincount(pool.stratum, minlength=len(STRATA[dim])) / len(index)
    t0 = time.process_time()
    s = run_agent(pool, weights, edges, agent, np.random.default_rng(derive_seed(seed, "eval_agent", "live_session", generator.name, dim)))
    cpu = time.process_time() - t0
    aspect, rate = weakest_aspect(pool, s.rows, STRATA[dim])
    failing = [index[r][0].prompt.text() for r in s.rows if outcomes[[r]][0] == 0]
    return {"model": generator.name, "dimension": dim, "level": level_name(s.level), "estimate": s.estimate,
            "interval": (s.low, s.high), "samples": outcomes.samples_drawn, "rounds": s.rounds, "stop": s.reason,
            "cpu_seconds": cpu, "weakest_aspect": aspect, "weakest_rate": rate, "failing_prompts": failing[:5],
            "explanation": f"{generator.name} is {level_name(s.level)} on {dim}: {s.estimate:.2f} of {s.n} samples pass "
                           f"(interval {s.low:.2f}–{s.high:.2f}); weakest sub-aspect {aspect} ({rate:.2f})"}
