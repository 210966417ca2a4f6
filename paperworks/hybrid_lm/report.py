"""Aggregate the trained runs into per-unit tables, preconditions, claims, cost blocks, curve
tables and figures (pure functions of the loaded run records ``runs[variant][seed]``)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.core.claims import ClaimSpec, EvidenceParams, combine, convergence, learned, precondition, unit_table
from paperworks.core.stats import wilson_interval
from paperworks.hybrid_lm.params import Params

Runs = dict[str, dict[int, dict]]   # variant → seed → run record (stages/hybrid_lm/train.py)


# ------------------------------------------------------------------ long tables (plots)
def curves_table(runs: Runs) -> pd.DataFrame:
    rows = []
    for v, by_seed in runs.items():
        for s, r in by_seed.items():
            fpt = 3.0 * r["cost"]["flops_per_token_fwd"]
            for h in r["history"]:
                rows.append({"variant": v, "seed": s, "step": h["step"], "tokens": h["tokens"], "train_flops": fpt * h["tokens"],
                             "cpu_s": h["cpu_s"], "loss": h["loss"], "maxvio": h.get("maxvio", np.nan),
                             "dead_experts": h.get("dead_experts", np.nan)})
    return pd.DataFrame(rows)


def _set_axis(name: str) -> tuple[str, int]:
    """'mqar_ctx4' → ('mqar_ctx', 4); 'mqar_pairs24' → ('mqar_pairs', 24)."""
    for prefix in ("mqar_ctx", "timescale_ctx", "mqar_pairs"):
        if name.startswith(prefix):
            return prefix, int(name[len(prefix):])
    raise ValueError(f"unknown evaluation set {name!r}")


def recall_table(runs: Runs) -> pd.DataFrame:
    """Accuracy per (variant, seed, evaluation set, query kind)."""
    rows = []
    for v, by_seed in runs.items():
        for s, r in by_seed.items():
            for name, q in r["recall"].items():
                family, x = _set_axis(name)
                df = pd.DataFrame(q)
                for kind, g in df.groupby("kind"):
                    rows.append({"variant": v, "seed": s, "set": name, "family": family, "x": x, "kind": kind,
                                 "accuracy": float(g["hit"].mean()), "queries": int(len(g))})
    return pd.DataFrame(rows)


def expert_load_table(runs: Runs) -> pd.DataFrame:
    """Per log interval, MoE layer: the largest and smallest expert share and MaxVio."""
    rows = []
    for v, by_seed in runs.items():
        for s, r in by_seed.items():
            for entry in r.get("load_log", []):
                for layer, share in enumerate(entry["share"]):
                    share = np.asarray(share)
                    rows.append({"variant": v, "seed": s, "step": entry["step"], "layer": layer,
                                 "max_share": float(share.max()), "min_share": float(share.min()),
                                 "maxvio": float(share.max() / share.mean() - 1), "dead": int((share == 0).sum())})
    return pd.DataFrame(rows, columns=["variant", "seed", "step", "layer", "max_share", "min_share", "maxvio", "dead"])


# ------------------------------------------------------------------ claims
def kda_capacity(p: Params) -> int:
    """Keys one KDA head can hold without interference: its key dimension (head_dim)."""
    return p.model_config_for("hybrid").head_dim if "hybrid" in p.variants else int(p.model.get("head_dim", 64))


def claim_specs(p: Params, tokens: int | None = None) -> list[ClaimSpec]:
    """The track's claims, headline first, stated from the params they test."""
    m = p.claims.loss_margin
    top = max(p.corpus.eval_multiples)
    cap = kda_capacity(p)
    tok = f"{tokens:,} tokens per run" if tokens else "equal tokens"

    def pre(a: str, b: str, *extra: str) -> tuple[str, ...]:
        return (f"{a} in the grid", f"{b} in the grid", f"{a} converged", f"{b} converged", f"{a} learned", f"{b} learned",
                "equal training tokens", f"active parameters matched: {a} vs {b}", *extra)

    def spec(id, method, baseline, metric, statement, role="exploratory", higher=True, kind="superiority",
             margin=None, unit="sequence", extra=()):
        if id in RECALL_CLAIMS:
            extra = (*extra, f"an arm recalls above chance: {id}")
        return ClaimSpec(id=id, statement=statement, table=id, metric=metric, method=method, baseline=baseline,
                         unit=unit, cluster="seed", kind=kind, margin=margin, higher_is_better=higher, role=role,
                         preconditions=pre(method, baseline, *extra))

    return [
        spec("hybrid_vs_dense_loss", "hybrid", "dense", "held-out loss (nats/token)", higher=False, role="headline",
             kind="non_inferiority", margin=m,
             statement=f"The 3 KDA : 1 gated-MLA hybrid is non-inferior to dense attention on held-out loss (margin {m:g} nats), at {tok}"),
        spec("kda_vs_head_gate_timescale", "hybrid", "hybrid_headgate", "multi-timescale recall accuracy", role="headline",
             unit="query",
             statement=f"KDA's per-channel gate beats a per-head gate (gated DeltaNet) on multi-timescale recall (contexts 1×–{top}×), at {tok}"),
        spec("qb_vs_aux_maxvio", "moe_qb", "moe_aux", "MaxVio of each training step's routing (last share of steps)",
             higher=False, role="headline", unit="step",
             statement=f"Quantile Balancing keeps experts more balanced than the auxiliary loss (MaxVio over the last "
                       f"training steps), at {tok}"),
        spec("hybrid_vs_dense_recall_long", "hybrid", "dense", f"MQAR accuracy at {top}× the training context",
             unit="query", statement=f"The hybrid recalls more than dense attention at {top}× the training context (MQAR, "
                                     f"{p.corpus.eval_pairs} pairs)"),
        spec("global_layer_needed", "hybrid", "kda_only", f"MQAR accuracy with more pairs than a head's capacity ({cap})",
             unit="query", extra=("MQAR sweep passes the KDA state capacity",),
             statement=f"One global layer is needed: the hybrid beats all-KDA on MQAR beyond the state capacity (> {cap} pairs)"),
        spec("kda_vs_head_gate_loss", "hybrid", "hybrid_headgate", "held-out loss (nats/token)", higher=False,
             statement="KDA's per-channel gate gives lower held-out loss than a per-head gate"),
        spec("qb_vs_aux_loss", "moe_qb", "moe_aux", "held-out loss (nats/token)", higher=False, kind="non_inferiority",
             margin=m, statement=f"Quantile Balancing is non-inferior to the auxiliary loss on held-out loss (margin {m:g} nats)"),
        spec("attnres_vs_standard_loss", "attnres", "hybrid", "held-out loss (nats/token)", higher=False,
             statement="Block Attention Residuals lower the hybrid's held-out loss"),
        spec("latent_moe_vs_moe_loss", "latent_moe", "moe_qb", "held-out loss (nats/token)", higher=False,
             statement="LatentMoE (more, narrower experts) lowers held-out loss vs plain MoE at matched active parameters"),
        spec("hybrid_vs_dense_compute", "hybrid", "dense", "training FLOPs to reach the worse final loss of the pair",
             higher=False, unit="seed",
             statement="The hybrid reaches a common training loss with fewer counted FLOPs than dense attention "
                       "(the compute multiplier; the paper's 2.5× is across sizes)"),
    ]


def _recall_units(r: dict, sets: list[str], kinds: tuple[str, ...] | None = None) -> list[tuple[str, float]]:
    out = []
    for name in sets:
        q = r["recall"][name]
        for seq, pos, kind, hit in zip(q["seq"], q["pos"], q["kind"], q["hit"]):
            if kinds is None or kind in kinds:
                out.append((f"{name}/{seq}/{pos}", float(hit)))
    return out


def flops_to_reach(r: dict, target: float) -> float:
    """Training FLOPs at the first logged point whose loss is ≤ ``target`` (inf if never)."""
    for h in r["history"]:
        if h["loss"] <= target:
            return 3.0 * r["cost"]["flops_per_token_fwd"] * h["tokens"]
    return float("inf")


def tail_steps(n_steps: int, ev: EvidenceParams) -> int:
    return max(1, int(round(n_steps * ev.convergence_tail)))


RECALL_CLAIMS = ("kda_vs_head_gate_timescale", "hybrid_vs_dense_recall_long", "global_layer_needed")


def claim_units(p: Params, claim_id: str, r: dict, ev: EvidenceParams) -> list[tuple[str, float]]:
    """(unit id, value) of one run for one claim's per-unit table (not the compute claim)."""
    top = max(p.corpus.eval_multiples)
    if claim_id in ("hybrid_vs_dense_loss", "kda_vs_head_gate_loss", "qb_vs_aux_loss", "attnres_vs_standard_loss",
                    "latent_moe_vs_moe_loss"):
        return [(str(i), x) for i, x in enumerate(r["heldout_loss"])]
    if claim_id == "kda_vs_head_gate_timescale":
        return _recall_units(r, [f"timescale_ctx{m}" for m in p.corpus.eval_multiples])
    if claim_id == "hybrid_vs_dense_recall_long":
        return _recall_units(r, [f"mqar_ctx{top}"])
    if claim_id == "global_layer_needed":
        return _recall_units(r, [f"mqar_pairs{n}" for n in p.corpus.mqar_pairs if n > kda_capacity(p)])
    if claim_id == "qb_vs_aux_maxvio":
        tail = tail_steps(len(r["step_maxvio"]), ev)
        first = len(r["step_maxvio"]) - tail
        return [(str(first + i + 1), x) for i, x in enumerate(r["step_maxvio"][first:])]
    raise AssertionError(f"no unit rule for claim {claim_id}")


def unit_tables(p: Params, runs: Runs, ev: EvidenceParams) -> dict[str, pd.DataFrame]:
    """One per-unit table per claim whose two arms were trained (arm = variant, cluster = seed)."""
    tables = {}
    for spec in claim_specs(p):
        a, b = spec.method, spec.baseline
        if a not in runs or b not in runs:
            continue
        rows = []
        seeds = sorted(set(runs[a]) & set(runs[b]))
        if spec.table == "hybrid_vs_dense_compute":
            for s in seeds:
                target = max(runs[a][s]["history"][-1]["loss"], runs[b][s]["history"][-1]["loss"])
                for v in (a, b):
                    rows.append({"arm": v, "cluster": s, "unit": s, "value": flops_to_reach(runs[v][s], target)})
            tables[spec.table] = unit_table(rows)
            continue
        for v in (a, b):
            for s in seeds:
                rows += [{"arm": v, "cluster": s, "unit": u, "value": x} for u, x in claim_units(p, spec.id, runs[v][s], ev)]
        if rows:
            tables[spec.table] = unit_table(rows)
    return tables


def above_chance(p: Params, spec: ClaimSpec, runs: Runs, ev: EvidenceParams) -> dict:
    """A recall comparison means something only if an arm recalls: pooled over seeds, the Wilson
    lower bound of some arm's accuracy on the claim's queries must exceed chance (1 / n_values)."""
    chance = 1.0 / p.corpus.n_values
    name = f"an arm recalls above chance: {spec.id}"
    found = []
    for v in (spec.method, spec.baseline):
        hits = [x for r in runs.get(v, {}).values() for _, x in claim_units(p, spec.id, r, ev)]
        if hits:
            lo, _ = wilson_interval(int(sum(hits)), len(hits), ev.confidence)
            found.append((v, float(np.mean(hits)), lo, len(hits)))
    best = max(found, key=lambda f: f[2], default=None)
    if best is None:
        return precondition(name, False, threshold=round(chance, 4), detail="no queries measured (arm missing or empty set)")
    detail = "; ".join(f"{v} {acc:.3f} (lower bound {lo:.3f}, {n} queries)" for v, acc, lo, n in found)
    return precondition(name, best[2] > chance, value=round(best[2], 4), threshold=round(chance, 4),
                        detail=f"{detail}; chance {chance:.3f}")


def preconditions(p: Params, runs: Runs, ev: EvidenceParams) -> list[dict]:
    """In the grid, converged, learned (per variant, all seeds); equal tokens; matched active
    parameters per compared pair; the MQAR sweep reaching past the state capacity."""
    out = []
    variants = {v for s in claim_specs(p) for v in (s.method, s.baseline)}
    for v in sorted(variants):
        trained = v in runs
        out.append(precondition(f"{v} in the grid", trained, value=v in p.grid.variants,
                                detail=f"variant '{v}' {'trained' if trained else 'not in this profile grid (hybrid_lm.grid.variants)'}"))
        if trained:
            curves = {s: [h["loss"] for h in r["history"]] for s, r in sorted(runs[v].items())}
            out.append(combine(f"{v} converged", [convergence(f"{v} seed {s}", c, ev) for s, c in curves.items()], "seeds"))
            out.append(combine(f"{v} learned", [learned(f"{v} seed {s}", c, p.claims.min_learned, ev) for s, c in curves.items()],
                               "seeds"))
        else:
            for what in ("converged", "learned"):
                out.append(precondition(f"{v} {what}", False, detail=f"variant '{v}' not trained"))
    tokens = sorted({r["cost"]["tokens"] for by in runs.values() for r in by.values()})
    out.append(precondition("equal training tokens", len(tokens) == 1, value=tokens[0] if len(tokens) == 1 else tokens,
                            detail=f"tokens per run: {tokens}"))
    tol = p.claims.param_tolerance
    for spec in claim_specs(p):
        a, b = spec.method, spec.baseline
        name = f"active parameters matched: {a} vs {b}"
        if any(r["name"] == name for r in out):
            continue
        if a in runs and b in runs:
            pa, pb = (next(iter(runs[v].values()))["params"]["active"] for v in (a, b))
            gap = abs(pa - pb) / max(pa, pb)
            out.append(precondition(name, gap <= tol, value=round(gap, 4), threshold=tol,
                                    detail=f"{a} {pa:,} vs {b} {pb:,} active parameters (relative gap {gap:.3f})"))
        else:
            out.append(precondition(name, False, detail="an arm was not trained"))
    for spec in claim_specs(p):
        if spec.id in RECALL_CLAIMS:
            out.append(above_chance(p, spec, runs, ev))
    cap, most = kda_capacity(p), max(p.corpus.mqar_pairs)
    out.append(precondition("MQAR sweep passes the KDA state capacity", most > cap, value=most, threshold=cap,
                            detail=f"largest pair count {most} vs head_dim {cap} keys per KDA head"))
    return out


def comparison_costs(p: Params, runs: Runs) -> dict[str, dict]:
    """Per claim: tokens, counted training FLOPs and CPU seconds of both arms (mean over seeds),
    and which of them the claim holds equal."""
    out = {}
    for spec in claim_specs(p):
        arms = [v for v in (spec.method, spec.baseline) if v in runs]
        if len(arms) < 2:
            continue
        cost = {v: {k: float(np.mean([r["cost"][k] for r in runs[v].values()])) for k in ("tokens", "train_flops", "cpu_s")}
                for v in arms}
        out[spec.id] = {"basis": "equal FLOPs target (FLOPs to reach a common loss)" if spec.id == "hybrid_vs_dense_compute"
                        else "equal tokens", **cost,
                        "flops_ratio": cost[spec.method]["train_flops"] / cost[spec.baseline]["train_flops"],
                        "cpu_ratio": cost[spec.method]["cpu_s"] / max(cost[spec.baseline]["cpu_s"], 1e-9)}
    return out


def compute_multiplier(runs: Runs) -> dict | None:
    """Dense FLOPs over hybrid FLOPs to reach the pair's worse final loss, per seed."""
    if "hybrid" not in runs or "dense" not in runs:
        return None
    ratios = []
    for s in sorted(set(runs["hybrid"]) & set(runs["dense"])):
        target = max(runs["hybrid"][s]["history"][-1]["loss"], runs["dense"][s]["history"][-1]["loss"])
        ratios.append(flops_to_reach(runs["dense"][s], target) / flops_to_reach(runs["hybrid"][s], target))
    return {"per_seed": ratios, "mean": float(np.mean(ratios))}


def summary(p: Params, runs: Runs, recall: pd.DataFrame) -> dict[str, dict]:
    out = {}
    for v, by in runs.items():
        rs = list(by.values())
        row = {"heldout_loss": float(np.mean([np.mean(r["heldout_loss"]) for r in rs])),
               "final_train_loss": float(np.mean([r["history"][-1]["loss"] for r in rs])),
               "active_params": rs[0]["params"]["active"], "total_params": rs[0]["params"]["total"],
               "tokens": rs[0]["cost"]["tokens"], "train_gflops": float(np.mean([r["cost"]["train_flops"] for r in rs])) / 1e9,
               "cpu_s": float(np.mean([r["cost"]["cpu_s"] for r in rs]))}
        g = recall[recall["variant"] == v]
        for (family, x), acc in g.groupby(["family", "x"])["accuracy"].mean().items():
            row[f"{family}{x}_acc"] = float(acc)
        if "heldout_maxvio" in rs[0]["probe"]:
            row["heldout_maxvio"] = float(np.mean([np.mean(r["probe"]["heldout_maxvio"]) for r in rs]))
            row["heldout_dead_experts"] = float(np.mean([np.sum(r["probe"]["heldout_dead_experts"]) for r in rs]))
            row["train_maxvio_final"] = float(np.mean([r["history"][-1]["maxvio"] for r in rs]))
        rms = np.mean([r["probe"]["stream_rms"] for r in rs], 0)
        row["stream_rms_growth"] = float(rms[-1] / rms[0])
        out[v] = {k: (round(x, 5) if isinstance(x, float) else x) for k, x in row.items()}
    return out


# ------------------------------------------------------------------ figures
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _band(ax, df: pd.DataFrame, x: str, y: str, label: str, **kw):
    stats = df.groupby(x)[y].agg(["mean", "min", "max"]).dropna()
    if stats.empty:
        return
    line, = ax.plot(stats.index, stats["mean"], label=label, **kw)
    ax.fill_between(stats.index, stats["min"], stats["max"], color=line.get_color(), alpha=0.15)


def plot_loss_curves(curves: pd.DataFrame, path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for v, g in curves.groupby("variant", sort=True):
        for ax, x in zip(axes, ("tokens", "train_flops", "cpu_s")):
            # seeds log at the same steps: band over seeds at each step, x = that step's mean
            xs = g.groupby("step")[x].mean()
            _band(ax, g.assign(**{x: g["step"].map(xs)}), x, "loss", v, marker="o", ms=2)
    for ax, label in zip(axes, ("training tokens", "counted training FLOPs", "CPU seconds (1 thread)")):
        ax.set_xlabel(label)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
        ax.set_ylabel("training loss (nats/token)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Training loss (mean over seeds, band = min–max)")
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def plot_recall(recall: pd.DataFrame, capacity: int, path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    panels = [("mqar_ctx", None, "MQAR vs context", "context (× training length)"),
              ("timescale_ctx", None, "multi-timescale recall vs context", "context (× training length)"),
              ("mqar_pairs", None, "MQAR vs pairs (training context)", "key–value pairs")]
    for ax, (family, _, title, xl) in zip(axes, panels):
        g = recall[recall["family"] == family]
        per_seed = g.groupby(["variant", "seed", "x"]).apply(
            lambda d: np.average(d["accuracy"], weights=d["queries"]), include_groups=False).rename("acc").reset_index()
        for v, gv in per_seed.groupby("variant", sort=True):
            _band(ax, gv, "x", "acc", v, marker="o", ms=3)
        if family.endswith("ctx"):
            ax.set_xscale("log", base=2)
        else:
            ax.axvline(capacity, color="grey", ls="--", lw=1, label=f"KDA head capacity ({capacity})")
        ax.set_title(title)
        ax.set_xlabel(xl)
        ax.set_ylabel("accuracy (teacher-forced argmax)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def plot_expert_load(loads: pd.DataFrame, path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    if loads.empty:
        for ax in axes:
            ax.text(0.5, 0.5, "no MoE variant in this grid", ha="center", va="center")
    for i, (v, g) in enumerate(loads.groupby("variant", sort=True)):
        per = g.groupby(["seed", "step"])[["maxvio", "max_share", "min_share"]].mean().reset_index()
        color = f"C{i}"   # one colour per variant in both panels
        _band(axes[0], per, "step", "maxvio", v, marker="o", ms=2, color=color)
        _band(axes[1], per, "step", "max_share", f"{v} largest", marker="^", ms=2, color=color)
        _band(axes[1], per, "step", "min_share", f"{v} smallest", marker="v", ms=2, ls="--", color=color)
    axes[0].set_ylabel("MaxVio (max load / mean − 1), per log interval")
    axes[1].set_ylabel("largest / smallest expert share")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Expert loads during training (mean over MoE layers; band = min–max over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def plot_decode_cost(df: pd.DataFrame, path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for v, g in df.groupby("variant", sort=True):
        axes[0].plot(g["context"], g["ms_per_token_step"], marker="o", label=v)
        axes[1].plot(g["context"], g["cache_mib"], marker="o", label=v)
    axes[0].set_ylabel("CPU ms per decode step (whole model)")
    axes[1].set_ylabel("decoding cache (MiB)")
    for ax in axes:
        ax.set_xlabel("context already in the cache (tokens)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
