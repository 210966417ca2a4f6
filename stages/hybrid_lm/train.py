"""Stage hybrid_lm_train@{variant}-{seed}: train one variant with one seed, then probe it
(held-out loss per sequence, recall per query at every evaluation context, expert loads,
residual-stream RMS). ``python -m stages.hybrid_lm.train --variant hybrid --seed 0``"""
from __future__ import annotations

import argparse

from paperworks.core.io import ArtifactError, load_safetensors, read_json, write_json
from paperworks.core.lm.hybrid import save_hybrid_checkpoint
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.hybrid_lm import DATA, MODELS, PLOTS, probe
from paperworks.hybrid_lm.params import Params, run_name
from paperworks.hybrid_lm.train import train_run


def load_split(name: str) -> dict:
    t = load_safetensors(DATA / "corpus" / f"{name}.safetensors")
    return {k: v.numpy() for k, v in t.items()}


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", required=True)
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    p = load_section("hybrid_lm", Params)
    if args.variant not in p.grid.variants or args.seed not in p.grid.seeds:
        raise ParamsError(f"hybrid_lm.grid: run {args.variant!r} seed {args.seed} is not in the grid "
                          f"(variants {p.grid.variants}, seeds {p.grid.seeds})")
    cfg = p.model_config_for(args.variant)
    meta = read_json(DATA / "corpus" / "meta.json")
    if meta["vocab_size"] != cfg.vocab_size or meta["context"] != p.corpus.context:
        raise ArtifactError(f"{DATA / 'corpus/meta.json'}: corpus (vocab {meta['vocab_size']}, context {meta['context']}) "
                            f"does not match params (vocab {cfg.vocab_size}, context {p.corpus.context}); rerun hybrid_lm_corpus")
    train, heldout = load_split("train"), load_split("heldout")
    evals_raw = load_split("eval")
    evals = {s: {"tokens": evals_raw[f"{s}.tokens"], "kind": evals_raw[f"{s}.kind"]} for s in meta["eval_sets"]}

    name = run_name(args.variant, args.seed)
    # the seed of a run is shared by every variant: paired runs start from the same stream. Seeding is
    # explicit (torch.manual_seed in build_hybrid_lm, a numpy Generator for batches); CPU kernels are
    # deterministic, and core.seeding.seed_everything's use_deterministic_algorithms costs ~2.7 s of imports.
    seed = derive_seed(global_seed(read_params_file()), "hybrid_lm", "train", args.seed)
    model, record = train_run(cfg, p.train, train, seed, live_dir=PLOTS / f"live_{name}", desc=name)

    record["variant"], record["seed"], record["config"] = args.variant, args.seed, cfg.model_dump()
    record["heldout_loss"] = probe.sequence_losses(model, heldout["tokens"], heldout["kind"]).tolist()
    record["heldout_task"] = heldout["task"].tolist()
    record["recall"] = {}
    for s, d in evals.items():
        hits = probe.query_hits(model, d["tokens"], d["kind"])
        record["recall"][s] = {k: [h[k] for h in hits] for k in ("seq", "pos", "kind", "hit")}
    record["probe"] = probe.routing_and_norms(model, heldout["tokens"])
    save_hybrid_checkpoint(model, MODELS / f"{name}.safetensors", extra={"seed": args.seed})
    write_json(DATA / "runs" / f"{name}.json", record)
    print(f"{name}: final train loss {record['history'][-1]['loss']:.4f}, held-out loss "
          f"{sum(record['heldout_loss']) / len(record['heldout_loss']):.4f}, {record['cost']['cpu_s']:.1f} CPU s")


if __name__ == "__main__":
    main()
