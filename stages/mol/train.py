"""Stage mol_train@<seed>: on the frozen base, four LoRA specialists (one per capability), one LoRA on
the mixture (4 × rank, 4 × steps: the same trainable parameters and total steps) and multi-task full
fine-tuning (4 × steps); the specialists and the single LoRA are saved (the single LoRA is v0 of
``mol_versions_monolith``); every model (and the base) answers the test suites and every turn of the
test conversations; each answer is checked by its capability's external verifier."""
from __future__ import annotations

import argparse
import time
from typing import Callable

from paperworks.core.io import write_json, write_run_log
from paperworks.core.lm import load_checkpoint, load_tokenizer
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.mol import world as W
from paperworks.mol.artifacts import BASE, WORLD, read_world, seed_dir, single_lora_file
from paperworks.mol.models import freeze, save_adapter, full_ft_model, generate, lora_model, train_on, trainable_parameters
from paperworks.mol.params import Params


def answer_suite(model, tok, arm: str, caps, world: dict, max_new_tokens: int) -> list[dict]:
    """Greedy answers of ``model`` on the test suites of ``caps``, verified."""
    rows = []
    for cap in caps:
        items = world["test"][cap]
        outs = generate(model, tok, [x["prompt"] for x in items], max_new_tokens)
        for i, (x, out) in enumerate(zip(items, outs)):
            rows.append({"arm": arm, "capability": cap, "item": i, "output": out, "format": W.output_format(out),
                         "weak_cue": x["cue"] in W.WEAK_CUES.values(),
                         "success": bool(W.verify(cap, W.request_from_dict(x), out, world["tables"]))})
    return rows


def answer_turns(model, tok, adapter: str, world: dict, max_new_tokens: int) -> list[dict]:
    """``model`` answers every test-conversation turn; verified against the turn's TRUE capability."""
    turns = world["test_conversations"]
    outs = generate(model, tok, [x["prompt"] for x in turns], max_new_tokens)
    return [{"adapter": adapter, "conversation": x["conversation"], "turn": x["turn"], "capability": x["capability"],
             "success": bool(W.verify(x["capability"], W.request_from_dict(x), out, world["tables"]))}
            for x, out in zip(turns, outs)]


def verified_share(items: list[dict], tables) -> Callable[[list[str]], float]:
    """answers → share verified by each item's own capability verifier (the dev-success curve)."""
    def share(outputs: list[str]) -> float:
        return sum(W.verify(x["capability"], W.request_from_dict(x), o, tables) for x, o in zip(items, outputs)) / len(items)
    return share


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    p = load_section("mol", Params)
    a = p.adapters
    if args.seed not in a.seeds:
        raise ValueError(f"--seed {args.seed} is not in mol.adapters.seeds {a.seeds}")
    g = global_seed(read_params_file())
    seed_everything(derive_seed(g, "mol", "train", args.seed))
    world = read_world()
    tok = load_tokenizer(WORLD / "tokenizer.json")
    base, cfg, _ = load_checkpoint(BASE)
    freeze(base)
    ctx, mnt = cfg.max_positions, a.max_new_tokens
    out = seed_dir(args.seed)
    suite, turns, histories, trainable, cpu = [], [], {}, {}, {}

    for cap in W.CAPABILITIES:  # the specialists: one LoRA each, trained on its own capability only
        t0 = time.process_time()
        model = lora_model(base, a.rank, a.alpha_over_rank, derive_seed(g, "mol", "lora", cap, args.seed))
        trainable[f"specialist_{cap}"] = trainable_parameters(model)
        histories[f"specialist_{cap}"] = train_on(model, tok, world["train"][cap], world["dev"][cap], a.steps, a.lr, a, ctx,
                                                  derive_seed(g, "mol", "order", cap, args.seed), a.eval_every, None, f"lora {cap}",
                                                  verified_share(world["dev"][cap], world["tables"]))
        cpu[f"specialist_{cap}"] = time.process_time() - t0
        suite += answer_suite(model, tok, "specialists", [cap], world, mnt)  # oracle routing: its own suite
        turns += answer_turns(model, tok, cap, world, mnt)
        save_adapter(model, out / "adapters" / f"{cap}.safetensors", a.rank, a.alpha_over_rank * a.rank)
        del model

    mixture = [x for cap in W.CAPABILITIES for x in world["train"][cap]]
    mixture_dev = [x for cap in W.CAPABILITIES for x in world["dev"][cap]]
    n = len(W.CAPABILITIES)
    baselines = {"single_lora": (lambda: lora_model(base, n * a.rank, a.alpha_over_rank, derive_seed(g, "mol", "lora", "mixture", args.seed)), a.single_lora_lr)}
    if a.full_ft:
        baselines["full_ft"] = (lambda: full_ft_model(base, derive_seed(g, "mol", "full_ft", args.seed)), a.full_ft_lr)
    for arm, (make, lr) in baselines.items():
        t0 = time.process_time()
        model = make()
        trainable[arm] = trainable_parameters(model)
        histories[arm] = train_on(model, tok, mixture, mixture_dev, n * a.steps, lr, a, ctx,
                                  derive_seed(g, "mol", "order", arm, args.seed), n * a.eval_every, None, arm,
                                  verified_share(mixture_dev, world["tables"]))
        cpu[arm] = time.process_time() - t0
        suite += answer_suite(model, tok, arm, W.CAPABILITIES, world, mnt)
        turns += answer_turns(model, tok, arm, world, mnt)
        if arm == "single_lora":  # v0 of the versioned loop on one monolithic model (mol_versions_monolith)
            save_adapter(model, single_lora_file(args.seed), n * a.rank, a.alpha_over_rank * n * a.rank)
        del model
    suite += answer_suite(base, tok, "base", W.CAPABILITIES, world, mnt)

    write_json(out / "results.json", {"seed": args.seed, "suite": suite, "turns": turns, "histories": histories,
                                      "trainable": trainable})  # CPU seconds: the run log only (same bytes on a rerun)
    write_run_log(f"mol_train_{args.seed}", {"cpu_s": cpu})
    for arm in ("specialists", *baselines, "base"):
        rows = [r for r in suite if r["arm"] == arm]
        print(f"seed {args.seed} {arm}: success {sum(r['success'] for r in rows) / len(rows):.3f} ({len(rows)} items)")


if __name__ == "__main__":
    main()
