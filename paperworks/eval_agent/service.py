"""The user-facing calls: one live agent session on a dimension or a slice of it, a question in words, a CLI, HTTP.

- ``evaluate(generator, dim, …)`` / ``evaluate_slice(generator, query, …)``: the agent of
  :mod:`paperworks.eval_agent.agent` reads verdicts from a pool; here the pool is the slice's prompts × samples,
  and a verdict is computed only when the agent asks for it (draw the sample, read it with the tools or, for
  attribution, with the renderer's truth). The answer holds the level, the estimate and interval, the evidence
  (failing samples and what was read in them) and the cost (samples drawn, CPU and wall seconds).
- ``ask(text, model, root)``: parse a question (``queries.parse_query``), take the slice's levels from the
  benchmark's population, load the fitted tools and answer; ``python -m paperworks.eval_agent.service "…"``.
- ``make_server(root, port)``: the same over stdlib HTTP (``GET /ask?q=…``), ``--serve PORT`` on the CLI.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Literal

import numpy as np

from paperworks.core.seeding import derive_seed
from paperworks.eval_agent.agent import Pool, level_name, run_agent, weakest_aspect
from paperworks.eval_agent.params import AgentParams, ZooParams
from paperworks.eval_agent.queries import Query, parse_query
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
    return evaluate_slice(generator, Query(dim=dim), prompts, edges, agent, zoo, seed, reader, tool_model)


def evaluate_slice(generator: Generator, query: Query, prompts: list[BenchPrompt], edges: tuple[float, ...], agent: AgentParams,
                   zoo: ZooParams, seed: int, reader: Literal["tools", "renderer"] = "tools", tool_model=None) -> dict:
    """One live session on the prompts of ``query``'s slice of its dimension (every prompt when it names no slice).

    Returns the level, estimate, interval, the evidence (failing samples: prompt, sample, what the reader saw) and the
    cost (samples drawn, CPU and wall seconds)."""
    dim = query.dim
    pool_prompts = [b for b in prompts if query.matches(b)]
    if not pool_prompts:
        raise ValueError(f"no prompts for {query.key!r} (dimensions: {sorted({b.dim for b in prompts})})")
    if reader == "tools" and tool_model is None:
        raise ValueError("reader='tools' needs tool_model (the fitted ToolHeads)")
    k = zoo.samples_per_prompt
    index = [(b, s) for b in pool_prompts for s in range(k)]
    seen: dict[int, str] = {}

    def read(rows: np.ndarray) -> np.ndarray:
        from paperworks.eval_agent.tools import read_images

        drawn = [draw(generator, dim, index[r][0].prompt, derive_seed(seed, "eval_agent", "live", generator.name, dim, index[r][0].index, index[r][1]),
                      zoo.noise_max, zoo.image_size) for r in rows]
        parses = [t for _, t in drawn] if reader == "renderer" else read_images(tool_model, [img for img, _ in drawn], zoo.noise_max)
        for r, q in zip(rows, parses):
            seen[int(r)] = _describe(q)
        return np.array([float(check(dim, index[r][0].prompt, q, zoo.quality_threshold)) for r, q in zip(rows, parses)])

    outcomes = LiveOutcomes(len(index), read)
    pool = Pool(np.array([b.index for b, _ in index]), np.array([s for _, s in index]), np.array([b.stratum for b, _ in index]), outcomes)
    weights = np.bincount(pool.stratum, minlength=len(STRATA[dim])) / len(index)
    t0, w0 = time.process_time(), time.perf_counter()
    s = run_agent(pool, weights, edges, agent, np.random.default_rng(derive_seed(seed, "eval_agent", "live_session", generator.name, query.key)))
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    aspect, rate = weakest_aspect(pool, s.rows, STRATA[dim])
    failing = [{"prompt": index[r][0].prompt.text(), "prompt_index": index[r][0].index, "sample": index[r][1],
                "aspect": STRATA[dim][index[r][0].stratum], "read": seen.get(r, "?")} for r in s.rows if outcomes[[r]][0] == 0]
    what = dim if query.key.endswith(":all") else f"{dim} ({query.key.split(':', 1)[1]} prompts)"
    return {"model": generator.name, "dimension": dim, "slice": query.key, "query": query.text, "level": level_name(s.level),
            "estimate": s.estimate, "interval": (s.low, s.high), "samples": outcomes.samples_drawn, "rounds": s.rounds, "stop": s.reason,
            "cpu_seconds": cpu, "cost": {"samples": outcomes.samples_drawn, "slice_samples": len(index), "cpu_seconds": round(cpu, 3),
                                         "wall_seconds": round(wall, 3)},
            "weakest_aspect": aspect, "weakest_rate": rate, "failing_prompts": [f["prompt"] for f in failing[:5]],
            "evidence": failing[:10], "failing_total": len(failing),
            "explanation": f"{generator.name} is {level_name(s.level)} on {what}: {s.estimate:.2f} of {s.n} samples pass "
                           f"(interval {s.low:.2f}–{s.high:.2f}); weakest sub-aspect {aspect} ({rate:.2f})"}


def _describe(parse) -> str:
    from paperworks.core.render.scene import COLOURS, SHAPES

    parts = [f"{parse.count[s]}× {COLOURS[parse.colour[s]] if parse.colour[s] >= 0 else '?'} {name}"
             for s, name in enumerate(SHAPES) if parse.count[s] > 0]
    return "; ".join(parts or ["nothing"]) + f"; noise {parse.noise:.1f}"


def ask(text: str, model: str | None = None, root: Path | str = ".", reader: Literal["tools", "renderer"] = "tools") -> dict:
    """Answer a question in words about one generator of the zoo, from a repository where the pipeline ran up to
    ``eval_agent_bench`` (params.yaml, the zoo, the fitted tools, the benchmark outcomes for the slice's levels).

    The model is named in ``text`` (e.g. "how well does A0 count triangles?") or passed as ``model``."""
    import os

    import torch

    from paperworks.core.io import ArtifactError, load_safetensors
    from paperworks.core.params import global_seed, load_section, read_params_file
    from paperworks.eval_agent.artifacts import BENCH, TOOL_WEIGHTS, ZOO, read_outcomes, read_zoo
    from paperworks.eval_agent.params import Params
    from paperworks.eval_agent.queries import slice_edges, slice_rows
    from paperworks.eval_agent.tools import ToolHeads

    root = Path(root)
    here = os.getcwd()
    os.chdir(root)  # params.yaml and the artifact paths are relative to the repository root
    try:
        p = load_section("eval_agent", Params)
        seed = global_seed(read_params_file())
        zoo, prompts = read_zoo(ZOO)
        gens = {g.name: g for g in zoo if g.role != "population"}
        q = parse_query(text, models=sorted(gens), dims=p.zoo.dims)
        name = model or q.model
        if name is None:
            raise ValueError(f"query {text!r}: name a model ({', '.join(sorted(gens))})")
        if name not in gens:
            raise ValueError(f"unknown model {name!r}; the zoo's models: {', '.join(sorted(gens))}")
        if not any(q.matches(b) for b in prompts):
            raise ValueError(f"query {text!r}: no prompt of this profile's {q.dim} file is in the slice {q.key!r}")
        edges = slice_edges(slice_rows(read_outcomes(BENCH), prompts, q))
        tool_model = None
        if reader == "tools":
            torch.set_num_threads(1)
            tool_model = ToolHeads(p.tools.hidden)
            try:
                tool_model.load_state_dict(load_safetensors(TOOL_WEIGHTS, {k: tuple(v.shape) for k, v in tool_model.state_dict().items()}))
            except (RuntimeError, KeyError) as e:
                raise ArtifactError(f"{TOOL_WEIGHTS}: does not fit tools.hidden = {p.tools.hidden} ({e})") from None
            tool_model.eval()
        out = evaluate_slice(gens[name], q, prompts, edges, p.agent, p.zoo, seed, reader, tool_model)
        return {**out, "edges": [round(e, 4) for e in edges]}
    finally:
        os.chdir(here)


def make_server(root: Path | str = ".", host: str = "127.0.0.1", port: int = 8765):
    """A stdlib HTTP server (one request at a time): ``GET /ask?q=<query>[&model=A0][&reader=renderer]`` → the answer as
    JSON (200), or ``{"error": …}`` with 400 for a query it cannot answer (unparseable, unknown model, missing artifact)."""
    import json
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from urllib.parse import parse_qs, urlparse

    from paperworks.core.io import ArtifactError

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body, default=float).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlparse(self.path)
            if url.path != "/ask":
                return self._send(404, {"error": f"unknown path {url.path!r}; use /ask?q=<query>"})
            args = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if not args.get("q"):
                return self._send(400, {"error": "missing query parameter q"})
            reader = args.get("reader", "tools")
            if reader not in ("tools", "renderer"):
                return self._send(400, {"error": f"reader must be tools or renderer, not {reader!r}"})
            try:
                self._send(200, ask(args["q"], args.get("model"), root, reader))
            except (ValueError, ArtifactError) as e:
                self._send(400, {"error": str(e)})

        def log_message(self, *a) -> None:  # keep stderr quiet
            pass

    return HTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(prog="python -m paperworks.eval_agent.service",
                                 description="Ask the evaluation agent about one generator of the zoo (after the pipeline ran).")
    ap.add_argument("query", nargs="?", help="e.g. 'how well does A0 count triangles?'")
    ap.add_argument("--serve", type=int, metavar="PORT", help="serve GET /ask?q=… on 127.0.0.1:PORT instead of answering once")
    ap.add_argument("--model", help="the generator, if the query does not name it")
    ap.add_argument("--root", default=".", help="repository root (params.yaml, data/eval_agent, models/eval_agent)")
    ap.add_argument("--reader", choices=("tools", "renderer"), default="tools")
    a = ap.parse_args(argv)
    if a.serve is not None:
        server = make_server(a.root, port=a.serve)
        print(f"serving on http://127.0.0.1:{server.server_port}/ask?q=…", file=sys.stderr)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        return 0
    if not a.query:
        ap.error("a query is needed (or --serve PORT)")
    from paperworks.core.io import ArtifactError

    try:
        out = ask(a.query, a.model, a.root, a.reader)
    except (ValueError, ArtifactError) as e:  # an unparseable query, an unknown model, a missing or corrupt artifact
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
