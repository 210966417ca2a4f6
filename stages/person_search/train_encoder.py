"""Train one dual encoder (``--backbone cnn|resnet|vit --seed S``) contrastively on sim pairs only, to a held-out plateau."""
from __future__ import annotations

import argparse

import numpy as np
from dvclive import Live

from paperworks.core.io import save_safetensors
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.person_search.artifacts import check_seed, encoder_path, live_dir, read_images, read_items, read_queries, read_text_views
from paperworks.person_search.data import attribute_keys
from paperworks.person_search.params import Params
from paperworks.person_search.text import VIEWS
from paperworks.person_search.towers import EncoderConfig, train_dual_encoder


def encoder_config(p: Params, backbone: str) -> EncoderConfig:
    e = p.encoder
    st = e.stopping
    return EncoderConfig(backbone=backbone, embed_dim=e.embed_dim, epochs=e.epochs_of(backbone),
                         families_per_batch=e.families_per_batch, lr=e.lr, weight_decay=e.weight_decay,
                         temperature=e.temperature, full_view_prob=e.full_view_prob,
                         structured_view_prob=e.structured_view_prob, augment=e.augment, patience=st.patience,
                         min_rel_delta=st.min_rel_delta, evals_per_epoch=st.evals_per_epoch,
                         holdout_fraction=st.holdout_fraction, plateau_tail=st.plateau_tail,
                         plateau_rel_tol=st.plateau_rel_tol, min_evals=st.min_evals,
                         schedule=e.schedule_of(backbone), warmup_epochs=e.warmup_epochs, lr_decay=e.lr_decay,
                         lr_decays=e.lr_decays)


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backbone", required=True)
    ap.add_argument("--seed", type=int, required=True, help="the training run (one of person_search.seeds)")
    args = ap.parse_args()
    p = load_section("person_search", Params)
    if args.backbone not in p.encoder.backbones:
        raise ParamsError(f"person_search.encoder.backbones: '{args.backbone}' is not listed (have {p.encoder.backbones})")
    check_seed(p.seeds, args.seed)
    seed = derive_seed(global_seed(read_params_file()), "person_search", "train_encoder", args.backbone, args.seed)
    seed_everything(seed)
    train = read_items("train")
    images = read_images("train", len(train), p.data.height, p.data.width)
    views = read_text_views(len(train), len(read_queries()))
    keys = attribute_keys(train)
    view_keys = np.stack([keys[v] for v in VIEWS], axis=1)
    with Live(str(live_dir("encoder", args.backbone, args.seed)), dvcyaml=False, save_dvc_exp=False, report=None) as live:
        model = train_dual_encoder(encoder_config(p, args.backbone), images, train["family"].to_numpy(),
                                   views["train_views"], view_keys, views["embeddings"], seed, live)
    save_safetensors(encoder_path(args.backbone, args.seed), model.state_dict(),
                     {"backbone": args.backbone, "embed_dim": str(p.encoder.embed_dim)})


if __name__ == "__main__":
    main()
