"""Stage-1 fusion: anchor-constrained, percentile-normalised, agreement-boosted; ablations and baselines."""
from __future__ import annotations

import argparse

import numpy as np
import torch

from paperworks.core.io import ArtifactError, load_safetensors, save_safetensors
from paperworks.core.params import load_section
from paperworks.core.stage import stage_main
from paperworks.person_search.artifacts import FUSION, RETRIEVAL, check_seed, read_items, read_queries, run_dir
from paperworks.person_search.fusion import FusionConfig, ablations, fuse_all, single_branch, view_alone
from paperworks.person_search.params import Params
from paperworks.person_search.retrieval import Stage1
from paperworks.person_search.text import VIEWS

DEPTH = 10  # rankings are evaluated at mAP@10 / R@10


def fusion_config(p: Params) -> FusionConfig:
    f = p.fusion
    return FusionConfig(tuple(f.view_weights[v] for v in VIEWS), tuple(f.anchor_views), True, "percentile",
                        tuple(f.percentiles), f.clip, f.agreement_weight, f.rrf_k, p.retrieval.branch_topk)


def read_branches(p: Params, n_gallery: int, n_queries: int, seed: int) -> dict[str, np.ndarray]:
    path = run_dir(RETRIEVAL, seed) / "branches.safetensors"
    raw = {k: v.numpy() for k, v in load_safetensors(path).items()}
    n_m, n_v, d = len(p.encoder.backbones), len(VIEWS), p.encoder.embed_dim
    k = min(p.retrieval.branch_topk, n_gallery)
    expected = {"present": (n_queries, n_v), "topk_ids": (n_m, n_v, n_queries, k), "topk_scores": (n_m, n_v, n_queries, k)}
    for bb in p.encoder.backbones:
        expected[f"{bb}/gallery"] = (n_gallery, d)
        expected[f"{bb}/query_views"] = (n_queries, n_v, d)
    problems = [f"{name}: {raw[name].shape if name in raw else 'missing'} != {shape}"
                for name, shape in expected.items() if name not in raw or raw[name].shape != shape]
    if problems:
        raise ArtifactError(f"{path}: does not match params ({'; '.join(problems)})")
    if raw["topk_ids"].max() >= n_gallery:
        raise ArtifactError(f"{path}: candidate ids exceed the gallery size {n_gallery}")
    return raw


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True, help="the training run (one of person_search.seeds)")
    args = ap.parse_args()
    p = load_section("person_search", Params)
    check_seed(p.seeds, args.seed)
    n_gallery, n_queries = len(read_items("gallery")), len(read_queries())
    br = read_branches(p, n_gallery, n_queries, args.seed)
    gallery = [br[f"{bb}/gallery"] for bb in p.encoder.backbones]
    qviews = [br[f"{bb}/query_views"] for bb in p.encoder.backbones]
    out: dict[str, torch.Tensor] = {}
    depth = max(DEPTH, p.fusion.pool_size)
    cfg = fusion_config(p)
    # The method: its own stage 1 (anchor branches searched over the gallery, facets scored on the pool).
    ids, scores = Stage1(gallery, cfg, p.retrieval.branch_topk, p.retrieval.engine).rank(qviews, br["present"], depth)
    out["fusion/ids"], out["fusion/scores"] = torch.from_numpy(ids), torch.from_numpy(scores)
    for name, abl in ablations(cfg).items():  # ablations from the index stage's lists (no-anchor needs every branch's)
        if name != "fusion":
            ids, scores = fuse_all(br["topk_ids"], gallery, qviews, br["present"], abl, depth)
            out[f"{name}/ids"], out[f"{name}/scores"] = torch.from_numpy(ids), torch.from_numpy(scores)
    for m, bb in enumerate(p.encoder.backbones):  # each branch alone (backbone × view): sim-trained, no fusion
        out[f"backbone_{bb}/ids"] = torch.from_numpy(single_branch(br["topk_ids"], m, 0, DEPTH))
        for v, view in enumerate(VIEWS):
            out[f"branch_{bb}_{view}/ids"] = torch.from_numpy(single_branch(br["topk_ids"], m, v, DEPTH))
    for v, view in enumerate(VIEWS):  # each view alone, over all backbones
        out[f"view_{view}/ids"] = torch.from_numpy(view_alone(br["topk_ids"], gallery, qviews, br["present"], v, DEPTH))
    save_safetensors(run_dir(FUSION, args.seed) / "rankings.safetensors", out, {"pool_size": str(p.fusion.pool_size)})


if __name__ == "__main__":
    main()
