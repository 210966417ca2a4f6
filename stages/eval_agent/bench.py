"""Stage eval_agent_bench: every sample of the full benchmark of every generator, read by the tools.

In-family and held-out generators get two independent runs (``a`` defines the truth, ``b`` is the
pool the agent and its controls sample from, and a full rerun); population generators one run.
Each sample also carries the renderer's verdict (``truth``) for the tool-vs-planner attribution.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from paperworks.core.io import load_safetensors, write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.eval_agent.artifacts import BENCH, OUTCOME_SCHEMA, TOOL_WEIGHTS, read_zoo
from paperworks.eval_agent.params import Params
from paperworks.eval_agent.tools import ToolHeads, components, read_detections
from paperworks.eval_agent.world import check, draw


@stage_main
def main() -> None:
    p = load_section("eval_agent", Params)
    seed = global_seed(read_params_file())
    torch.set_num_threads(1)
    zoo, prompts = read_zoo()
    model = ToolHeads(p.tools.hidden)
    model.load_state_dict(load_safetensors(TOOL_WEIGHTS, {k: tuple(v.shape) for k, v in model.state_dict().items()}))
    model.eval()
    nm, qt = p.zoo.noise_max, p.zoo.quality_threshold
    rows = []
    jobs = [(g, run) for g in zoo for run in (("a",) if g.role == "population" else ("a", "b"))]
    for g, run in tqdm(jobs, desc="benchmark runs", mininterval=5):
        dets, feats, meta = [], [], []
        for bp in prompts:
            for k in range(p.zoo.samples_per_prompt):
                s = derive_seed(seed, "eval_agent", "bench", g.name, run, bp.dim, bp.index, k)
                img, truth = draw(g, bp.dim, bp.prompt, s, nm, p.zoo.image_size)
                comps, _, imf = components(img)
                dets.append(comps)
                feats.append(imf)
                meta.append((bp, k, check(bp.dim, bp.prompt, truth, qt)))
        reads = read_detections(model, dets, np.stack(feats), nm)
        for (bp, k, truth_ok), r in zip(meta, reads):
            rows.append((g.name, g.family, g.role, run, bp.dim, bp.index, bp.stratum, k, int(check(bp.dim, bp.prompt, r, qt)), int(truth_ok)))
    df = pd.DataFrame(rows, columns=OUTCOME_SCHEMA.names).astype({"tool": "int8", "truth": "int8"})
    write_parquet(BENCH / "outcomes.parquet", df, OUTCOME_SCHEMA)
    print(f"{len(df)} samples; tool = renderer verdict on {float((df['tool'] == df['truth']).mean()):.3f}")


if __name__ == "__main__":
    main()
