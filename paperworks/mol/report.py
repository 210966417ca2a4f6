"""From verified answers to per-unit tables, preconditions and claims (the evidence standard).

Units: C1 (specialists vs one LoRA on the mixture) — unit = capability inside the seed it was trained
in (each seed trains every model independently): value = verified success rate of that capability's
test suite. C2 (router → specialist vs oracle routing) — unit = test conversation inside a seed:
value = 1 when every turn of the conversation was answered correctly. C3's forgetting comparison (the same
versioned loop on the mixture of LoRA vs on one monolithic LoRA) — unit = capability inside the seed the loop ran
on: value = v0's verified success minus the final version's on the earlier acceptance suites.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from paperworks.core.claims import ClaimSpec, EvidenceParams, combine, convergence, learned, precondition, unit_table
from paperworks.mol.params import Params
from paperworks.mol.world import CAPABILITIES

ARMS = ("specialists", "single_lora", "full_ft", "base")
SPECIALISTS_LEARNED = "each specialist learned its capability"
MODELS_CONVERGED = "every trained model's dev success plateaued"
MODELS_LEARNED = "every trained model's dev loss fell"
BASE_CONVERGED = "base pre-training loss plateaued"
SAME_BUDGET = "baselines had the specialists' parameters and steps"


def dev_curve(history: list[dict], key: str = "dev_loss") -> list[float]:
    """One held-out series of a training run (its logged rows that carry ``key``)."""
    return [float(h[key]) for h in history if key in h and np.isfinite(h[key])]


def success_rates(results: dict[int, dict]) -> pd.DataFrame:
    """(arm, seed, capability) → success rate, items, contamination rate (answers in another capability's format)."""
    rows = []
    for seed, res in sorted(results.items()):
        df = pd.DataFrame(res["suite"])
        if "weak_cue" not in df:
            df["weak_cue"] = False
        for (arm, cap), g in df.groupby(["arm", "capability"], sort=True):
            wrong_format = (g["format"] != cap) & g["format"].isin(CAPABILITIES)
            weak = g["weak_cue"].astype(bool)
            rows.append({"arm": arm, "seed": seed, "capability": cap, "success": float(g["success"].mean()),
                         "contamination": float(wrong_format.mean()), "items": len(g),
                         # the weakly cued items only (one token tells near-identical formats apart)
                         "success_weak": float(g.loc[weak, "success"].mean()) if weak.any() else float("nan"),
                         "contamination_weak": float(wrong_format[weak].mean()) if weak.any() else float("nan"),
                         "items_weak": int(weak.sum())})
    return pd.DataFrame(rows)


def conversation_success(results: dict[int, dict], routes: dict[str, dict[str, list[dict]]]) -> pd.DataFrame:
    """(policy, seed, conversation) → 1 when every turn was verified. Policies: oracle routing to the
    specialists, each router → specialists (``routes[str(seed)][method]``: the router fitted for that adapter
    seed), and the single LoRA / full FT answering every turn. ``routes`` empty: no router policies."""
    rows = []
    for seed, res in sorted(results.items()):
        ok = {(t["adapter"], t["conversation"], t["turn"]): bool(t["success"]) for t in res["turns"]}
        true_cap = {(t["conversation"], t["turn"]): t["capability"] for t in res["turns"]}
        convs = sorted({c for c, _ in true_cap})
        turns_of = defaultdict(list)
        for c, t in sorted(true_cap):
            turns_of[c].append(t)
        policies = {"oracle": {k: v for k, v in true_cap.items()}}
        if routes and str(seed) not in routes:
            raise ValueError(f"routes.json has routers for adapter seeds {sorted(routes)}, not for seed {seed}: rerun mol_router")
        for method, rs in (routes.get(str(seed), {}) if routes else {}).items():
            policies[f"router_{method}"] = {(r["conversation"], r["turn"]): r["route"] for r in rs}
        for policy, route in policies.items():
            for c in convs:
                rows.append({"policy": policy, "seed": seed, "conversation": c,
                             "success": float(all(ok[(route[(c, t)], c, t)] for t in turns_of[c]))})
        for arm in ("single_lora", "full_ft"):
            if any(a == arm for a, _, _ in ok):
                for c in convs:
                    rows.append({"policy": arm, "seed": seed, "conversation": c,
                                 "success": float(all(ok[(arm, c, t)] for t in turns_of[c]))})
    return pd.DataFrame(rows)


def _routing_accuracy_one(rs: list[dict]) -> dict:
    df = pd.DataFrame(rs)
    later = df[df["turn"] > 0]
    return {"turn_accuracy": float((df["route"] == df["capability"]).mean()), "turns": len(df),
            "fallback_share": float(df["fallback"].mean()),
            "accuracy_after_first_turn": float((later["route"] == later["capability"]).mean()) if len(later) else None}


def routing_accuracy(routes: dict[str, dict[str, list[dict]]]) -> dict[str, dict]:
    """Per router method: the per-turn figures averaged over the adapter seeds' routers, and each seed's."""
    out = {}
    methods = sorted({m for per_seed in routes.values() for m in per_seed})
    for method in methods:
        per_seed = {seed: _routing_accuracy_one(rs[method]) for seed, rs in sorted(routes.items())}
        mean = {k: float(np.mean([v[k] for v in per_seed.values()])) if all(v[k] is not None for v in per_seed.values()) else None
                for k in ("turn_accuracy", "fallback_share", "accuracy_after_first_turn")}
        out[method] = {**mean, "turns": next(iter(per_seed.values()))["turns"], "per_seed": per_seed}
    return out


def unit_tables(rates: pd.DataFrame, conv: pd.DataFrame) -> dict[str, pd.DataFrame]:
    tables = {
        "success": unit_table([{"arm": r.arm, "cluster": r.seed, "unit": r.capability, "value": r.success}
                               for r in rates.itertuples()]),
        "contamination": unit_table([{"arm": r.arm, "cluster": r.seed, "unit": r.capability, "value": r.contamination}
                                     for r in rates.itertuples() if r.arm != "base"]),
    }
    weak = rates[rates["items_weak"] > 0] if "items_weak" in rates else rates.iloc[:0]
    if len(weak):
        tables["success_weak_cue"] = unit_table([{"arm": r.arm, "cluster": r.seed, "unit": r.capability, "value": r.success_weak}
                                                 for r in weak.itertuples()])
        tables["contamination_weak_cue"] = unit_table([{"arm": r.arm, "cluster": r.seed, "unit": r.capability,
                                                        "value": r.contamination_weak} for r in weak.itertuples() if r.arm != "base"])
    if len(conv):
        tables["conversation_success"] = unit_table([{"arm": r.policy, "cluster": r.seed, "unit": r.conversation, "value": r.success}
                                                     for r in conv.itertuples()])
    return tables


def preconditions(p: Params, rates: pd.DataFrame, results: dict[int, dict], base_history: list[dict], ev: EvidenceParams) -> list[dict]:
    """Specialists that learned (≥ min_own_success on their own suite and ≥ min_gain_over_base above the
    base, for every (capability, seed)), trained models at a plateau, and the budget parity of the baselines."""
    c = p.claims
    spec = rates[rates["arm"] == "specialists"].set_index(["seed", "capability"])["success"]
    base = rates[rates["arm"] == "base"].set_index(["seed", "capability"])["success"]
    failing = [f"{cap}@seed{s}: {spec[(s, cap)]:.2f} (base {base[(s, cap)]:.2f})" for s, cap in spec.index
               if spec[(s, cap)] < c.min_own_success or spec[(s, cap)] - base[(s, cap)] < c.min_gain_over_base]
    worst = float((spec - base).min()) if len(spec) else float("nan")
    out = [precondition(SPECIALISTS_LEARNED, bool(len(spec)) and not failing, value=round(float(spec.min()), 4) if len(spec) else None,
                        threshold=c.min_own_success,
                        detail=(f"every (capability, seed): own-suite success ≥ {c.min_own_success:g} and ≥ {c.min_gain_over_base:g} "
                                f"above the base; lowest {float(spec.min()):.3f}, smallest gain {worst:.3f}"
                                + ("; failing: " + ", ".join(failing[:4]) if failing else "")))]
    conv, fell = [], []
    for seed, res in sorted(results.items()):
        for name, hist in sorted(res["histories"].items()):
            conv.append(convergence(f"{name}@seed{seed}", dev_curve(hist, "dev_success"), ev, lower_is_better=False))
            fell.append(learned(f"{name}@seed{seed}", dev_curve(hist), 0.05, ev))
    out.append(combine(MODELS_CONVERGED, conv, "trained models' dev success curves"))
    out.append(combine(MODELS_LEARNED, fell, "trained models' dev losses (≥ 5 % below their start)"))
    out.append(convergence(BASE_CONVERGED, dev_curve(base_history), ev))
    a = p.adapters
    n = len(CAPABILITIES)
    mismatch = []
    for seed, res in sorted(results.items()):
        tr = res["trainable"]
        spec_params = sum(tr[f"specialist_{cap}"] for cap in CAPABILITIES)
        if tr["single_lora"] != spec_params:
            mismatch.append(f"seed {seed}: single LoRA {tr['single_lora']} vs 4 specialists {spec_params}")
        steps = {name: h[-1]["step"] for name, h in res["histories"].items()}
        if steps["single_lora"] != n * a.steps or any(steps[f"specialist_{cap}"] != a.steps for cap in CAPABILITIES):
            mismatch.append(f"seed {seed}: steps {steps}")
    out.append(precondition(SAME_BUDGET, not mismatch, value=len(mismatch), threshold=0,
                            detail=f"single LoRA rank {n * a.rank} = 4 × {a.rank} (same trainable parameters), {n * a.steps} = 4 × {a.steps} steps"
                            + ("; " + "; ".join(mismatch[:2]) if mismatch else "")))
    return out


C1_PRE = (SPECIALISTS_LEARNED, MODELS_CONVERGED, MODELS_LEARNED, BASE_CONVERGED, SAME_BUDGET)


def claim_specs(p: Params) -> list[ClaimSpec]:
    """The MoL claims, headline first."""
    a, c = p.adapters, p.claims
    n = len(CAPABILITIES)
    per_cap = dict(table="success", metric="verified success rate", unit="capability", cluster="seed", preconditions=C1_PRE)
    specs = [
        ClaimSpec(id="specialists_beat_single_lora", role="headline", method="specialists", baseline="single_lora",
                  statement=(f"four LoRA specialists (rank {a.rank}, {a.steps} steps each, oracle routing) beat one LoRA on the "
                             f"mixture (rank {n * a.rank}, {n * a.steps} steps, lr {a.single_lora_lr:g}) in verified success per capability"), **per_cap),
        ClaimSpec(id="router_matches_oracle", role="headline", table="conversation_success", metric="whole-conversation success",
                  method=f"router_{p.router.headline}", baseline="oracle", unit="conversation", cluster="seed",
                  kind="non_inferiority", margin=c.router_margin, preconditions=(SPECIALISTS_LEARNED,),
                  statement=(f"routing each turn with {p.router.headline} (fallback below confidence "
                             f"{p.router.confidence_threshold:g}) is non-inferior to oracle routing by {c.router_margin:g} "
                             "in whole-conversation success")),
        ClaimSpec(id="specialists_beat_base", method="specialists", baseline="base",
                  statement="the specialists beat the frozen base they sit on", **per_cap),
        ClaimSpec(id="specialists_less_contamination", table="contamination", metric="answers in another capability's format",
                  method="specialists", baseline="single_lora", unit="capability", cluster="seed", higher_is_better=False,
                  preconditions=C1_PRE, statement="the specialists answer in another capability's format less often than one LoRA on the mixture"),
    ]
    if p.world.weak_cue_share > 0:
        specs += [
            ClaimSpec(id="specialists_beat_single_lora_weak_cues", method="specialists", baseline="single_lora",
                      **{**per_cap, "table": "success_weak_cue"},
                      statement=("on the weakly cued suite items only ('as json call' vs 'as json view', 'in plain text' vs "
                                 "'in plain code'), the specialists beat one LoRA on the mixture")),
            ClaimSpec(id="specialists_less_contamination_weak_cues", table="contamination_weak_cue",
                      metric="answers in another capability's format", method="specialists", baseline="single_lora",
                      unit="capability", cluster="seed", higher_is_better=False, preconditions=C1_PRE,
                      statement="on the weakly cued items, the specialists answer in another capability's format less often than one LoRA"),
        ]
    if a.full_ft:
        specs.append(ClaimSpec(id="specialists_beat_full_ft", method="specialists", baseline="full_ft",
                               statement=f"the specialists beat multi-task full fine-tuning ({n * a.steps} steps) per capability", **per_cap))
    for method in p.router.methods:
        if method != p.router.headline:
            specs.append(ClaimSpec(id=f"router_{method}_matches_oracle", table="conversation_success", metric="whole-conversation success",
                                   method=f"router_{method}", baseline="oracle", unit="conversation", cluster="seed",
                                   kind="non_inferiority", margin=c.router_margin, preconditions=(SPECIALISTS_LEARNED,),
                                   statement=f"routing with {method} is non-inferior to oracle routing by {c.router_margin:g}"))
    specs.append(ClaimSpec(id="routed_specialists_beat_single_lora_conversations", table="conversation_success",
                           metric="whole-conversation success", method=f"router_{p.router.headline}", baseline="single_lora",
                           unit="conversation", cluster="seed", preconditions=C1_PRE,
                           statement=f"{p.router.headline} → specialists beats one LoRA on the mixture on whole conversations"))
    return specs


# ------------------------------------------------------------------ the versioned loop (C4)
LOOP_ACCEPTED = "the loop accepted a version after v0"
UPDATES_CONVERGED = "every accepted update's dev success plateaued"
C4_PRE = (SPECIALISTS_LEARNED, LOOP_ACCEPTED, UPDATES_CONVERGED)


def _version_order(versions) -> list[str]:
    return sorted(versions, key=lambda v: int(v.lstrip("v")))


def version_tables(answers: dict, seed: int) -> dict[str, pd.DataFrame]:
    """Per-item tables of the latest accepted version vs v0 (arms ``latest``, ``v0``; unit = capability:item, inside
    the loop run of adapter seed ``seed``): on the acceptance suite the latest version was accepted on, and on v0's
    suite. The stage concatenates the loop runs' tables: the interval is over loop runs, items nested."""
    ans, suite_of = answers["answers"], answers["suite_of"]
    latest = _version_order(ans)[-1]
    if latest == "v0":
        return {}
    out = {}
    for name, suite in (("versions_new_suite", suite_of[latest]), ("versions_v0_suite", suite_of["v0"])):
        out[name] = unit_table([{"arm": arm, "cluster": seed, "unit": f"{cap}:{i}", "value": float(x)}
                                for arm, v in (("latest", latest), ("v0", "v0")) for cap in CAPABILITIES
                                for i, x in enumerate(ans[v][suite][cap])])
    return out


def _accepted(lineage: list[dict]) -> list[dict]:
    return [r for r in lineage if r["status"] == "accepted" and r.get("candidate", "-") != "-"]


def loop_preconditions(runs: dict[int, list[dict]], ev: EvidenceParams) -> list[dict]:
    """The loop accepted a version after v0 in every loop run (``runs``: seed → lineage) and every accepted update's
    dev success plateaued."""
    counts = {s: (len(_accepted(lin)), sum(r["status"] == "rejected" for r in lin)) for s, lin in runs.items()}
    least = min(n for n, _ in counts.values())
    out = [precondition(LOOP_ACCEPTED, least >= 1, value=least, threshold=1,
                        detail="; ".join(f"seed {s}: {n} candidate(s) accepted, {r} rejected" for s, (n, r) in counts.items()))]
    curves = [convergence(f"seed {s} {r['candidate']} ({r['capability']})", dev_curve(r["history"], "dev_success"), ev,
                          lower_is_better=False)
              for s, lin in runs.items() for r in _accepted(lin)]
    out.append(combine(UPDATES_CONVERGED, curves, "accepted updates' dev success curves") if curves else
               precondition(UPDATES_CONVERGED, False, detail="no accepted update"))
    return out


def loop_claim_specs(p: Params) -> list[ClaimSpec]:
    m = p.versions.contract.retention_margin
    common = dict(metric="verified success", unit="item", cluster="seed", method="latest", baseline="v0", preconditions=C4_PRE)
    return [
        ClaimSpec(id="latest_version_beats_v0_on_new_traffic", table="versions_new_suite", **common,
                  statement="the last accepted version beats v0 on the acceptance suite of the traffic it was accepted on (all four capabilities)"),
        ClaimSpec(id="latest_version_retains_v0_suite", table="versions_v0_suite", kind="non_inferiority", margin=m, **common,
                  statement=f"the last accepted version is non-inferior to v0 on v0's acceptance suite (margin {m:g})"),
    ]


# ------------------------------------------------------------------ MoL vs monolithic forgetting (C3's second half)
LOOP_ARMS = ("mol", "monolith")
MONOLITH_LEARNED = "the monolith's v0 (the single LoRA) learned every capability"
BOTH_ACCEPTED = "both loops accepted a version after v0"
MONOLITH_UPDATES_CONVERGED = "every accepted monolith update's dev success plateaued"
SAME_SUITES = "both loops were judged on the same acceptance suites"
C3F_PRE = (SPECIALISTS_LEARNED, MONOLITH_LEARNED, BOTH_ACCEPTED, UPDATES_CONVERGED, MONOLITH_UPDATES_CONVERGED, SAME_SUITES)


def earlier_suites(answers: dict, final_shift: int) -> list[str]:
    """The acceptance suites of the traffic before the last cycle's (shift < ``final_shift``): the same suites for
    both arms, whatever each arm accepted ("0" is v0's own suite)."""
    return sorted((sid for sid in next(iter(answers["answers"].values())) if int(sid) < final_shift), key=int)


def forgetting(answers: dict, suites: list[str]) -> dict[str, float]:
    """Per capability: v0's verified success minus the final (last accepted) version's, averaged over ``suites``
    (each suite's success is the share of its items; > 0 = forgot)."""
    ans = answers["answers"]
    final = _version_order(ans)[-1]
    return {cap: float(np.mean([np.mean(ans["v0"][sid][cap]) - np.mean(ans[final][sid][cap]) for sid in suites]))
            for cap in CAPABILITIES}


def forgetting_table(answers_by_arm: dict[str, dict], suites: list[str], seed: int) -> dict[str, pd.DataFrame]:
    """Per-unit table ``forgetting``: arm (mol, monolith) × (capability, seed) — the level the loop was run at
    (one loop run per arm and seed); the items of a suite are nested inside it and are averaged, never units."""
    if not suites:
        return {}
    return {"forgetting": unit_table([{"arm": arm, "cluster": seed, "unit": cap, "value": v}
                                      for arm, answers in answers_by_arm.items() for cap, v in forgetting(answers, suites).items()])}


def retention_rows(lineage_by_arm: dict[str, list[dict]], seed: int | None = None) -> pd.DataFrame:
    """Per cycle, every capability on every earlier accepted suite: candidate vs parent success (the plot CSV), of
    the loop runs on adapter seed ``seed``."""
    rows = []
    for arm, lineage in lineage_by_arm.items():
        for r in lineage:
            for sid, per in sorted(r.get("retention_by_capability", {}).items()):
                for cap in CAPABILITIES:
                    rows.append({"seed": seed, "arm": arm, "candidate": r["candidate"], "status": r["status"], "updated": r["capability"],
                                 "suite": sid, "capability": cap, "candidate_success": per[cap]["candidate"],
                                 "parent_success": per[cap]["parent"], "drop": per[cap]["parent"] - per[cap]["candidate"]})
    return pd.DataFrame(rows, columns=["seed", "arm", "candidate", "status", "updated", "suite", "capability", "candidate_success",
                                       "parent_success", "drop"])


def _suite_hashes(lineage: list[dict]) -> dict[str, str]:
    return {sid: h for r in lineage for sid, h in r.get("data", {}).get("suites_sha256", {}).items()}


def forgetting_preconditions(p: Params, rates: pd.DataFrame, runs: dict[int, dict[str, list[dict]]], ev: EvidenceParams) -> list[dict]:
    """Over every loop run (``runs``: seed → arm → lineage): each monolith's v0 learned (the single LoRA of that seed: own-suite floor and gain over the base, per capability),
    both loops accepted an update, the monolith's accepted updates plateaued, and every loop was judged on
    byte-identical suites (sha256 of every suite any lineage records)."""
    c = p.claims
    failing, lowest = [], []
    for seed in runs:
        mono = rates[(rates["arm"] == "single_lora") & (rates["seed"] == seed)].set_index("capability")["success"]
        base = rates[(rates["arm"] == "base") & (rates["seed"] == seed)].set_index("capability")["success"]
        if len(mono) != len(CAPABILITIES):
            failing.append(f"seed {seed}: no single LoRA results")
            continue
        lowest.append(float(mono.min()))
        failing += [f"seed {seed} {cap}: {mono[cap]:.2f} (base {base[cap]:.2f})" for cap in mono.index
                    if mono[cap] < c.min_own_success or mono[cap] - base[cap] < c.min_gain_over_base]
    seeds = ", ".join(map(str, runs))
    out = [precondition(MONOLITH_LEARNED, not failing, value=round(min(lowest), 4) if lowest else None, threshold=c.min_own_success,
                        detail=f"single LoRA of seed(s) {seeds} on v0's suite, every capability ≥ {c.min_own_success:g} and ≥ "
                               f"{c.min_gain_over_base:g} above the base" + ("; failing: " + ", ".join(failing) if failing else ""))]
    accepted = {(seed, arm): _accepted(lin) for seed, by_arm in runs.items() for arm, lin in by_arm.items()}
    out.append(precondition(BOTH_ACCEPTED, all(accepted.values()), value=min(len(a) for a in accepted.values()), threshold=1,
                            detail="; ".join(f"seed {seed} {arm}: {len(a)} accepted" for (seed, arm), a in accepted.items())))
    curves = [convergence(f"seed {seed} {r['candidate']} ({r['capability']})", dev_curve(r["history"], "dev_success"), ev,
                          lower_is_better=False)
              for (seed, arm), acc in accepted.items() if arm == "monolith" for r in acc]
    out.append(combine(MONOLITH_UPDATES_CONVERGED, curves, "accepted monolith updates' dev success curves") if curves else
               precondition(MONOLITH_UPDATES_CONVERGED, False, detail="no accepted monolith update"))
    hashes = [_suite_hashes(lin) for by_arm in runs.values() for lin in by_arm.values()]
    common = sorted(set.intersection(*(set(h) for h in hashes)), key=int)
    differ = [sid for sid in common if len({h[sid] for h in hashes}) > 1]
    out.append(precondition(SAME_SUITES, bool(common) and not differ, value=len(common) - len(differ), threshold=len(common),
                            detail=f"suites {', '.join(common) or 'none'} recorded by all {len(hashes)} lineages"
                                   + (f"; sha256 differs on {', '.join(differ)}" if differ else "")))
    return out


def forgetting_claim_specs(p: Params, suites: list[str]) -> list[ClaimSpec]:
    return [ClaimSpec(
        id="mol_forgets_less_than_monolith", table="forgetting", metric="forgetting (v0 − final version's verified success)",
        method="mol", baseline="monolith", unit="capability", cluster="seed", higher_is_better=False, preconditions=C3F_PRE,
        statement=(f"the same versioned loop forgets less on the mixture of LoRA (one adapter per capability) than on one "
                   f"monolithic LoRA (rank {len(CAPABILITIES) * p.adapters.rank}): drop from v0 to the final version on the earlier "
                   f"acceptance suites ({', '.join(suites) or 'none'}), per (capability, seed)"))]


def forgetting_summary(answers_by_arm: dict[str, dict], suites: list[str]) -> dict:
    out = {"earlier_suites": suites, "arms": {}}
    for arm, answers in answers_by_arm.items():
        per = forgetting(answers, suites) if suites else {}
        out["arms"][arm] = {"final_version": _version_order(answers["answers"])[-1], "per_capability": per,
                            "mean": float(np.mean(list(per.values()))) if per else None}
    return out


def loop_summary(lineage: list[dict], answers: dict) -> dict:
    cands = [r for r in lineage if r.get("candidate", "-") != "-"]
    return {
        "serving": _version_order(answers["answers"])[-1],
        "accepted": [r["version"] for r in lineage if r["status"] == "accepted"],
        "rejected": [r["candidate"] for r in cands if r["status"] == "rejected"],
        "faulty_candidates_rejected": all(r["status"] == "rejected" for r in cands if r.get("faulty")),
        "per_version": {v: {f"suite_{s}": float(np.mean([x for cap in CAPABILITIES for x in per[cap]])) for s, per in by.items()}
                        for v, by in answers["answers"].items()},
    }


def summary(rates: pd.DataFrame, conv: pd.DataFrame, routes: dict[str, dict[str, list[dict]]], results: dict[int, dict]) -> dict:
    per_arm = {}
    for arm, g in rates.groupby("arm", sort=True):
        weak = g[g["items_weak"] > 0] if "items_weak" in g else g.iloc[:0]
        per_arm[arm] = {"success": float(g["success"].mean()), "contamination": float(g["contamination"].mean()),
                        "success_weak_cue": float(weak["success_weak"].mean()) if len(weak) else None,
                        "contamination_weak_cue": float(weak["contamination_weak"].mean()) if len(weak) else None,
                        "per_capability": {cap: float(h["success"].mean()) for cap, h in g.groupby("capability")}}
    first = next(iter(results.values()))
    return {
        "arms": per_arm,
        "conversations": {pol: float(g["success"].mean()) for pol, g in conv.groupby("policy")} if len(conv) else {},
        "routing": routing_accuracy(routes),
        "trainable_parameters": first["trainable"],
        "seeds": sorted(results),
    }


def dev_loss_frame(results: dict[int, dict], base_history: list[dict]) -> pd.DataFrame:
    """Long table of dev curves (plot CSV): model, seed, step, dev_loss, dev_success (empty for the base)."""
    rows = [{"model": "base", "seed": -1, "step": h["step"], "dev_loss": h["dev_loss"]} for h in base_history if "dev_loss" in h]
    for seed, res in sorted(results.items()):
        for name, hist in sorted(res["histories"].items()):
            rows += [{"model": name, "seed": seed, "step": h["step"], "dev_loss": h["dev_loss"], "dev_success": h.get("dev_success")}
                     for h in hist if "dev_loss" in h]
    return pd.DataFrame(rows)


def plot_success(rates: pd.DataFrame, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a in ARMS if a in set(rates["arm"])]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(arms)
    for i, arm in enumerate(arms):
        g = rates[rates["arm"] == arm].groupby("capability")["success"]
        means, sds = g.mean().reindex(CAPABILITIES), g.std().reindex(CAPABILITIES).fillna(0)
        ax.bar(np.arange(len(CAPABILITIES)) + i * width, means, width, yerr=sds, label=arm)
    ax.set_xticks(np.arange(len(CAPABILITIES)) + 0.4 - width / 2, CAPABILITIES)
    ax.set_ylabel("verified success (mean ± sd over seeds)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
