"""Open-ended queries: a question in words → a slice of one dimension's benchmark → an agent session on that slice.

The paper's agent takes free-form questions ("how well does the model keep colours on red objects?").
Here a query names a dimension and, optionally, a **slice** of its prompt file: the prompts that hold an
object of a colour (``colour`` dimension: "does it bind the colour red?") or whose counted object is a
shape (``count`` dimension: "how well does it count triangles?"). The truth of a slice query is the full
benchmark restricted to that slice (run ``a``, every sample of the slice's prompts); its five reference
levels are the quintiles of the population generators' scores on the same slice; the agent and an
equal-sample random subset read run ``b`` restricted to the slice.

:func:`parse_query` is a keyword parser (no language model): it finds one dimension, at most one colour
or shape and, if ``models`` is given, one model name; anything it cannot place is a ``ValueError`` that
says what it understands.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from paperworks.core.claims import ClaimSpec, unit_table
from paperworks.core.render.scene import SHAPES
from paperworks.core.seeding import derive_seed
from paperworks.eval_agent.agent import Pool, level_of, random_subset, reference_edges, run_agent, weakest_aspect
from paperworks.eval_agent.params import Params
from paperworks.eval_agent.report import TOOLS_CONVERGED, TOOLS_LEARNED, TOOLS_OK
from paperworks.eval_agent.world import PROMPT_COLOURS, STRATA, BenchPrompt

TOOLS_PRE = (TOOLS_OK, TOOLS_CONVERGED, TOOLS_LEARNED)
OPEN_ARMS = ("agent", "random_subset", "full_rerun")


@dataclass(frozen=True)
class Query:
    """What a question asks: one dimension, optionally restricted to prompts with a colour or a (counted) shape."""

    dim: str
    colour: str | None = None
    shape: str | None = None
    model: str | None = None
    text: str = ""

    @property
    def key(self) -> str:
        return f"{self.dim}:{' '.join(x for x in (self.colour, self.shape) if x) or 'all'}"

    def matches(self, b: BenchPrompt) -> bool:
        """Is ``b`` in the slice? A colour and/or shape selects the prompts with such an object (on the count
        dimension: the counted object)."""
        if b.dim != self.dim:
            return False
        items = b.prompt.items[:1] if self.dim == "count" and self.shape is not None else b.prompt.items
        return any((self.colour is None or it.colour == self.colour) and (self.shape is None or it.shape == self.shape)
                   for it in items)


# Words that name a dimension (first match in this order wins when a query names several).
DIM_WORDS: dict[str, tuple[str, ...]] = {
    "count": ("count", "counting", "how many", "number of"),
    "spatial": ("left", "right", "above", "below", "spatial", "position", "place", "relation"),
    "quality": ("quality", "noise", "noisy", "clean", "sharp"),
    "colour": ("colour", "color", "colours", "colors", "coloured", "colored", "bind"),
    "presence": ("presence", "omit", "omission", "forget", "miss", "every object", "all objects", "draw"),
}
_SHAPE_FORMS = {s: (s, s + "s", s + "es") for s in SHAPES}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def parse_query(text: str, models: list[str] | tuple[str, ...] = (), dims: list[str] | tuple[str, ...] = tuple(STRATA)) -> Query:
    """``text`` → :class:`Query`. The dimension is the first one whose words the query holds (:data:`DIM_WORDS`, in that
    order); without one, a colour implies the colour dimension and a shape the count dimension."""
    low = " " + " ".join(_words(text)) + " "
    words = set(_words(text))
    colours = [c for c in PROMPT_COLOURS if c in words]
    shapes = [s for s in SHAPES if words & set(_SHAPE_FORMS[s])]
    named = [m for m in models if m.lower() in words]
    found = [d for d, keys in DIM_WORDS.items() if any(f" {k} " in low for k in keys)]
    if len(colours) > 1 or len(shapes) > 1:
        raise ValueError(f"query {text!r}: names {colours + shapes}; a slice is at most one colour and one shape")
    if len(named) > 1:
        raise ValueError(f"query {text!r}: names several models {named}; ask about one")
    if found:
        dim = found[0]
    elif colours:
        dim = "colour"
    elif shapes:
        dim = "count"
    else:
        raise ValueError(f"query {text!r}: no dimension found; say one of {sorted(DIM_WORDS)} "
                         f"(e.g. 'how well does it count?'), a colour {list(PROMPT_COLOURS)} or a shape {list(SHAPES)}")
    if dim not in dims:
        raise ValueError(f"query {text!r}: dimension {dim!r} is not in this benchmark ({list(dims)})")
    return Query(dim=dim, colour=colours[0] if colours else None, shape=shapes[0] if shapes else None,
                 model=named[0] if named else None, text=text)


# The open queries the evaluate stage asks every in-family and held-out model: one per prompt colour, one per shape.
QUERY_TEXTS: tuple[str, ...] = (
    *(f"How well does it keep the colour {c} on the object that should be {c}?" for c in PROMPT_COLOURS),
    *(f"How well does it count {s}{'es' if s == 'cross' else 's'}?" for s in SHAPES),
)


def open_queries(dims: list[str]) -> list[Query]:
    """The stage's queries, parsed (a query whose dimension is not in the profile is left out)."""
    return [parse_query(t) for t in QUERY_TEXTS if parse_query(t).dim in dims]


def slice_rows(outcomes: pd.DataFrame, prompts: list[BenchPrompt], q: Query) -> pd.DataFrame:
    """The benchmark rows of the query's slice (every model, run, sample of the matching prompts)."""
    keep = {b.index for b in prompts if q.matches(b)}
    return outcomes[(outcomes["dim"] == q.dim) & outcomes["prompt"].isin(keep)]


def slice_edges(sl: pd.DataFrame) -> tuple[float, ...]:
    """The five levels of a slice: quintiles of the population generators' full-benchmark scores (run a) on it."""
    pop = sl[(sl["role"] == "population") & (sl["run"] == "a")]
    if pop.empty:
        raise ValueError("slice_edges: no population generator has samples in this slice")
    return reference_edges(pop.groupby("model")["tool"].mean().to_numpy())


def _pool(g: pd.DataFrame) -> Pool:
    g = g.sort_values(["prompt", "sample"])
    return Pool(g["prompt"].to_numpy(), g["sample"].to_numpy(), g["stratum"].to_numpy(), g["tool"].to_numpy().astype(float))


def open_sessions(outcomes: pd.DataFrame, prompts: list[BenchPrompt], p: Params, seed: int) -> tuple[pd.DataFrame, dict]:
    """Every (model, query, repeat) session of the agent, the equal-sample random subset and the full rerun on the slice.

    Returns the session table and per query its slice size (prompts, samples per model run) and level edges.
    A query whose slice is empty in this profile is skipped (its record says so)."""
    rows, info = [], {}
    models = outcomes[outcomes["role"] != "population"][["model", "family", "role"]].drop_duplicates().sort_values("model")
    for q in open_queries(p.zoo.dims):
        sl = slice_rows(outcomes, prompts, q)
        n_prompts = int(sl["prompt"].nunique())
        if n_prompts == 0:
            info[q.key] = {"query": q.text, "prompts": 0, "skipped": "no prompt of the profile's file is in this slice"}
            continue
        edges = slice_edges(sl)
        n_strata = len(STRATA[q.dim])
        info[q.key] = {"query": q.text, "dim": q.dim, "prompts": n_prompts,
                       "samples": int(n_prompts * p.zoo.samples_per_prompt), "edges": [round(e, 4) for e in edges]}
        for m in models.itertuples(index=False):
            a = sl[(sl["model"] == m.model) & (sl["run"] == "a")]
            b = sl[(sl["model"] == m.model) & (sl["run"] == "b")].sort_values(["prompt", "sample"])
            pool, renderer_b = _pool(b), b["truth"].to_numpy()
            truth, renderer = float(a["tool"].mean()), float(a["truth"].mean())
            weights = np.bincount(pool.stratum, minlength=n_strata) / len(pool.stratum)
            base = {"model": m.model, "family": m.family, "role": m.role, "query": q.key, "dim": q.dim,
                    "truth_score": truth, "truth_level": level_of(truth, edges), "renderer_level": level_of(renderer, edges)}
            for rep in range(p.agent.repeats):
                rng = np.random.default_rng(derive_seed(seed, "eval_agent", "open_query", m.model, q.key, rep))
                s = run_agent(pool, weights, edges, p.agent, rng)
                fails = [r for r in s.rows if pool.outcome[r] == 0]
                aspect, _ = weakest_aspect(pool, s.rows, STRATA[q.dim])
                est = {"agent": s.estimate, "random_subset": random_subset(pool, s.n, rng), "full_rerun": float(pool.outcome.mean())}
                for arm, e in est.items():
                    rows.append({**base, "repeat": rep, "arm": arm, "n": len(pool.outcome) if arm == "full_rerun" else s.n,
                                 "estimate": e, "level": level_of(e, edges), "reason": s.reason if arm == "agent" else "",
                                 "failing": len(fails) if arm == "agent" else 0,
                                 "failing_renderer": int(sum(renderer_b[r] == 0 for r in fails)) if arm == "agent" else 0,
                                 "weakest_aspect": aspect if arm == "agent" else ""})
    df = pd.DataFrame(rows)
    if len(df):
        df["exact"] = (df["level"] == df["truth_level"]).astype(float)
        df["within_one"] = ((df["level"] - df["truth_level"]).abs() <= 1).astype(float)
        df["abs_error"] = (df["estimate"] - df["truth_score"]).abs()
    return df, info


def open_units(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per-unit tables: unit = session (query × repeat), models as clusters (in-family models)."""
    d = df[df["role"] == "in_family"]
    unit = d["query"] + "/r" + d["repeat"].astype(str)
    return {f"open_{metric}": unit_table(pd.DataFrame({"arm": d["arm"], "cluster": d["model"], "unit": unit, "value": d[metric]}))
            for metric in ("within_one", "exact")}


def open_claim_specs(p: Params) -> list[ClaimSpec]:
    m = p.claims.within_one_margin
    n = len(open_queries(p.zoo.dims))
    common = dict(unit="query session", cluster="model", preconditions=TOOLS_PRE)
    return [
        ClaimSpec("open_query_vs_full_benchmark", f"open-ended queries ({n} colour/shape slices): the agent places a model within "
                  f"one of the slice's five levels as often as a full rerun of the slice (margin {m:g})", "open_within_one",
                  "within_one", "agent", "full_rerun", kind="non_inferiority", margin=m, **common),
        ClaimSpec("open_query_vs_random_subset", "open-ended queries: the agent's slice level is exactly right more often than "
                  "a random subset of the slice of the same size", "open_exact", "exact level agreement", "agent", "random_subset",
                  **common),
    ]


def open_summary(df: pd.DataFrame, info: dict) -> dict:
    out: dict = {"queries": info}
    if df.empty:
        return out
    for role in ("in_family", "held_out"):
        d = df[df["role"] == role]
        for arm in OPEN_ARMS:
            a = d[d["arm"] == arm]
            if len(a):
                out[f"{role}/{arm}"] = {"exact": round(float(a["exact"].mean()), 4), "within_one": round(float(a["within_one"].mean()), 4),
                                        "abs_error": round(float(a["abs_error"].mean()), 4), "samples": round(float(a["n"].mean()), 2)}
    ag = df[(df["arm"] == "agent") & (df["role"] == "in_family")]
    for role in ("in_family", "held_out"):  # evidence precision: failing samples shown that the renderer also fails
        a = df[(df["arm"] == "agent") & (df["role"] == role)]
        shown, real = int(a["failing"].sum()), int(a["failing_renderer"].sum())
        out[f"evidence_{role}"] = {"failing_shown": shown, "renderer_also_fails": real,
                                   "precision": round(real / shown, 4) if shown else None}
    out["per_query"] = {k: {"agent_exact": round(float(g["exact"].mean()), 4), "agent_within_one": round(float(g["within_one"].mean()), 4),
                            "samples": round(float(g["n"].mean()), 2)} for k, g in ag.groupby("query")}
    return out
