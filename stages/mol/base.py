"""Stage mol_base: pre-train the base LM on the generic world corpus (no capability formatting)."""
from __future__ import annotations

import time

from paperworks.core.io import write_json, write_run_log
from paperworks.core.lm import build_model, load_tokenizer, save_checkpoint
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.mol.artifacts import BASE, BASE_HISTORY, PLOTS, WORLD, read_world
from paperworks.mol.models import pretrain_base
from paperworks.mol.params import Params


@stage_main
def main() -> None:
    p = load_section("mol", Params)
    seed = derive_seed(global_seed(read_params_file()), "mol", "base")
    seed_everything(seed)
    world = read_world()
    tok = load_tokenizer(WORLD / "tokenizer.json")
    model = build_model(p.base.model, len(tok), seed=seed)
    t0 = time.process_time()
    history = pretrain_base(model, tok, world["corpus_train"], world["corpus_dev"], p.base, seed, PLOTS / "live_base")
    save_checkpoint(model, BASE, p.base.model, len(tok))
    write_json(BASE_HISTORY, history)
    write_run_log("mol_base", {"cpu_s": time.process_time() - t0, "steps": p.base.steps})
    print(f"base: dev loss {history[0]['dev_loss']:.3f} → {history[-1]['dev_loss']:.3f}")


if __name__ == "__main__":
    main()
