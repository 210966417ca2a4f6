"""Score the fused top-10 pool of every query with each of the three experts."""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pyarrow as pa
import torch

from paperworks.core.io import ArtifactError, load_safetensors, read_parquet, save_safetensors, write_run_log
from paperworks.core.params import load_section
from paperworks.core.stage import stage_main
from paperworks.person_search.artifacts import FUSION, RERANK, TEXT, check_seed, expert_path, run_dir, read_images, read_items, read_queries, read_text_views
from paperworks.person_search.experts import (
    ClozeExpert, CrossReranker, FacetVerifier, score_cloze, score_cross, score_verify, view_tokens,
)
from paperworks.person_search.params import Params
from paperworks.person_search.towers import images_to_tensor

SLOT_SCHEMA = pa.schema([("query_id", pa.int64()), ("slots", pa.string()), ("missing_facets", pa.string())])


def load_model(model, name: str, seed: int):
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict(load_safetensors(expert_path(name, seed), shapes))
    return model.eval()


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True, help="the training run (one of person_search.seeds)")
    args = ap.parse_args()
    p = load_section("person_search", Params)
    check_seed(p.seeds, args.seed)
    fusion_file = run_dir(FUSION, args.seed) / "rankings.safetensors"
    gallery, queries = read_items("gallery"), read_queries()
    images = read_images("gallery", len(gallery), p.data.height, p.data.width)
    views = read_text_views(len(read_items("train")), len(queries))
    slots = [json.loads(s) for s in read_parquet(TEXT / "query_slots.parquet", SLOT_SCHEMA)["slots"]]
    ranks = load_safetensors(fusion_file)
    pool = ranks["fusion/ids"].numpy()[:, : p.fusion.pool_size]
    if pool.shape != (len(queries), p.fusion.pool_size):
        raise ArtifactError(f"{fusion_file}: fusion pool has shape {pool.shape}")
    if (pool < 0).any():
        raise ArtifactError("fusion pool has fewer than pool_size candidates for some query (branch_topk too small?)")
    h, w = p.data.height, p.data.width
    cross = load_model(CrossReranker(p.experts.width, h, w), "cross", args.seed)
    cloze = load_model(ClozeExpert(p.experts.width, h, w), "cloze", args.seed)
    verify = load_model(FacetVerifier(p.experts.width, h, w), "verify", args.seed)
    tokens, present = view_tokens(views["query_views"], views["embeddings"])
    out = {k: np.zeros(pool.shape, dtype=np.float32) for k in ("cross", "cloze", "verify")}
    seconds = {k: 0.0 for k in out}
    batch = 32
    for b in range(0, len(pool), batch):
        sl = slice(b, b + batch)
        x = images_to_tensor(images[pool[sl].ravel()]).view(-1, pool.shape[1], 3, h, w)
        t0 = time.perf_counter()
        out["cross"][sl] = score_cross(cross, x, tokens[sl], present[sl])
        t1 = time.perf_counter()
        out["cloze"][sl] = score_cloze(cloze, x, slots[sl])
        t2 = time.perf_counter()
        out["verify"][sl] = score_verify(verify, x, views["query_views"][sl], views["embeddings"])
        t3 = time.perf_counter()
        seconds["cross"] += t1 - t0
        seconds["cloze"] += t2 - t1
        seconds["verify"] += t3 - t2
    save_safetensors(run_dir(RERANK, args.seed) / "expert_scores.safetensors", {k: torch.from_numpy(v) for k, v in out.items()} |
                     {"pool": torch.from_numpy(pool.copy())})
    # a machine fact, not an output: a tracked file must be the same bytes on every rerun
    write_run_log(f"person_search_rerank_latency_s{args.seed}", {f"{k}_ms_per_query": 1000 * s / len(pool) for k, s in seconds.items()})


if __name__ == "__main__":
    main()
