"""Stage eval_agent_t2v_bench: the text-to-video generators, the VBench-like suite and every clip of it, read by the tools.

Off (``eval_agent.t2v.enabled: false``, the default and smoke profiles) the stage writes a labelled empty suite
(``suite.json`` says it is off; no prompts, no outcomes) so the DAG stays the same in every profile. On (``paper``),
as the image benchmark: in-domain and held-out generators get two independent runs (``a``: the truth, ``b``: the pool
the agent and its controls read), the population one; each clip carries the tools' verdict and the renderer's.
The tools are the image tools fitted by ``eval_agent_tools`` (frame-wise) plus the clip measures of ``video_tools``.
"""
from __future__ import annotations

import collections
import time

import numpy as np
import pandas as pd

from paperworks.core.io import write_json, write_parquet, write_run_log
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.eval_agent.artifacts import OUTCOME_SCHEMA, PROMPT_SCHEMA, T2V, TOOL_WEIGHTS, t2v_prompts_frame
from paperworks.eval_agent.params import Params

OFF_NOTE = ("the text-to-video suite is off in this profile (eval_agent.t2v.enabled: false); "
            "`make profile P=paper` turns it on with the paper's counts")


@stage_main
def main() -> None:
    p = load_section("eval_agent", Params)
    v = p.t2v
    if not v.enabled:
        write_json(T2V / "suite.json", {"enabled": False, "note": OFF_NOTE})
        write_parquet(T2V / "prompts.parquet", pd.DataFrame(columns=PROMPT_SCHEMA.names), PROMPT_SCHEMA)
        write_parquet(T2V / "outcomes.parquet", pd.DataFrame(columns=OUTCOME_SCHEMA.names), OUTCOME_SCHEMA)
        print(OFF_NOTE)
        return
    import torch
    from tqdm import tqdm

    from paperworks.core.io import load_safetensors
    from paperworks.eval_agent.tools import ToolHeads
    from paperworks.eval_agent.video import HELD_OUT, IN_DOMAIN, LOOKS, build_video_prompts, build_video_zoo, draw_clip, video_generator_record
    from paperworks.eval_agent.video_tools import Thresholds, check_clip, read_clips

    seed = global_seed(read_params_file())
    torch.set_num_threads(1)
    nm = p.zoo.noise_max
    zoo = build_video_zoo(v, seed, nm)
    prompts = build_video_prompts(v, seed)
    model = ToolHeads(p.tools.hidden)
    model.load_state_dict(load_safetensors(TOOL_WEIGHTS, {k: tuple(t.shape) for k, t in model.state_dict().items()}))
    model.eval()
    th = Thresholds(quality=p.zoo.quality_threshold, flicker=v.flicker_threshold, jerk=v.jerk_threshold, dynamic=v.dynamic_threshold)
    rows = []
    jobs = [(g, run) for g in zoo for run in (("a",) if g.role == "population" else ("a", "b"))]
    t_draw = t_read = 0.0
    for g, run in tqdm(jobs, desc="t2v benchmark runs", mininterval=5):
        t0 = time.process_time()
        clips, meta = [], []
        for bp in prompts:
            for k in range(v.samples_per_prompt):
                s = derive_seed(seed, "eval_agent", "t2v_bench", g.name, run, bp.dim, bp.index, k)
                clip, truth = draw_clip(g, bp.dim, bp.prompt, s, v.n_frames, nm)
                clips.append(clip)
                meta.append((bp, k, check_clip(bp.dim, bp.prompt.scene, bp.prompt.motion, truth, th)))
        t1 = time.process_time()
        reads = read_clips(model, clips, nm)
        t_draw, t_read = t_draw + t1 - t0, t_read + time.process_time() - t1
        for (bp, k, truth_ok), r in zip(meta, reads):
            rows.append((g.name, g.family, g.role, run, bp.dim, bp.index, bp.stratum, k,
                         int(check_clip(bp.dim, bp.prompt.scene, bp.prompt.motion, r, th)), int(truth_ok)))
    df = pd.DataFrame(rows, columns=OUTCOME_SCHEMA.names).astype({"tool": "int8", "truth": "int8"})
    write_parquet(T2V / "prompts.parquet", t2v_prompts_frame(prompts), PROMPT_SCHEMA)
    write_parquet(T2V / "outcomes.parquet", df, OUTCOME_SCHEMA)
    write_json(T2V / "suite.json", {"enabled": True, "dims": list(v.dims), "prompts_per_dim": v.prompts_per_dim,
                                    "samples_per_prompt": v.samples_per_prompt, "n_frames": v.n_frames,
                                    "clips_per_model_run": len(prompts) * v.samples_per_prompt,
                                    "families": {"in_domain": list(IN_DOMAIN), "held_out": list(HELD_OUT)}, "looks": LOOKS,
                                    "generators": [video_generator_record(g) for g in zoo]})
    n = len(df)
    write_run_log("eval_agent_t2v_bench", {"clips": n, "frames": n * v.n_frames, "draw_cpu_s": round(t_draw, 2), "read_cpu_s": round(t_read, 2)})
    roles = collections.Counter(g.role for g in zoo)
    print(f"{n} clips of {len(zoo)} generators {dict(roles)}; draw {1e3 * t_draw / max(n, 1):.1f} ms, read {1e3 * t_read / max(n, 1):.1f} "
          f"CPU-ms per clip; tool = renderer verdict on {float((df['tool'] == df['truth']).mean()):.3f}")


if __name__ == "__main__":
    main()
