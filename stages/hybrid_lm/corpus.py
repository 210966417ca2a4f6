"""Stage hybrid_lm_corpus: training, held-out and evaluation sets (safetensors) + meta.json."""
from __future__ import annotations

import numpy as np

from paperworks.core.io import save_safetensors, write_json
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.hybrid_lm import DATA
from paperworks.hybrid_lm import corpus as C
from paperworks.hybrid_lm.params import Params


@stage_main
def main() -> None:
    p = load_section("hybrid_lm", Params)
    seed = global_seed(read_params_file())
    cp = p.corpus
    rng = {split: np.random.default_rng(derive_seed(seed, "hybrid_lm", "corpus", split)) for split in ("train", "heldout", "eval")}
    train = C.mixture(rng["train"], cp, cp.n_train)
    heldout = C.mixture(rng["heldout"], cp, cp.n_heldout)
    evals = C.eval_sets(rng["eval"], cp)
    import torch

    out = DATA / "corpus"
    for name, d in (("train", train), ("heldout", heldout)):
        save_safetensors(out / f"{name}.safetensors", {k: torch.as_tensor(v) for k, v in d.items()})
    save_safetensors(out / "eval.safetensors", {f"{s}.{k}": torch.as_tensor(v) for s, d in evals.items() for k, v in d.items()})
    vocab = C.Vocab(cp.n_keys, cp.n_values)
    write_json(out / "meta.json", {
        "vocab_size": vocab.size, "context": cp.context, "eval_sets": sorted(evals),
        "train_sequences": int(len(train["tokens"])), "heldout_sequences": int(len(heldout["tokens"])),
        "heldout_duplicates_of_train": C.duplicate_rows(train["tokens"], heldout["tokens"]),
        "train_task_counts": {t: int((train["task"] == i).sum()) for i, t in enumerate(C.TASKS)},
        "predicted_tokens_per_kind": {C.KIND_NAMES[k]: int((train["kind"] == k).sum()) for k in C.KIND_NAMES},
    })
    print(f"corpus: {len(train['tokens'])} train, {len(heldout['tokens'])} held-out, {len(evals)} eval sets, vocab {vocab.size}")


if __name__ == "__main__":
    main()
