"""Stage encoder_fusion_reliability (beyond the paper, no retraining): every trained VQA head of
``encoder_fusion_vqa`` answers the dev and test questions from the cached tokens (its temperature and its
abstention threshold fitted on dev) and the test questions again from the tokens of *degraded* test images
(``reliability.degrade``, seeded), re-encoded by the frozen encoders its seed's heads were trained on
(``encoder_fusion_encoders@<seed>``).

Checks before anything is written: every head's clean test predictions must equal the vqa stage's own
(the weights are the ones its predictions came from), and each seed's frozen encoders re-run on the clean
test images must give back that seed's cached tokens (the encoders and the features are from the same run)."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from paperworks.core.io import ArtifactError, atomic_path, write_json, write_parquet, write_run_log
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.encoder_fusion.artifacts import (RELIABILITY, encoder_dir, features_dir, load_model, read_tokens, read_vqa,
                                                 read_world, vqa_head_path, vqa_seed_dir)
from paperworks.encoder_fusion.models import FusionVQA, Specialist, foundation_encoder, predict, token_grid
from paperworks.encoder_fusion.params import MODALITIES, Params
from paperworks.encoder_fusion.pipeline import question_table
from paperworks.encoder_fusion.reliability import abstention_threshold, calibrate, check_tokens_match, confidence, degrade
from paperworks.encoder_fusion.world import coarse_view

SCHEMA = pa.schema([("fusion", pa.string()), ("seed", pa.int64()), ("split", pa.string()), ("key", pa.string()),
                    ("modality", pa.string()), ("small", pa.bool_()), ("answer", pa.int64()), ("pred", pa.int64()),
                    ("correct", pa.float64()), ("confidence_raw", pa.float64()), ("confidence", pa.float64()),
                    ("answered", pa.bool_())])


@stage_main
def main() -> None:
    p = load_section("encoder_fusion", Params)
    r = p.reliability
    seed = global_seed(read_params_file())
    cases, images, _ = read_world()
    _, qdf = question_table(cases)
    vqa_pred, _ = read_vqa(p.head.seeds, p.head.fusions)
    t0 = time.process_time()
    test_rows = np.array([i for i, c in enumerate(cases) if c.split == "test"])
    clean, bad = images[test_rows], degrade(images[test_rows], r.degrade, derive_seed(seed, "encoder_fusion", "degrade"))
    split_q = {s: qdf[qdf["split"] == s] for s in ("dev", "test")}
    rows, info, encode_s = [], {}, 0.0
    for s in p.head.seeds:
        # --- the degraded test images through this seed's frozen encoders
        t1 = time.process_time()
        tokens = read_tokens(features_dir(s))
        models = encoder_dir(s)
        encoders = {"foundation": load_model(models / "foundation.safetensors", foundation_encoder(p.foundation))}
        for m in MODALITIES:
            encoders[m] = load_model(models / f"specialist_{m}.safetensors", Specialist(p.specialist)).encoder
        degraded = {}
        for name, enc in encoders.items():
            view = coarse_view if name == "foundation" else (lambda x: x)
            try:
                check_tokens_match(tokens[name][torch.as_tensor(test_rows)], token_grid(enc, view(clean)), name)
            except ValueError as e:
                raise ArtifactError(f"{models} vs {features_dir(s)}: {e}") from None
            degraded[name] = tokens[name].clone()
            degraded[name][torch.as_tensor(test_rows)] = token_grid(enc, view(bad))
        encode_s += time.process_time() - t1
        # --- every head of this seed: dev (fit T and τ), test clean, test degraded
        qemb = tokens["question_embeddings"]
        grid = int(round(tokens["foundation"].shape[1] ** 0.5))
        dims = {k: tokens[k].shape[2] for k in ("foundation", "xray", "path")}
        enc_clean = {k: tokens[k] for k in ("foundation", "xray", "path")}
        for fusion in p.head.fusions:
            run = f"{fusion}-{s}"
            model = load_model(vqa_head_path(fusion, s), FusionVQA(fusion, dims, qemb.shape[1], grid, p.head))
            out = {}
            for name, (split, toks) in {"dev": ("dev", enc_clean), "test": ("test", enc_clean),
                                        "test_degraded": ("test", degraded)}.items():
                q = split_q[split]
                out[name] = (q, predict(model, toks, qemb, q["row"].to_numpy(), q["qid"].to_numpy()).numpy())
            ref = vqa_pred[(vqa_pred["fusion"] == fusion) & (vqa_pred["seed"] == s)].set_index("key")["pred"]
            q, logits = out["test"]
            mine = pd.Series(logits.argmax(1), index=q["key"].to_numpy())
            if len(ref) != len(mine) or not (ref.reindex(mine.index).to_numpy() == mine.to_numpy()).all():
                raise ArtifactError(f"{vqa_head_path(fusion, s)}: its test predictions differ from "
                                    f"{vqa_seed_dir(s) / 'predictions.parquet'} (weights and predictions are not from the same run)")
            q, logits = out["dev"]
            temp = calibrate(logits, q["answer"].to_numpy())
            dev_conf = confidence(logits, temp)
            tau = abstention_threshold(dev_conf, logits.argmax(1) == q["answer"].to_numpy(), r.coverage)
            info[run] = {"temperature": temp, "threshold": tau}
            for name, (q, logits) in out.items():
                pred = logits.argmax(1)
                conf = confidence(logits, temp)
                rows.append(pd.DataFrame({"fusion": fusion, "seed": s, "split": name, "key": q["key"].to_numpy(),
                                          "modality": q["modality"].to_numpy(), "small": q["small"].to_numpy().astype(bool),
                                          "answer": q["answer"].to_numpy(), "pred": pred,
                                          "correct": (pred == q["answer"].to_numpy()).astype(float),
                                          "confidence_raw": confidence(logits, 1.0), "confidence": conf, "answered": conf >= tau}))
            d = pd.concat(rows[-3:])
            acc = d.groupby("split")["correct"].mean()
            print(f"{run}: T {temp:.3f}, τ {tau:.4f}; test {acc['test']:.3f}, degraded {acc['test_degraded']:.3f}, "
                  f"answered {d[d['split'] == 'test']['answered'].mean():.3f} of test", flush=True)
    change = float(np.abs(bad.astype(float) - clean.astype(float)).mean())
    with atomic_path(RELIABILITY) as tmp:
        write_parquet(tmp / "predictions.parquet", pd.concat(rows, ignore_index=True)[SCHEMA.names], SCHEMA)
        write_json(tmp / "reliability.json", {"runs": info, "coverage_target": r.coverage, "degrade": r.degrade.model_dump(),
                                               "mean_abs_pixel_change": change, "n_test_images": int(len(test_rows))})
    write_run_log("encoder_fusion_reliability", {"encode_s": encode_s, "process_s": time.process_time() - t0})


if __name__ == "__main__":
    main()
