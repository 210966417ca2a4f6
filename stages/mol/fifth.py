"""Stage mol_fifth: add a fifth specialist (sql) to the four of ``mol.versions.seed`` without touching them.

The four trained adapters are loaded as named adapters of one peft model on the frozen base; a fifth adapter is added
and trained alone with the specialists' recipe (``mol.adapters``: rank, steps, lr, batch) on the new capability's data
(built here at the world's sizes, disjoint from every suite). Then:

- each of the four is read back out of that model and saved: the file must be byte-identical (sha256) to the one
  ``mol_train`` wrote, and the file on disk must still hash the same;
- each of the four answers its own acceptance suite again through the five-adapter model: the per-item verified
  results must equal the ones ``mol_train`` recorded;
- the new specialist answers its own suite, and the base answers it too: the specialist precondition
  (≥ ``claims.min_own_success`` and ≥ ``claims.min_gain_over_base`` above the base), and its dev-success plateau;
- the headline router (``mol.router.headline``, learned routers only) is refitted on five routes.

Outputs: ``data/mol/fifth`` (the five adapters as served together, the new capability's data, every answer) and
``metrics/mol_fifth.json`` (scalars: checks, preconditions, summary).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from paperworks.core.claims import convergence, load_evidence, precondition
from paperworks.core.io import ArtifactError, load_safetensors, save_safetensors, write_json, write_run_log
from paperworks.core.lm import load_checkpoint, load_tokenizer
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.mol import fifth as F
from paperworks.mol import world as W
from paperworks.mol.artifacts import BASE, DATA, WORLD, read_seed_results, read_world, seed_dir
from paperworks.mol.models import LORA_TARGETS, freeze, generate, train_on, trainable_parameters
from paperworks.mol.params import Params
from paperworks.mol.router import fit_router, route_conversations, turn_text
from paperworks.mol.versions import sha256_file

OUT = DATA / "fifth"
METRICS = Path("metrics/mol_fifth.json")
ROUTES = (*W.CAPABILITIES, F.CAPABILITY)


def answers(model, tok, items: list[dict], tables, max_new_tokens: int) -> list[dict]:
    outs = generate(model, tok, [x["prompt"] for x in items], max_new_tokens)
    return [{"item": i, "output": o, "success": bool(F.verify(x["capability"], W.request_from_dict(x), o, tables))}
            for i, (x, o) in enumerate(zip(items, outs))]


@stage_main
def main() -> None:
    p = load_section("mol", Params)
    a, seed = p.adapters, p.versions.seed
    if p.router.headline == "rules":
        raise ValueError("mol.router.headline='rules': the keyword rules know only the four capabilities; "
                         "mol_fifth refits a learned router (tfidf_lr or minilm_lr) on five routes")
    g = global_seed(read_params_file())
    seed_everything(derive_seed(g, "mol", "fifth"))
    ev = load_evidence()
    world = read_world()
    tables = world["tables"]
    tok = load_tokenizer(WORLD / "tokenizer.json")
    base, cfg, _ = load_checkpoint(BASE)
    freeze(base)
    data = F.build_data(world, p.world, lambda *parts: np.random.default_rng(derive_seed(g, "mol", "fifth", "data", *parts)))
    unknown = [x["prompt"] + x["target"] for s in data.values() for x in s if tok.unk_token_id in tok(x["prompt"] + x["target"])["input_ids"]]
    if unknown:
        raise ValueError(f"tokenizer: {len(unknown)} {F.CAPABILITY} items hold characters the corpus lacks, e.g. {unknown[0]!r}")

    src = {cap: seed_dir(seed) / "adapters" / f"{cap}.safetensors" for cap in W.CAPABILITIES}
    before = {cap: sha256_file(f) for cap, f in src.items()}
    served = {cap: load_safetensors(f) for cap, f in src.items()}
    recorded = read_seed_results(seed)["suite"]
    t0 = time.process_time()
    model = F.deployment(base, a.rank, a.alpha_over_rank, served, derive_seed(g, "mol", "fifth", "deployment"))
    F.add_specialist(model, F.CAPABILITY, a.rank, a.alpha_over_rank, derive_seed(g, "mol", "lora", F.CAPABILITY, seed))
    trainable = trainable_parameters(model)

    def dev_success(outputs: list[str]) -> float:
        return float(np.mean([F.verify_sql(W.request_from_dict(x), o, tables) for x, o in zip(data["dev"], outputs)]))

    history = train_on(model, tok, data["train"], data["dev"], a.steps, a.lr, a, cfg.max_positions,
                       derive_seed(g, "mol", "order", F.CAPABILITY, seed), a.eval_every, None, f"lora {F.CAPABILITY}", dev_success)
    train_cpu = time.process_time() - t0
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)

    meta = {"rank": str(a.rank), "alpha": str(a.alpha_over_rank * a.rank), "targets": ",".join(LORA_TARGETS)}
    for name in ROUTES:  # the five adapters as one deployment serves them; the four re-read out of the trained model
        save_safetensors(OUT / "adapters" / f"{name}.safetensors", F.adapter_tensors(model, name), metadata=meta)
    after = {cap: sha256_file(OUT / "adapters" / f"{cap}.safetensors") for cap in W.CAPABILITIES}
    on_disk = {cap: sha256_file(f) for cap, f in src.items()}

    suites, unchanged = {}, {}
    for cap in W.CAPABILITIES:
        model.set_adapter(cap)
        rows = answers(model, tok, world["test"][cap], tables, a.max_new_tokens)
        was = [r["success"] for r in sorted((r for r in recorded if r["arm"] == "specialists" and r["capability"] == cap),
                                            key=lambda r: r["item"])]
        if len(was) != len(rows):
            raise ArtifactError(f"{seed_dir(seed) / 'results.json'}: {len(was)} recorded {cap} suite answers, expected {len(rows)}")
        now = [r["success"] for r in rows]
        suites[cap] = {"before": float(np.mean(was)), "after": float(np.mean(now)), "items": len(now),
                       "items_changed": int(sum(x != y for x, y in zip(was, now)))}
        unchanged[cap] = now == was
    model.set_adapter(F.CAPABILITY)
    own = answers(model, tok, data["test"], tables, a.max_new_tokens)
    with model.disable_adapter():
        base_rows = answers(model, tok, data["test"], tables, a.max_new_tokens)
    own_rate, base_rate = float(np.mean([r["success"] for r in own])), float(np.mean([r["success"] for r in base_rows]))

    # the headline (learned) router refitted on five routes: the router's training conversations + as many sql turns
    # as each capability has there; tested on the test conversations' turns (with the fallback) and the sql suite
    train_turns = world["router_train"]
    n_sql = max(1, len(train_turns) // len(W.CAPABILITIES))
    texts = [turn_text(x) for x in train_turns] + [turn_text(x) for x in data["train"][:n_sql]]
    labels = [x["capability"] for x in train_turns] + [F.CAPABILITY] * min(n_sql, len(data["train"]))
    router = fit_router(p.router.headline, texts, labels, derive_seed(g, "mol", "router"), labels=ROUTES)
    conv = sorted(world["test_conversations"], key=lambda x: (x["conversation"], x["turn"]))
    routed = route_conversations(conv, router([turn_text(x) for x in conv]), p.router.confidence_threshold, ROUTES)
    sql_routes = [ROUTES[int(i)] for i in router([turn_text(x) for x in data["test"]]).argmax(1)]
    per_route = {cap: float(np.mean([r["route"] == cap for r in routed if r["capability"] == cap])) for cap in W.CAPABILITIES}
    per_route[F.CAPABILITY] = float(np.mean([r == F.CAPABILITY for r in sql_routes]))
    wrongly_sql = float(np.mean([r["route"] == F.CAPABILITY for r in routed]))

    checks = [
        precondition("the four adapters read back byte-identical", after == before, sum(after[c] == before[c] for c in before), len(before),
                     "sha256 of each of the four adapters, read out of the five-adapter model after training the fifth, "
                     "vs the file mol_train wrote"),
        precondition("the four adapter files untouched on disk", on_disk == before, sum(on_disk[c] == before[c] for c in before), len(before)),
        precondition("the four suites' per-item results unchanged", all(unchanged.values()), sum(unchanged.values()), len(unchanged),
                     "; ".join(f"{c}: {s['before']:.3f} → {s['after']:.3f} ({s['items_changed']} items changed)" for c, s in suites.items())),
    ]
    pre = [
        precondition("the fifth specialist learned its capability",
                     own_rate >= p.claims.min_own_success and own_rate - base_rate >= p.claims.min_gain_over_base,
                     round(own_rate, 4), p.claims.min_own_success,
                     f"{F.CAPABILITY}: own suite {own_rate:.3f} (≥ {p.claims.min_own_success:g}), base {base_rate:.3f} "
                     f"(gain ≥ {p.claims.min_gain_over_base:g})"),
        convergence("the fifth specialist's dev success plateaued", [h["dev_success"] for h in history if "dev_success" in h], ev,
                    lower_is_better=False),
    ]
    write_json(OUT / "results.json", {"seed": seed, "data": data, "history": history, "own": own, "base": base_rows,
                                      "sha256": {"before": before, "after": after}, "trainable": trainable,
                                      "routes": {"conversations": routed, "sql_suite": sql_routes}})
    write_json(METRICS, {
        "profile": read_params_file().get("profile"),
        "capability": F.CAPABILITY,
        "specialists_seed": seed,
        "checks": checks,
        "all_checks_passed": all(c["passed"] for c in checks),
        "preconditions": pre,
        "summary": {"own_success": own_rate, "base_success": base_rate, "trainable_parameters": trainable,
                    "four_suites": suites, "router": {"method": p.router.headline, "per_route_accuracy": per_route,
                                                      "test_turns_routed_to_sql": wrongly_sql}},
    })
    write_run_log("mol_fifth", {"cpu_s": time.process_time() - t0, "train_cpu_s": train_cpu})
    print(f"{F.CAPABILITY}: own suite {own_rate:.3f} (base {base_rate:.3f}); four adapters byte-identical: {after == before}; "
          f"suites unchanged: {unchanged}; router per route {per_route}")


if __name__ == "__main__":
    main()
