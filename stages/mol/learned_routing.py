"""Stage mol_learned_routing: learned-routing ablations from peft on the frozen base, per seed of mol.adapters —
X-LoRA (a classifier mixes that seed's four trained specialists token by token; no router) and Polytropon
(LoRA skills shared by the four capabilities, each capability a task id) — answering the same test suites and
test-conversation turns as mol_train, through the same verifiers; exploratory claims against oracle routing of
the specialists and against the headline router → specialists (``metrics/mol_learned_routing.json``).

Polytropon needs a task id per request: on the suites it gets the true capability (oracle, like the specialists);
on conversations the headline router's route (like the routed specialists) and, for reference, the true one.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from paperworks.core.claims import (ClaimSpec, claim_summary, combine, convergence, evaluate_claims, evidence_block, learned,
                                    load_evidence, precondition, unit_table, write_unit_tables)
from paperworks.core.io import load_safetensors, read_json, save_safetensors, write_json, write_run_log
from paperworks.core.lm import TrainConfig, load_checkpoint, load_tokenizer
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.mol import learned as L
from paperworks.mol import report
from paperworks.mol import world as W
from paperworks.mol.artifacts import BASE, BASE_HISTORY, DATA, ROUTER, WORLD, read_seed_results, read_world, seed_dir
from paperworks.mol.models import freeze, train_on, trainable_parameters
from paperworks.mol.params import Params
from stages.mol.train import answer_suite, answer_turns, verified_share

OUT = DATA / "learned_routing"
METRICS = Path("metrics/mol_learned_routing.json")
TRACK = "mol_learned_routing"
XLORA_HOLDS = "X-LoRA holds the trained specialists"
SAME_STEPS = "learned routing had the baselines' steps and data"


def plateau(method: str) -> str:
    return f"{method}: every seed's dev success plateaued"


def fell(method: str) -> str:
    return f"{method}: every seed's dev loss fell"


def run_xlora(p: Params, base, tok, world, seed: int, g: int, ctx: int, mixture, mixture_dev, out: Path) -> dict:
    a, x = p.adapters, p.learned_routing.xlora
    files = {cap: seed_dir(seed) / "adapters" / f"{cap}.safetensors" for cap in W.CAPABILITIES}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = L.peft_adapter_dirs(base, files, a.rank, a.alpha_over_rank, Path(tmp))
        model = L.xlora_model(base, dirs, x.depth, x.size, x.layerwise, x.temperature, derive_seed(g, "mol", "xlora", seed))
    mismatch = []
    for i, cap in enumerate(W.CAPABILITIES):  # the experts X-LoRA holds are the trained specialists, bit for bit
        held = L.xlora_expert_tensors(model, i)
        saved = load_safetensors(files[cap])
        if set(held) != set(saved) or any(not bool((held[k] == saved[k]).all()) for k in saved):
            mismatch.append(cap)
    t0 = time.process_time()
    hist = train_on(model, tok, mixture, mixture_dev, x.steps, x.lr, a, ctx, derive_seed(g, "mol", "xlora_order", seed),
                    x.eval_every, None, f"xlora seed {seed}", verified_share(mixture_dev, world["tables"]))
    cpu = time.process_time() - t0
    suite = answer_suite(model, tok, "xlora", W.CAPABILITIES, world, a.max_new_tokens)
    turns = answer_turns(model, tok, "xlora", world, a.max_new_tokens)
    save_safetensors(out / "xlora_classifier.safetensors",
                     {k: v.detach().contiguous() for k, v in model.named_parameters() if v.requires_grad})
    return {"suite": suite, "turns": turns, "history": hist, "trainable": trainable_parameters(model), "cpu_s": cpu,
            "experts_mismatch": mismatch}


def run_poly(p: Params, base, tok, world, seed: int, g: int, ctx: int, mixture, mixture_dev, routes, out: Path) -> dict:
    from peft import get_peft_model_state_dict

    a, q = p.adapters, p.learned_routing.poly
    model = L.poly_model(base, a.rank, q.n_skills, q.n_splits, derive_seed(g, "mol", "poly", seed))
    data, dev = L.encode_tasks(tok, mixture, ctx), L.encode_tasks(tok, mixture_dev, ctx)
    cfg = TrainConfig(steps=q.steps, batch_size=a.batch_size, lr=q.lr, warmup_steps=max(1, q.steps // 20),
                      log_every=q.eval_every, eval_every=q.eval_every)
    share = verified_share(mixture_dev, world["tables"])
    dev_prompts, dev_tasks = [x["prompt"] for x in mixture_dev], [L.TASK_ID[x["capability"]] for x in mixture_dev]

    def evaluate(step: int) -> dict[str, float]:
        return {"dev_loss": L.task_heldout_loss(model, dev),
                "dev_success": share(L.generate_tasks(model, tok, dev_prompts, dev_tasks, a.max_new_tokens))}

    t0 = time.process_time()
    seed_everything(derive_seed(g, "mol", "poly_sampling", seed))  # Poly's relaxed-Bernoulli routing samples in training
    hist = L.train_tasks(model, data, cfg, derive_seed(g, "mol", "poly_order", seed), evaluate, desc=f"poly seed {seed}")
    cpu = time.process_time() - t0
    suite = []
    for cap in W.CAPABILITIES:  # oracle task id = the suite's capability
        items = world["test"][cap]
        outs = L.generate_tasks(model, tok, [x["prompt"] for x in items], [L.TASK_ID[cap]] * len(items), a.max_new_tokens)
        suite += [{"arm": "poly", "capability": cap, "item": i, "output": o, "format": W.output_format(o),
                   "weak_cue": x["cue"] in W.WEAK_CUES.values(),
                   "success": bool(W.verify(cap, W.request_from_dict(x), o, world["tables"]))} for i, (x, o) in enumerate(zip(items, outs))]
    conv = world["test_conversations"]
    routed = {(r["conversation"], r["turn"]): r["route"] for r in routes[str(seed)][p.router.headline]}  # this seed's router
    turns = []
    for adapter, task_of in (("poly", lambda x: x["capability"]), (f"router_{p.router.headline}_poly",
                                                                    lambda x: routed[(x["conversation"], x["turn"])])):
        outs = L.generate_tasks(model, tok, [x["prompt"] for x in conv], [L.TASK_ID[task_of(x)] for x in conv], a.max_new_tokens)
        turns += [{"adapter": adapter, "conversation": x["conversation"], "turn": x["turn"], "capability": x["capability"],
                   "success": bool(W.verify(x["capability"], W.request_from_dict(x), o, world["tables"]))} for x, o in zip(conv, outs)]
    save_safetensors(out / "poly.safetensors", {k: v.detach().contiguous() for k, v in get_peft_model_state_dict(model).items()})
    return {"suite": suite, "turns": turns, "history": hist, "trainable": trainable_parameters(model), "cpu_s": cpu}


def conversation_rows(turns: list[dict], seed: int) -> list[dict]:
    """(adapter, conversation) → 1 when every turn that adapter answered was verified."""
    by: dict[tuple[str, int], list[bool]] = {}
    for t in turns:
        by.setdefault((t["adapter"], t["conversation"]), []).append(bool(t["success"]))
    return [{"arm": adapter, "cluster": seed, "unit": c, "value": float(all(ok))} for (adapter, c), ok in sorted(by.items())]


def claim_specs(p: Params, methods: list[str]) -> list[ClaimSpec]:
    m, h = p.claims.router_margin, p.router.headline
    base_pre = (report.SPECIALISTS_LEARNED, report.MODELS_CONVERGED, SAME_STEPS)
    per_cap = dict(table="success", metric="verified success rate", unit="capability", cluster="seed", kind="non_inferiority", margin=m)
    conv = dict(table="conversation_success", metric="whole-conversation success", unit="conversation", cluster="seed",
                kind="non_inferiority", margin=m)
    specs = []
    if "xlora" in methods:
        pre = base_pre + (XLORA_HOLDS, plateau("xlora"), fell("xlora"))
        specs += [
            ClaimSpec(id="xlora_matches_oracle_specialists", method="xlora", baseline="specialists", preconditions=pre, **per_cap,
                      statement=(f"X-LoRA (a learned token-level mixture of the four frozen specialists, no router) is non-inferior "
                                 f"to oracle routing of the specialists by {m:g} in verified success per capability")),
            ClaimSpec(id="xlora_matches_router", method="xlora", baseline=f"router_{h}", preconditions=pre, **conv,
                      statement=f"X-LoRA is non-inferior to {h} → specialists by {m:g} in whole-conversation success"),
        ]
    if "poly" in methods:
        pre = base_pre + (plateau("poly"), fell("poly"))
        specs += [
            ClaimSpec(id="poly_matches_oracle_specialists", method="poly", baseline="specialists", preconditions=pre, **per_cap,
                      statement=(f"Polytropon ({p.learned_routing.poly.n_skills} LoRA skills shared by the capabilities, the true "
                                 f"capability as task id) is non-inferior to oracle routing of the specialists by {m:g} per capability")),
            ClaimSpec(id="poly_routed_matches_router", method=f"router_{h}_poly", baseline=f"router_{h}", preconditions=pre, **conv,
                      statement=f"{h} → Polytropon (the route as task id) is non-inferior to {h} → specialists by {m:g} on whole conversations"),
        ]
    return specs


@stage_main
def main() -> None:
    p = load_section("mol", Params)
    a, lr = p.adapters, p.learned_routing
    ev = load_evidence()
    raw = read_params_file()
    g = global_seed(raw)
    world = read_world()
    tok = load_tokenizer(WORLD / "tokenizer.json")
    base, cfg, _ = load_checkpoint(BASE)
    freeze(base)
    ctx, n = cfg.max_positions, len(W.CAPABILITIES)
    routes = read_json(ROUTER / "routes.json")["routes"]
    results = {s: read_seed_results(s) for s in a.seeds}
    mixture = [x for cap in W.CAPABILITIES for x in world["train"][cap]]
    mixture_dev = [x for cap in W.CAPABILITIES for x in world["dev"][cap]]
    runs: dict[str, dict[int, dict]] = {m: {} for m in lr.methods}
    for seed in a.seeds:
        out = OUT / f"seed_{seed}"
        seed_everything(derive_seed(g, "mol", "learned_routing", seed))
        if "xlora" in lr.methods:
            runs["xlora"][seed] = run_xlora(p, base, tok, world, seed, g, ctx, mixture, mixture_dev, out)
        if "poly" in lr.methods:
            runs["poly"][seed] = run_poly(p, base, tok, world, seed, g, ctx, mixture, mixture_dev, routes, out)
        # CPU seconds go to the run log only: a tracked output must be the same bytes on a rerun
        write_json(out / "results.json", {"seed": seed, **{m: {k: v for k, v in r[seed].items() if k != "cpu_s"}
                                                           for m, r in runs.items()}})
        for m, r in runs.items():
            ok = [x["success"] for x in r[seed]["suite"]]
            print(f"seed {seed} {m}: suite success {sum(ok) / len(ok):.3f}, {r[seed]['cpu_s']:.0f} CPU-s training")

    # tables: the specialists' and the routed specialists' units from mol_train + mol_router, the learned arms' from here
    rates = report.success_rates({s: {**res, "suite": res["suite"] + [x for m in runs for x in runs[m][s]["suite"]]}
                                  for s, res in results.items()})
    keep = {"specialists", *lr.methods}
    conv = report.conversation_success(results, routes)
    conv_rows = [{"arm": r.policy, "cluster": r.seed, "unit": r.conversation, "value": r.success} for r in conv.itertuples()
                 if r.policy in ("oracle", f"router_{p.router.headline}")]
    for m in lr.methods:
        for s in a.seeds:
            conv_rows += conversation_rows(runs[m][s]["turns"], s)
    tables = {"success": unit_table([{"arm": r.arm, "cluster": r.seed, "unit": r.capability, "value": r.success}
                                     for r in rates.itertuples() if r.arm in keep]),
              "conversation_success": unit_table(conv_rows)}

    pre = [x for x in report.preconditions(p, rates, results, read_json(BASE_HISTORY), ev)
           if x["name"] in (report.SPECIALISTS_LEARNED, report.MODELS_CONVERGED)]
    for m in lr.methods:
        pre.append(combine(plateau(m), [convergence(f"{m}@seed{s}", report.dev_curve(r["history"], "dev_success"), ev,
                                                    lower_is_better=False) for s, r in sorted(runs[m].items())], "dev success curves"))
        pre.append(combine(fell(m), [learned(f"{m}@seed{s}", report.dev_curve(r["history"]), 0.05, ev)
                                     for s, r in sorted(runs[m].items())], "dev losses (≥ 5 % below their start)"))
    want = {"xlora": lr.xlora.steps == a.steps, "poly": lr.poly.steps == n * a.steps}
    got = {m: sorted({r["history"][-1]["step"] for r in runs[m].values()}) for m in lr.methods}
    bad = [f"{m}: {got[m]} steps" for m in lr.methods if not want[m] or got[m] != [lr.xlora.steps if m == "xlora" else lr.poly.steps]]
    pre.append(precondition(SAME_STEPS, not bad, value=len(bad), threshold=0, detail=(
        f"on the four capabilities' training items (the mixture); X-LoRA's classifier {lr.xlora.steps} steps = one specialist's "
        f"{a.steps}; Polytropon {lr.poly.steps} = the single LoRA's {n} × {a.steps}" + ("; " + "; ".join(bad) if bad else ""))))
    if "xlora" in lr.methods:
        mism = {s: r["experts_mismatch"] for s, r in runs["xlora"].items() if r["experts_mismatch"]}
        pre.append(precondition(XLORA_HOLDS, not mism, value=len(mism), threshold=0,
                                detail="each X-LoRA expert's LoRA tensors equal the specialist's safetensors of its seed"
                                + (f"; differing: {mism}" if mism else "")))
    claims = evaluate_claims(claim_specs(p, lr.methods), tables, pre, ev, seed=g, track=TRACK)
    write_unit_tables(TRACK, tables)
    conv_table = unit_table(conv_rows)
    summary = {m: {"success": float(rates[rates.arm == m]["success"].mean()),
                   "per_capability": {cap: float(h["success"].mean()) for cap, h in rates[rates.arm == m].groupby("capability")},
                   "conversations": float(conv_table[conv_table["arm"] == m]["value"].mean()),
                   "trainable_parameters": next(iter(runs[m].values()))["trainable"]} for m in lr.methods}
    write_run_log("mol_learned_routing", {"train_cpu_s": {m: {str(s): r["cpu_s"] for s, r in sorted(runs[m].items())}
                                                          for m in lr.methods}})
    summary["specialists"] = {"success": float(rates[rates.arm == "specialists"]["success"].mean())}
    if "poly" in lr.methods:
        summary["poly"]["routed_conversations"] = float(conv_table[conv_table["arm"] == f"router_{p.router.headline}_poly"]["value"].mean())
    write_json(METRICS, {"profile": raw.get("profile"), "claims": claims, "claim_summary": claim_summary(claims),
                         "evidence": evidence_block(ev, g), "summary": summary, "preconditions": pre, "training_runs": len(a.seeds),
                         "not_run": {m: f"not in mol.learned_routing.methods of the {raw.get('profile')} profile: its claims are not tested here"
                                     for m in ("xlora", "poly") if m not in lr.methods}})
    for c in claims:
        print(f"{c['id']}: {c['verdict']}  ({c['method_mean']} vs {c['baseline_mean']})")


if __name__ == "__main__":
    main()
