"""Train the three stage-2 experts (cross-modal reranker, cloze, facet verifier) on sim data."""
from __future__ import annotations

import argparse

from dvclive import Live

from paperworks.core.io import save_safetensors
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.person_search.artifacts import check_seed, expert_path, live_dir, read_images, read_items, read_queries, read_text_views
from paperworks.person_search.data import attribute_keys
from paperworks.person_search.experts import ExpertConfig, train_cloze, train_cross, train_verifier
from paperworks.person_search.params import Params


def expert_config(p: Params) -> ExpertConfig:
    e = p.experts
    st = e.stopping
    return ExpertConfig(e.epochs, e.families_per_batch, e.lr, e.width, st.patience, st.min_rel_delta,
                        st.evals_per_epoch, st.holdout_fraction, st.plateau_tail, st.plateau_rel_tol, st.min_evals)


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True, help="the training run (one of person_search.seeds)")
    args = ap.parse_args()
    p = load_section("person_search", Params)
    check_seed(p.seeds, args.seed)
    gseed = global_seed(read_params_file())
    train = read_items("train")
    images = read_images("train", len(train), p.data.height, p.data.width)
    views = read_text_views(len(train), len(read_queries()))
    families = train["family"].to_numpy()
    cfg = expert_config(p)
    models = {}
    for name in ("cross", "cloze", "verify"):
        seed = derive_seed(gseed, "person_search", "train_experts", name, args.seed)
        seed_everything(seed)
        with Live(str(live_dir("expert", name, args.seed)), dvcyaml=False, save_dvc_exp=False, report=None) as live:
            if name == "cross":
                models[name] = train_cross(cfg, images, families, views["train_views"], views["embeddings"], seed, live)
            elif name == "cloze":
                models[name] = train_cloze(cfg, images, train, seed, live)
            else:
                models[name] = train_verifier(cfg, images, families, views["train_views"], attribute_keys(train),
                                              views["embeddings"], seed, live)
    for name, model in models.items():
        save_safetensors(expert_path(name, args.seed), model.state_dict(), {"expert": name})


if __name__ == "__main__":
    main()
