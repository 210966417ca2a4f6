"""Stage encoder_fusion_volume (comparison 2): the CT-like volumes (lesions spanning 1–3 slices,
deterministic from the seed) and the share of thin test lesions the sampled slices miss; then every
volume arm × seed trained end to end (same steps, data and head; the same seed per seed index), its
test predictions and dev curves.

One stage rather than two: the volumes take about a second to draw, and a process start plus a DVC
stage cost more than that in the smoke profile (the track's tests are capped at 60 s of CPU). The
volumes are still written, then read back through the checked reader, so a corrupted file fails by name."""
from __future__ import annotations

import collections
import time

import pandas as pd
import pyarrow as pa
import torch

from paperworks.core.io import atomic_path, save_safetensors, write_json, write_parquet, write_run_log
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.encoder_fusion.artifacts import VOLUME_VQA, VOLUMES
from paperworks.encoder_fusion.params import Params
from paperworks.encoder_fusion.volume import build_volumes, read_volumes, run_arm, sampled_slices, thin_missed_share

SCHEMA = pa.schema([("arm", pa.string()), ("seed", pa.int64()), ("key", pa.string()), ("case_id", pa.string()),
                    ("region", pa.string()), ("qtype", pa.string()), ("span", pa.int64()), ("answer", pa.int64()),
                    ("pred", pa.int64()), ("correct", pa.float64())])


def write_volumes(p, seed: int) -> None:
    cases, vols = build_volumes(p, seed)
    share, n_thin = thin_missed_share([c for c in cases if c.split == "test"], p.depth, p.k_slices)
    spans = collections.Counter(x.span for c in cases for x in c.lesions)
    with atomic_path(VOLUMES) as tmp:  # the whole folder appears at once, or not at all
        save_safetensors(tmp / "volumes.safetensors", {"volumes": torch.from_numpy(vols)})
        write_json(tmp / "cases.json", [c.to_record() for c in cases])
        write_json(tmp / "world.json", {"thin_missed_share": share, "n_thin_test_lesions": n_thin,
                                        "sampled_slices": sampled_slices(p.depth, p.k_slices).tolist(),
                                        "lesions_by_span": {str(k): v for k, v in sorted(spans.items())}})
    print(f"{len(cases)} volumes, lesions by span {dict(sorted(spans.items()))}; "
          f"sampled slices miss {share:.3f} of {n_thin} thin test lesions")


@stage_main
def main() -> None:
    p = load_section("encoder_fusion", Params).volume
    seed = global_seed(read_params_file())
    write_volumes(p, seed)
    cases, vols = read_volumes(VOLUMES, p)
    preds, histories, cost = [], {}, {}
    for s in range(p.seeds):
        run_seed = derive_seed(seed, "encoder_fusion", "volume_head", s)
        for arm in p.arms:
            t0 = time.process_time()
            df, hist = run_arm(arm, s, run_seed, cases, vols, p)
            cost[f"{arm}-{s}"] = time.process_time() - t0
            preds.append(df)
            histories[f"{arm}-{s}"] = hist
            sel = next(r for r in hist if r["selected"])
            thin = df[(df["qtype"] == "presence") & (df["span"] == 1)]["correct"]
            print(f"{arm} seed {s}: dev accuracy {hist[0]['dev_accuracy']:.3f} → {sel['dev_accuracy']:.3f} (step {sel['step']}), "
                  f"test {df['correct'].mean():.3f}, thin-lesion recall {thin.mean() if len(thin) else float('nan'):.3f}"
                  + (f", gate {sel['gate_depth']:+.3f}" if "gate_depth" in sel else ""), flush=True)
    with atomic_path(VOLUME_VQA) as tmp:
        write_parquet(tmp / "predictions.parquet", pd.concat(preds, ignore_index=True)[SCHEMA.names], SCHEMA)
        write_json(tmp / "histories.json", histories)
    write_run_log("encoder_fusion_volume", {"runs": len(histories), "process_s_per_run": cost})


if __name__ == "__main__":
    main()
