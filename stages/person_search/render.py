"""Render the synthetic corpus: sim training families, the real-domain gallery, the queries."""
from __future__ import annotations

import torch

from paperworks.core.io import save_safetensors, write_json, write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.person_search.artifacts import CORPUS
from paperworks.person_search.data import ITEM_SCHEMA, QUERY_SCHEMA, CorpusConfig, edit_shares, make_corpus, train_twin_share
from paperworks.person_search.params import Params


@stage_main
def main() -> None:
    p = load_section("person_search", Params)
    d = p.data
    seed = derive_seed(global_seed(read_params_file()), "person_search", "render")
    cfg = CorpusConfig(d.n_train_families, d.family_size, d.n_targets, d.distractor_ratio, d.val_fraction,
                       d.drop_scene_prob, d.width, d.height, dict(d.edit_weights), d.blind_twin_share,
                       d.train_blind_twin_share, d.coarse_target_share)
    corpus = make_corpus(cfg, seed)
    write_parquet(CORPUS / "train.parquet", corpus["train"], ITEM_SCHEMA)
    write_parquet(CORPUS / "gallery.parquet", corpus["gallery"], ITEM_SCHEMA)
    write_parquet(CORPUS / "queries.parquet", corpus["queries"], QUERY_SCHEMA)
    save_safetensors(CORPUS / "train_images.safetensors", {"images": torch.from_numpy(corpus["train_images"])}, {"domain": "sim"})
    save_safetensors(CORPUS / "gallery_images.safetensors", {"images": torch.from_numpy(corpus["gallery_images"])}, {"domain": "real"})
    g = corpus["gallery"]
    write_json(CORPUS / "summary.json", {
        "n_train": len(corpus["train"]), "n_gallery": len(g), "n_targets": int(g["is_target"].sum()),
        "n_distractors": int((~g["is_target"]).sum()), "n_queries": len(corpus["queries"]),
        "n_val_queries": int((corpus["queries"]["split"] == "val").sum()),
        "edit_weights": dict(d.edit_weights), "blind_twin_share_declared": d.blind_twin_share,
        "coarse_target_share_declared": d.coarse_target_share,
        "train_blind_twin_share": d.blind_twin_share if d.train_blind_twin_share is None else d.train_blind_twin_share,
        "share_train_families_with_blind_twin": train_twin_share(corpus["train"]), **edit_shares(g),
    })


if __name__ == "__main__":
    main()
