"""Stage encoder_fusion_vqa@<seed>: every fusion of one seed trained on the cached tokens of that seed's encoders (same steps, same data,
the same seed → the same shared initialisation), test predictions, dev curves and each run's weights at its
checkpoint in use (``seed_<seed>/heads/<fusion>-<seed>.safetensors``: the reliability stage evaluates them without
retraining). One stage per seed, so the seeds train in parallel lanes and a new seed trains alone."""
from __future__ import annotations

import time

import pandas as pd

from paperworks.core.io import atomic_path, write_json, write_parquet, write_run_log
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.encoder_fusion.artifacts import (VQA_PREDICTION_SCHEMA, features_dir, read_tokens, read_world, save_model,
                                                 vqa_head_path, vqa_seed_dir)
from paperworks.encoder_fusion.params import Params, stage_seed
from paperworks.encoder_fusion.pipeline import question_table, run_fusion


@stage_main
def main() -> None:
    p = load_section("encoder_fusion", Params)
    s = stage_seed(p)
    seed = global_seed(read_params_file())
    cases, _, _ = read_world()
    tokens = read_tokens(features_dir(s))  # this seed's own frozen encoders
    _, qdf = question_table(cases)
    preds, histories, cost, models = [], {}, {}, {}
    run_seed = derive_seed(seed, "encoder_fusion", "head", s)
    for fusion in p.head.fusions:
        t0 = time.process_time()
        df, hist, models[fusion] = run_fusion(fusion, s, run_seed, tokens, qdf, p.head)
        cost[f"{fusion}-{s}"] = time.process_time() - t0
        preds.append(df)
        histories[f"{fusion}-{s}"] = hist
        sel = next(r for r in hist if r["selected"])
        print(f"{fusion} seed {s}: dev accuracy {hist[0]['dev_accuracy']:.3f} → {sel['dev_accuracy']:.3f} (step {sel['step']}), "
              f"test {df['correct'].mean():.3f}" + "".join(f", {k} {v:+.3f}" for k, v in sel.items() if k.startswith("gate")))
    out = vqa_seed_dir(s)
    with atomic_path(out) as tmp:
        write_parquet(tmp / "predictions.parquet", pd.concat(preds, ignore_index=True), VQA_PREDICTION_SCHEMA)
        write_json(tmp / "histories.json", histories)
        (tmp / "heads").mkdir(parents=True)
        for fusion, model in models.items():
            save_model(tmp / "heads" / vqa_head_path(fusion, s).name, model)
    write_run_log(f"encoder_fusion_vqa_{s}", {"runs": len(histories), "process_s_per_run": cost})


if __name__ == "__main__":
    main()
