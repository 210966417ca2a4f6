"""Encode the real gallery and the query views with every backbone; search each branch's top-K."""
from __future__ import annotations

import argparse

import numpy as np
import torch

from paperworks.core.io import load_safetensors, save_safetensors, write_json
from paperworks.core.params import load_section
from paperworks.core.stage import stage_main
from paperworks.person_search.artifacts import RETRIEVAL, check_seed, encoder_path, read_images, run_dir, read_items, read_queries, read_text_views
from paperworks.person_search.params import Params
from paperworks.person_search.retrieval import FlatIndex, search_branches
from paperworks.person_search.towers import DualEncoder, embed_images, embed_texts


def load_encoder(backbone: str, p: Params, seed: int) -> DualEncoder:
    model = DualEncoder(backbone, p.encoder.embed_dim, p.data.height, p.data.width)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict(load_safetensors(encoder_path(backbone, seed), shapes))
    return model.eval()


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True, help="the training run (one of person_search.seeds)")
    args = ap.parse_args()
    p = load_section("person_search", Params)
    check_seed(p.seeds, args.seed)
    out_dir = run_dir(RETRIEVAL, args.seed)
    gallery, queries = read_items("gallery"), read_queries()
    images = read_images("gallery", len(gallery), p.data.height, p.data.width)
    views = read_text_views(len(read_items("train")), len(queries))
    qv = views["query_views"]
    present = qv >= 0
    out: dict[str, torch.Tensor] = {"present": torch.from_numpy(present)}
    all_scores, all_ids = [], []
    for bb in p.encoder.backbones:
        model = load_encoder(bb, p, args.seed)
        g = embed_images(model, images)
        t = embed_texts(model, views["embeddings"])
        q = np.where(present[..., None], t[np.maximum(qv, 0)], 0.0).astype(np.float32)  # [Q, 6, D]
        scores, ids = search_branches(FlatIndex(g, p.retrieval.engine), q, present, p.retrieval.branch_topk)
        out[f"{bb}/gallery"], out[f"{bb}/query_views"] = torch.from_numpy(g), torch.from_numpy(q)
        all_scores.append(scores)
        all_ids.append(ids)
    out["topk_scores"] = torch.from_numpy(np.stack(all_scores))  # [B, 6, Q, K]
    out["topk_ids"] = torch.from_numpy(np.stack(all_ids))
    save_safetensors(out_dir / "branches.safetensors", out, {"backbones": ",".join(p.encoder.backbones)})
    write_json(out_dir / "index_info.json", {"engine": p.retrieval.engine, "gallery": len(gallery),
                                                "branches": len(p.encoder.backbones) * qv.shape[1]})


if __name__ == "__main__":
    main()
