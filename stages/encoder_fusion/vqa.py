"""Stage encoder_fusion_vqa: every fusion × seed trained on the cached tokens (same steps, same data,
the same seed → the same shared initialisation), test predictions, dev curves and each run's weights at its
checkpoint in use (``heads/<fusion>-<seed>.safetensors``: the reliability stage evaluates them without retraining)."""
from __future__ import annotations

import time

import pandas as pd
import pyarrow as pa

from paperworks.core.io import atomic_path, write_json, write_parquet, write_run_log
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.encoder_fusion.artifacts import FEATURES, VQA, read_tokens, read_world, save_model
from paperworks.encoder_fusion.params import Params
from paperworks.encoder_fusion.pipeline import question_table, run_fusion

PREDICTION_SCHEMA = pa.schema([("fusion", pa.string()), ("seed", pa.int64()), ("key", pa.string()), ("case_id", pa.string()),
                               ("modality", pa.string()), ("qtype", pa.string()), ("region", pa.string()), ("small", pa.bool_()),
                               ("answer", pa.int64()), ("pred", pa.int64()), ("correct", pa.float64()), ("pred_text", pa.string())])


@stage_main
def main() -> None:
    p = load_section("encoder_fusion", Params)
    seed = global_seed(read_params_file())
    cases, _, _ = read_world()
    tokens = read_tokens(FEATURES)
    _, qdf = question_table(cases)
    preds, histories, cost, models = [], {}, {}, {}
    for s in range(p.head.seeds):
        run_seed = derive_seed(seed, "encoder_fusion", "head", s)
        for fusion in p.head.fusions:
            t0 = time.process_time()
            df, hist, models[f"{fusion}-{s}"] = run_fusion(fusion, s, run_seed, tokens, qdf, p.head)
            cost[f"{fusion}-{s}"] = time.process_time() - t0
            preds.append(df)
            histories[f"{fusion}-{s}"] = hist
            sel = next(r for r in hist if r["selected"])
            print(f"{fusion} seed {s}: dev accuracy {hist[0]['dev_accuracy']:.3f} → {sel['dev_accuracy']:.3f} (step {sel['step']}), "
                  f"test {df['correct'].mean():.3f}" + "".join(f", {k} {v:+.3f}" for k, v in sel.items() if k.startswith("gate")))
    with atomic_path(VQA) as tmp:
        write_parquet(tmp / "predictions.parquet", pd.concat(preds, ignore_index=True), PREDICTION_SCHEMA)
        write_json(tmp / "histories.json", histories)
        (tmp / "heads").mkdir(parents=True)
        for run, model in models.items():
            save_model(tmp / "heads" / f"{run}.safetensors", model)
    write_run_log("encoder_fusion_vqa", {"runs": len(histories), "process_s_per_run": cost})


if __name__ == "__main__":
    main()
