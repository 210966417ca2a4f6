"""Sessions of the agent and its controls, per-unit tables, preconditions, claims and the summary.

Unit = one session (model × dimension × repeat); models are the clusters (a model's sessions
share its profile and its benchmark truth). The truth of a session is the level of the full
benchmark's run ``a`` (tool verdicts, as a benchmark computes its scores); every arm reads run ``b``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.core.claims import ClaimSpec, precondition, unit_table
from paperworks.core.ranking import spearman
from paperworks.core.seeding import derive_seed
from paperworks.eval_agent.agent import Pool, first_n, level_name, level_of, random_subset, reference_edges, run_agent, weakest_aspect
from paperworks.eval_agent.params import Params
from paperworks.eval_agent.world import KNOWN_FAMILIES, STRATA

ARMS = ("agent", "random_subset", "first_n", "full_rerun")
CURVE = "plots/eval_agent/live_tools/plots/metrics/heldout_loss.tsv"
TOOLS_OK = "tools read the known families' benchmark samples like the renderer"
TOOLS_CONVERGED = "tool heads converged (held-out plateau)"
TOOLS_LEARNED = "tool heads learned (held-out loss left its start)"
def planner_curve(seed: int) -> str:
    """The held-out loss curve of one planner training draw (the plateau check's input)."""
    return f"plots/eval_agent/planner/seed_{seed}/live_planner/plots/metrics/heldout_loss.tsv"


PLANNER_CONVERGED = "planner SFT converged (held-out plateau)"
PLANNER_LEARNED = "planner SFT learned (held-out loss left its start)"
PLANNER_VALID = "the trained planner's first-try actions are valid"


def pools(outcomes: pd.DataFrame, model: str, run: str, dim: str) -> Pool:
    g = outcomes[(outcomes["model"] == model) & (outcomes["run"] == run) & (outcomes["dim"] == dim)].sort_values(["prompt", "sample"])
    return Pool(g["prompt"].to_numpy(), g["sample"].to_numpy(), g["stratum"].to_numpy(), g["tool"].to_numpy().astype(float))


def levels(outcomes: pd.DataFrame, dims: list[str]) -> dict[str, tuple[float, ...]]:
    """Per dimension: edges of the five levels from the population's full-benchmark scores."""
    pop = outcomes[(outcomes["role"] == "population") & (outcomes["run"] == "a")]
    return {d: reference_edges(pop[pop["dim"] == d].groupby("model")["tool"].mean().to_numpy()) for d in dims}


def run_sessions(outcomes: pd.DataFrame, p: Params, seed: int, dims: list[str] | None = None,
                 strata: dict[str, tuple[str, ...]] | None = None) -> tuple[pd.DataFrame, dict, list[dict]]:
    """Every (model, dimension, repeat) session of every arm on the in-family and held-out models.

    ``dims``/``strata`` default to the image suite's (``zoo.dims``, ``world.STRATA``); the text-to-video suite passes its own.
    Also returns the example sessions (``pick_examples``): the agent's full record of a few sessions."""
    dims = list(p.zoo.dims) if dims is None else list(dims)
    strata = STRATA if strata is None else strata
    edges = levels(outcomes, dims)
    rows, kept = [], []
    models = outcomes[outcomes["role"] != "population"][["model", "family", "role"]].drop_duplicates().sort_values("model")
    for m in models.itertuples(index=False):
        for dim in dims:
            truth_pool, pool = pools(outcomes, m.model, "a", dim), pools(outcomes, m.model, "b", dim)
            n_strata = len(strata[dim])
            weights = np.bincount(pool.stratum, minlength=n_strata) / len(pool.stratum)
            truth = float(truth_pool.outcome.mean())
            mo = outcomes[(outcomes["model"] == m.model) & (outcomes["run"] == "a") & (outcomes["dim"] == dim)]
            renderer = float(mo["truth"].mean())
            base = {"model": m.model, "family": m.family, "role": m.role, "dim": dim, "truth_score": truth,
                    "truth_level": level_of(truth, edges[dim]), "renderer_level": level_of(renderer, edges[dim])}
            for rep in range(p.agent.repeats):
                rng = np.random.default_rng(derive_seed(seed, "eval_agent", "session", m.model, dim, rep))
                s = run_agent(pool, weights, edges[dim], p.agent, rng)
                estimates = {"agent": s.estimate, "random_subset": random_subset(pool, s.n, rng),
                             "first_n": first_n(pool, s.n, rep), "full_rerun": float(pool.outcome.mean())}
                for arm, est in estimates.items():
                    n = len(pool.outcome) if arm == "full_rerun" else s.n
                    rows.append({**base, "repeat": rep, "arm": arm, "n": n, "estimate": est, "level": level_of(est, edges[dim]),
                                 "rounds": s.rounds if arm == "agent" else 0, "reason": s.reason if arm == "agent" else "",
                                 "low": s.low if arm == "agent" else np.nan, "high": s.high if arm == "agent" else np.nan})
                kept.append((base, rep, s))
    df = pd.DataFrame(rows)
    df["exact"] = (df["level"] == df["truth_level"]).astype(float)
    df["within_one"] = ((df["level"] - df["truth_level"]).abs() <= 1).astype(float)
    df["abs_error"] = (df["estimate"] - df["truth_score"]).abs()
    examples = [example_record(kind, base, rep, s, outcomes, edges[base["dim"]], strata) for kind, (base, rep, s) in pick_examples(kept)]
    return df, {d: list(e) for d, e in edges.items()}, examples


EXAMPLE_KINDS = ("stopped early", "round cap", "held-out family C", "missed level")


def pick_examples(kept: list[tuple[dict, int, "object"]]) -> list[tuple[str, tuple]]:
    """A few sessions for the page, chosen by rule (never by hand), each of a kind, in different dimensions where possible:

    - *stopped early*: the in-family session that stopped with its interval inside one level on the fewest samples;
    - *round cap*: the first in-family session that hit the round cap;
    - *held-out family C*: the first held-out session (repeat 0);
    - *missed level*: the in-family session whose level is furthest from the truth (≥ 1 off), the first of those.
    Kinds with no session (e.g. no early stop in a small profile) are left out."""
    inf = [k for k in kept if k[0]["role"] == "in_family"]
    chosen: list[tuple[str, tuple]] = []

    def first(cands, key=None):
        used_dims = {c[1][0]["dim"] for c in chosen}
        used = {id(c[1]) for c in chosen}
        cands = [c for c in cands if id(c) not in used]
        if key is not None:
            cands = sorted(cands, key=key)  # stable: ties keep the session order
        fresh = [c for c in cands if c[0]["dim"] not in used_dims]
        return (fresh or cands or [None])[0]

    rules = (([k for k in inf if k[2].reason == "interval inside one level"], lambda k: k[2].n),
             ([k for k in inf if k[2].reason == "cap"], None),
             ([k for k in kept if k[0]["role"] == "held_out" and k[1] == 0], None),
             ([k for k in inf if abs(k[2].level - k[0]["truth_level"]) >= 1], lambda k: -abs(k[2].level - k[0]["truth_level"])))
    for kind, (cands, key) in zip(EXAMPLE_KINDS, rules):
        k = first(cands, key)
        if k is not None:
            chosen.append((kind, k))
    return chosen


def example_record(kind: str, base: dict, rep: int, s, outcomes: pd.DataFrame, edges: tuple[float, ...],
                   strata: dict[str, tuple[str, ...]] = STRATA) -> dict:
    """One session's full record: per round the samples read (prompt, sample, sub-aspect, the tools' and the renderer's
    verdict), the allocation, the running estimate with its interval and the levels it spans, and the decision."""
    dim, aspects = base["dim"], strata[base["dim"]]
    pool = pools(outcomes, base["model"], "b", dim)
    g = outcomes[(outcomes["model"] == base["model"]) & (outcomes["run"] == "b") & (outcomes["dim"] == dim)].sort_values(["prompt", "sample"])
    renderer = g["truth"].to_numpy()
    rounds, start = [], 0
    for st in s.steps:
        read = s.rows[start:st["n"]]
        start = st["n"]
        rounds.append({**st, "levels": [level_name(level_of(st["low"], edges)), level_name(level_of(st["high"], edges))],
                       "samples": [{"prompt": int(pool.prompt[i]), "sample": int(pool.sample[i]), "aspect": aspects[pool.stratum[i]],
                                    "tool": int(pool.outcome[i]), "renderer": int(renderer[i])} for i in read]})
    aspect, rate = weakest_aspect(pool, s.rows, aspects)
    fails = [{"prompt": int(pool.prompt[i]), "sample": int(pool.sample[i]), "aspect": aspects[pool.stratum[i]]}
             for i in s.rows if pool.outcome[i] == 0]
    return {"kind": kind, "model": base["model"], "family": base["family"], "role": base["role"], "dim": dim, "repeat": rep,
            "run": "b", "aspects": list(aspects), "edges": [round(e, 4) for e in edges],
            "level": level_name(s.level), "estimate": round(s.estimate, 4), "interval": [round(s.low, 4), round(s.high, 4)],
            "samples": s.n, "full_samples": len(pool.outcome), "stop": s.reason,
            "truth_level": level_name(base["truth_level"]), "truth_score": round(base["truth_score"], 4), "rounds": rounds,
            "explanation": f"{base['model']} is {level_name(s.level)} on {dim} ({s.estimate:.2f} of {s.n} samples pass); "
                           f"weakest sub-aspect: {aspect} ({rate:.2f})",
            "failing_samples": fails}


def session_units(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per-unit tables: a session's level agreement and error, per arm, models as clusters; Spearman per (dim, repeat)."""
    tables = {}
    for role, suffix in (("in_family", ""), ("held_out", "_heldout")):
        d = df[df["role"] == role]
        unit = d["dim"] + "/r" + d["repeat"].astype(str)
        for metric in ("exact", "within_one", "abs_error"):
            tables[metric + suffix] = unit_table(pd.DataFrame({"arm": d["arm"], "cluster": d["model"], "unit": unit, "value": d[metric]}))
    rows = []
    inf = df[df["role"] == "in_family"]
    for (arm, dim, rep), g in inf.groupby(["arm", "dim", "repeat"]):
        rows.append({"arm": arm, "cluster": f"{dim}/r{rep}", "unit": f"{dim}/r{rep}", "value": spearman(g["estimate"].to_numpy(), g["truth_score"].to_numpy())})
    tables["spearman"] = unit_table(pd.DataFrame(rows).fillna(0.0))
    return tables


def tool_agreement(outcomes: pd.DataFrame, families: tuple[str, ...], name: str, threshold: float) -> dict:
    """Precondition: per (family, dimension) of the given families' non-population samples, tool verdict = renderer verdict."""
    known = outcomes[outcomes["family"].isin(families) & (outcomes["role"] != "population")]
    acc = known.assign(ok=(known["tool"] == known["truth"]).astype(float)).groupby(["family", "dim"])["ok"].mean()
    worst = acc.idxmin()
    return precondition(name, bool(acc.min() >= threshold), round(float(acc.min()), 4), threshold,
                        f"tool verdict = renderer verdict on the benchmark samples of families {', '.join(families)}; lowest: family "
                        f"{worst[0]}, {worst[1]} {acc.min():.3f} (all: " + ", ".join(f"{f}/{d} {v:.3f}" for (f, d), v in acc.items()) + ")")


def preconditions(outcomes: pd.DataFrame, tool_curve: list[float], p: Params, ev) -> list[dict]:
    from paperworks.core.claims import convergence, learned

    return [tool_agreement(outcomes, KNOWN_FAMILIES, TOOLS_OK, p.claims.min_tool_accuracy),
            convergence(TOOLS_CONVERGED, tool_curve, ev),
            learned(TOOLS_LEARNED, tool_curve, p.claims.min_rel_improvement, ev)]


def claim_specs(p: Params) -> list[ClaimSpec]:
    tools = (TOOLS_OK, TOOLS_CONVERGED, TOOLS_LEARNED)
    cap = p.agent.batch_size * p.agent.max_rounds
    full = p.zoo.prompts_per_dim * p.zoo.samples_per_prompt
    common = dict(unit="session", cluster="model", preconditions=tools)
    return [
        ClaimSpec("agent_vs_full_benchmark", f"the agent (≤ {cap} of {full} samples per dimension) places a model within one of "
                  f"the full benchmark's five levels as often as a full-benchmark rerun (margin {p.claims.within_one_margin:g})",
                  "within_one", "within_one", "agent", "full_rerun", kind="non_inferiority", margin=p.claims.within_one_margin,
                  role="headline", **common),
        ClaimSpec("agent_vs_random_subset", "the agent's level is exactly right more often than a random subset of the same size",
                  "exact", "exact level agreement", "agent", "random_subset", role="headline", **common),
        ClaimSpec("agent_vs_first_n", "the agent's level is exactly right more often than the first N prompts of the file (same N)",
                  "exact", "exact level agreement", "agent", "first_n", role="headline", **common),
        ClaimSpec("agent_error_vs_random_subset", "the agent's score error is smaller than a random subset's of the same size",
                  "abs_error", "|score − full-benchmark score|", "agent", "random_subset", higher_is_better=False, **common),
        ClaimSpec("agent_exact_vs_full_benchmark", "the agent's exact level agreement is non-inferior to a full-benchmark rerun",
                  "exact", "exact level agreement", "agent", "full_rerun", kind="non_inferiority", margin=p.claims.within_one_margin, **common),
        ClaimSpec("heldout_agent_vs_full_benchmark", "on the held-out family C the agent stays within one level as often as a full rerun",
                  "within_one_heldout", "within_one", "agent", "full_rerun", kind="non_inferiority", margin=p.claims.within_one_margin,
                  unit="session", cluster="model", preconditions=(TOOLS_CONVERGED, TOOLS_LEARNED)),
        ClaimSpec("agent_spearman_vs_full_benchmark", "the agent ranks the in-family models per dimension as a full rerun does (Spearman)",
                  "spearman", "Spearman of the model ranking", "agent", "full_rerun", kind="non_inferiority", margin=0.2,
                  unit="dimension × repeat", cluster=None, preconditions=tools),
    ]


N_NEEDS = 20  # weight vectors over the dimensions per repeat (recommendation mode), Dirichlet(1, …, 1)


def needs(dims: list[str], seed: int) -> np.ndarray:
    """The recommendation mode's weighted needs: ``N_NEEDS`` weight vectors over the dimensions (rows sum to 1)."""
    return np.random.default_rng(derive_seed(seed, "eval_agent", "needs", *dims)).dirichlet(np.ones(len(dims)), size=N_NEEDS)


def mode_units(df: pd.DataFrame, dims: list[str], seed: int) -> tuple[dict[str, pd.DataFrame], dict]:
    """Exploratory modes built on the one-model sessions of every arm (in-family models; truth = full benchmark run a).

    - **comparison** "is A better than B on D?": per (dimension, repeat) every pair of models with distinct true scores;
      an arm answers by its two sessions' estimates (a tie counts half); value = the share answered as the truth;
    - **recommendation** "the best model for needs w": per repeat, ``N_NEEDS`` weight vectors w over the dimensions;
      an arm recommends argmax_m Σ_d w_d estimate(m, d); top-1 hit (the truth's argmax of Σ_d w_d truth(m, d)) and
      regret (the truth's best utility minus the recommended model's). Units: weight vectors, clustered by repeat
      (a repeat's sessions serve every w)."""
    inf = df[df["role"] == "in_family"]
    cmp_rows, hit_rows, regret_rows = [], [], []
    for (arm, dim, rep), g in inf.groupby(["arm", "dim", "repeat"]):
        g = g.sort_values("model")
        e, tr = g["estimate"].to_numpy(), g["truth_score"].to_numpy()
        i, j = np.triu_indices(len(g), 1)
        keep = tr[i] != tr[j]
        if not keep.any():
            continue
        right = np.where(e[i] == e[j], 0.5, ((e[i] > e[j]) == (tr[i] > tr[j])).astype(float))[keep]
        cmp_rows.append({"arm": arm, "cluster": f"{dim}/r{rep}", "unit": f"{dim}/r{rep}", "value": float(right.mean())})
    w = needs(dims, seed)
    for (arm, rep), g in inf.groupby(["arm", "repeat"]):
        est = g.pivot(index="model", columns="dim", values="estimate")[dims].to_numpy()
        tru = g.pivot(index="model", columns="dim", values="truth_score")[dims].to_numpy()
        u_true, rec = tru @ w.T, np.argmax(est @ w.T, axis=0)  # (models, needs); recommended model per need
        best = u_true.max(axis=0)
        got = u_true[rec, np.arange(len(w))]
        for k in range(len(w)):
            hit_rows.append({"arm": arm, "cluster": f"r{rep}", "unit": f"w{k}", "value": float(got[k] == best[k])})
            regret_rows.append({"arm": arm, "cluster": f"r{rep}", "unit": f"w{k}", "value": float(best[k] - got[k])})
    tables = {"comparison": unit_table(cmp_rows), "recommendation_hit": unit_table(hit_rows),
              "recommendation_regret": unit_table(regret_rows)}
    summary = {arm: {"comparison_accuracy": round(float(tables["comparison"].query("arm == @arm")["value"].mean()), 4),
                     "recommendation_hit": round(float(tables["recommendation_hit"].query("arm == @arm")["value"].mean()), 4),
                     "recommendation_regret": round(float(tables["recommendation_regret"].query("arm == @arm")["value"].mean()), 4)}
               for arm in ARMS}
    return tables, {"needs_per_repeat": N_NEEDS, **summary}


def mode_claim_specs(p: Params) -> list[ClaimSpec]:
    tools = (TOOLS_OK, TOOLS_CONVERGED, TOOLS_LEARNED)
    m = p.claims.within_one_margin
    return [
        ClaimSpec("comparison_vs_full_benchmark", f"comparison mode: from its sessions of two models the agent tells which is better "
                  f"on a dimension as often as a full-benchmark rerun (margin {m:g})", "comparison", "pairwise decision accuracy",
                  "agent", "full_rerun", kind="non_inferiority", margin=m, unit="dimension × repeat", cluster=None, preconditions=tools),
        ClaimSpec("comparison_vs_random_subset", "comparison mode: the agent's pairwise decisions are right more often than a random "
                  "subset's of the same size", "comparison", "pairwise decision accuracy", "agent", "random_subset",
                  unit="dimension × repeat", cluster=None, preconditions=tools),
        ClaimSpec("recommendation_vs_full_benchmark", f"recommendation mode: for weighted needs over the dimensions the agent "
                  f"recommends the truly best model as often as a full-benchmark rerun (margin {m:g})", "recommendation_hit",
                  "top-1 recommendation hit", "agent", "full_rerun", kind="non_inferiority", margin=m, unit="weight vector",
                  cluster="repeat", preconditions=tools),
    ]


def planner_sessions(df: pd.DataFrame, rollouts: pd.DataFrame) -> pd.DataFrame:
    """The trained planner's sessions beside the scripted agent's, joined on (model, dimension, repeat)."""
    agent = df[df["arm"] == "agent"].set_index(["model", "dim", "repeat"])
    r = rollouts.set_index(["model", "dim", "repeat"])
    missing = agent.index.difference(r.index)
    if len(missing):
        from paperworks.core.io import ArtifactError
        raise ArtifactError(f"data/eval_agent/planner/rollouts.parquet: {len(missing)} agent sessions have no planner rollout "
                            f"(first: {missing[0]}); rerun eval_agent_planner")
    r = r.loc[agent.index]
    out = agent[["family", "role", "truth_score", "truth_level"]].copy()
    out["planner_level"], out["agent_level"] = r["level"], agent["level"]
    out["planner_n"], out["agent_n"] = r["n"], agent["n"]
    for arm in ("planner", "agent"):
        out[f"{arm}_exact"] = (out[f"{arm}_level"] == out["truth_level"]).astype(float)
        out[f"{arm}_within_one"] = ((out[f"{arm}_level"] - out["truth_level"]).abs() <= 1).astype(float)
    out["same_level"] = (out["planner_level"] == out["agent_level"]).astype(float)
    for c in ("decisions", "invalid", "retried_ok", "fallbacks"):
        out[c] = r[c]
    return out.reset_index()


def attach_planner(examples: list[dict], rollouts: pd.DataFrame, invalid_log: list[dict]) -> list[dict]:
    """Each example session with the trained planner's answer on the same session (same pool, seed and sample queues):
    its level, samples, stop, and its refused actions (counts, and the logged texts with the reason and what was done)."""
    r = rollouts.set_index(["model", "dim", "repeat"])
    out = []
    for e in examples:
        key = (e["model"], e["dim"], e["repeat"])
        if key not in r.index:
            from paperworks.core.io import ArtifactError
            raise ArtifactError(f"data/eval_agent/planner/rollouts.parquet: no rollout of example session {key}; rerun eval_agent_planner")
        row = r.loc[key]
        refused = [{k: v[k] for k in ("step", "text", "why", "retry", "retry_why", "applied", "outcome")}
                   for v in invalid_log if (v.get("model"), v.get("dim"), v.get("repeat")) == key]
        out.append({**e, "planner": {"level": level_name(int(row["level"])), "samples": int(row["n"]), "rounds": int(row["rounds"]),
                                     "stop": row["reason"], **{c: int(row[c]) for c in ("decisions", "invalid", "retried_ok", "fallbacks")},
                                     "refused": refused}})
    return out


def planner_units(ps: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per-session within-one agreement of the trained and the scripted planner; ``ps`` holds every planner training draw
    (column ``planner_seed``), and the draw is the cluster: the trained planner's variance is its training, and every
    draw plays the same sessions (models, dimensions, repeats: the units nested in it) as the scripted planner."""
    tables = {}
    for role, suffix in (("in_family", ""), ("held_out", "_heldout")):
        d = ps[ps["role"] == role]
        unit = d["model"] + "/" + d["dim"] + "/r" + d["repeat"].astype(str)
        cluster = "seed_" + d["planner_seed"].astype(str)
        tables["planner_within_one" + suffix] = unit_table(pd.concat([
            pd.DataFrame({"arm": arm, "cluster": cluster, "unit": unit, "value": d[f"{arm}_within_one"]}) for arm in ("planner", "agent")]))
    return tables


def planner_preconditions(ps: pd.DataFrame, curves: dict[int, list[float]], p: Params, ev) -> list[dict]:
    """Every planner training draw must converge, learn, and act validly at the first try (the worst draw is the value)."""
    from paperworks.core.claims import combine, convergence, learned

    conv = [convergence(f"seed {s}", curve, ev) for s, curve in sorted(curves.items())]
    learn = [learned(f"seed {s}", curve, p.claims.min_rel_improvement, ev) for s, curve in sorted(curves.items())]
    rates = {}
    for s, d in ps.groupby("planner_seed"):
        rates[int(s)] = (1 - d["invalid"].sum() / max(int(d["decisions"].sum()), 1), int(d["decisions"].sum()), int(d["invalid"].sum()),
                         int(d["retried_ok"].sum()), int(d["fallbacks"].sum()))
    worst = min(r[0] for r in rates.values())
    detail = "; ".join(f"seed {s}: {n - bad} of {n} decisions valid at the first try, {ok} fixed by the retry, {fb} fell back "
                       f"to the neutral rule" for s, (_, n, bad, ok, fb) in sorted(rates.items()))
    return [combine(PLANNER_CONVERGED, conv, "planner draws' held-out plateau checks"),
            combine(PLANNER_LEARNED, learn, "planner draws' held-out loss drops"),
            precondition(PLANNER_VALID, bool(worst >= p.claims.min_valid_action_rate), round(float(worst), 4),
                         p.claims.min_valid_action_rate, detail)]


def planner_claim_specs(p: Params) -> list[ClaimSpec]:
    planner = (PLANNER_CONVERGED, PLANNER_LEARNED, PLANNER_VALID)
    m = p.claims.within_one_margin
    return [
        ClaimSpec("planner_vs_scripted", f"the trained planner places an in-family model within one level of the full benchmark as often "
                  f"as the scripted planner it was trained on (margin {m:g})", "planner_within_one", "within_one", "planner", "agent",
                  kind="non_inferiority", margin=m, unit="session", cluster="seed",
                  preconditions=(TOOLS_OK, TOOLS_CONVERGED, TOOLS_LEARNED) + planner),
        ClaimSpec("planner_vs_scripted_heldout", f"on the held-out family C the trained planner stays within one level as often as the "
                  f"scripted planner (margin {m:g})", "planner_within_one_heldout", "within_one", "planner", "agent",
                  kind="non_inferiority", margin=m, unit="session", cluster="seed",
                  preconditions=(TOOLS_CONVERGED, TOOLS_LEARNED) + planner),
    ]


def planner_summary(ps: pd.DataFrame) -> dict:
    """Per role, over every planner training draw's sessions (equal counts per draw: the mean over the draws)."""
    out = {"draws": int(ps["planner_seed"].nunique())}
    for role in ("in_family", "held_out"):
        d = ps[ps["role"] == role]
        out[role] = {"planner_within_one": round(float(d["planner_within_one"].mean()), 4),
                     "agent_within_one": round(float(d["agent_within_one"].mean()), 4),
                     "planner_exact": round(float(d["planner_exact"].mean()), 4), "agent_exact": round(float(d["agent_exact"].mean()), 4),
                     "same_level_as_agent": round(float(d["same_level"].mean()), 4),
                     "planner_samples": round(float(d["planner_n"].mean()), 2), "agent_samples": round(float(d["agent_n"].mean()), 2),
                     "valid_action_rate": round(float(1 - d["invalid"].sum() / max(int(d["decisions"].sum()), 1)), 4),
                     "decisions": int(d["decisions"].sum()), "invalid": int(d["invalid"].sum()),
                     "retried_ok": int(d["retried_ok"].sum()), "fallbacks": int(d["fallbacks"].sum())}
    return out


def summary(df: pd.DataFrame, p: Params, full: int | None = None) -> dict:
    """Per role and arm: level agreement, error, samples and their share of one dimension's full benchmark (``full``;
    default the image suite's ``zoo.prompts_per_dim × zoo.samples_per_prompt``)."""
    out = {}
    full = p.zoo.prompts_per_dim * p.zoo.samples_per_prompt if full is None else full
    for role in ("in_family", "held_out"):
        d = df[df["role"] == role]
        for arm in ARMS:
            a = d[d["arm"] == arm]
            out[f"{role}/{arm}"] = {"exact": round(float(a["exact"].mean()), 4), "within_one": round(float(a["within_one"].mean()), 4),
                                    "abs_error": round(float(a["abs_error"].mean()), 4), "samples": round(float(a["n"].mean()), 2),
                                    "sample_share": round(float(a["n"].mean() / full), 4)}
    ag = df[(df["arm"] == "agent")]
    out["agent_stops"] = ag["reason"].value_counts().to_dict()
    first = df[(df["arm"] == "agent") & (df["repeat"] == 0)]
    out["calibration"] = calibration(df, p)
    out["tool_level_shift"] = {role: round(float((first[first["role"] == role]["truth_level"] != first[first["role"] == role]["renderer_level"]).mean()), 4)
                               for role in ("in_family", "held_out")}
    return out


def calibration(df: pd.DataFrame, p: Params) -> dict:
    """Exploratory: is the agent's stated confidence borne out?

    - *interval coverage*: share of final intervals that contain the full benchmark's score — of the pool the agent read
      (run b's mean, what the interval estimates) and of the truth (run a, an independent draw) — against the confidence
      each look's interval is built at (Bonferroni over the rounds);
    - *stated level*: a session that stops with its interval inside one level states that level at the family confidence
      ``agent.confidence``; the share of those whose level is the truth's, and the full rerun's."""
    a = df[df["arm"] == "agent"].set_index(["model", "dim", "repeat"])
    full = df[df["arm"] == "full_rerun"].set_index(["model", "dim", "repeat"]).loc[a.index]
    look = 1 - (1 - p.agent.confidence) / p.agent.max_rounds
    out = {"look_confidence": round(look, 4), "family_confidence": p.agent.confidence}
    for role in ("in_family", "held_out"):
        m = (a["role"] == role).to_numpy()
        ar, fr = a[m], full[m]
        inside = (ar["reason"] == "interval inside one level").to_numpy()
        out[role] = {
            "sessions": int(m.sum()),
            "covers_pool_score": round(float(((ar["low"] <= fr["estimate"]) & (fr["estimate"] <= ar["high"])).mean()), 4),
            "covers_truth_score": round(float(((ar["low"] <= ar["truth_score"]) & (ar["truth_score"] <= ar["high"])).mean()), 4),
            "stated_level_sessions": int(inside.sum()),
            "stated_level_is_truth": round(float(ar["exact"][inside].mean()), 4) if inside.any() else None,
            "stated_level_is_rerun_level": round(float((ar["level"][inside] == fr["level"][inside]).mean()), 4) if inside.any() else None,
        }
    return out


def plot_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Per (arm, dimension): level agreement and samples on the in-family models (the plot CSV)."""
    d = df[df["role"] == "in_family"]
    g = d.groupby(["arm", "dim"]).agg(exact=("exact", "mean"), within_one=("within_one", "mean"), samples=("n", "mean")).reset_index()
    return g.round(4)


def plot_agreement(frame: pd.DataFrame, path) -> None:
    """Grouped bars: exact level agreement per dimension for each arm (in-family sessions)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = sorted(frame["dim"].unique())
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
    width = 0.8 / len(ARMS)
    for i, arm in enumerate(ARMS):
        a = frame[frame["arm"] == arm].set_index("dim").reindex(dims)
        label = f"{arm} ({a['samples'].mean():.0f} samples)"
        ax.bar(np.arange(len(dims)) + (i - (len(ARMS) - 1) / 2) * width, a["exact"].to_numpy(), width, label=label)
    ax.set_xticks(np.arange(len(dims)), dims)
    ax.set_ylim(0, 1)
    ax.set_ylabel("exact level agreement")
    ax.set_title("eval_agent: level agreement with the full benchmark (in-family sessions)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
