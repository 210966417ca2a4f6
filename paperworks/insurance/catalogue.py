"""Synthetic medical-insurance benchmark: catalogue, queries, graded labels, splits, audit.

Stand-in for the paper's GPT-4o dataset (§3.2), built without an LLM from the seeded
parts in :mod:`paperworks.insurance.lexicon`:

* services = (body site, service category); each holds 1..n procedures, one per
  (family, variant) with a formal name ("arthrocentesis of the knee joint ...");
* queries of three intents (direct / symptom / coverage) in lay words, with typos
  and distractor body sites for difficulty;
* graded relevance 0–3 from the catalogue structure (same site × family sets), never
  from word overlap;
* splits by service, so no service is in both train and test.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from paperworks.insurance import lexicon as lx

INTENTS = ("direct", "symptom", "coverage")
SPLITS = ("train", "val", "test")

SERVICES_SCHEMA = pa.schema([
    ("service_id", pa.int32()), ("name", pa.string()), ("site", pa.string()), ("category", pa.string()),
    ("coverage", pa.string()), ("split", pa.string()),
])
PROCEDURES_SCHEMA = pa.schema([
    ("procedure_id", pa.int32()), ("service_id", pa.int32()), ("name", pa.string()), ("site", pa.string()),
    ("family", pa.string()), ("category", pa.string()), ("variant", pa.string()),
])
QUERIES_SCHEMA = pa.schema([
    ("query_id", pa.int32()), ("text", pa.string()), ("intent", pa.string()), ("split", pa.string()),
    ("target_procedure_id", pa.int32()), ("service_id", pa.int32()), ("site", pa.string()),
    ("grade3_families", pa.list_(pa.string())), ("grade2_families", pa.list_(pa.string())),
    ("variant", pa.string()),
])


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def available_services() -> list[tuple[lx.Site, lx.Category]]:
    """Every (site, category) pair for which at least one family applies to the site."""
    out = []
    for site in lx.SITES:
        for cat in lx.CATEGORIES:
            if any(f.category == cat.key and site.kind in f.kinds for f in lx.FAMILIES):
                out.append((site, cat))
    return out


def build_catalogue(n_services: int, procs_per_service: tuple[int, int], split_fractions, rng: np.random.Generator):
    """Sample services and their procedures; assign each service to one split."""
    pool = available_services()
    if n_services > len(pool):
        raise ValueError(f"insurance.data.n_services: {n_services} requested but the lexicon allows at most {len(pool)}")
    chosen = sorted(rng.choice(len(pool), size=n_services, replace=False).tolist())
    # split by service: a seeded permutation cut by the fractions
    order = rng.permutation(n_services)
    n_train = int(round(split_fractions[0] * n_services))
    n_val = max(1, int(round(split_fractions[1] * n_services)))
    split_of = {}
    for rank, idx in enumerate(order):
        split_of[int(idx)] = "train" if rank < n_train else ("val" if rank < n_train + n_val else "test")
    services, procedures = [], []
    for sid, pool_idx in enumerate(chosen):
        site, cat = pool[pool_idx]
        services.append(dict(service_id=sid, name=f"{cat.formal} of the {site.formal}", site=site.formal,
                             category=cat.key, coverage=cat.coverage, split=split_of[sid]))
        options = [(f, v) for f in lx.FAMILIES if f.category == cat.key and site.kind in f.kinds for v in f.variants]
        lo, hi = procs_per_service
        k = min(len(options), int(rng.integers(lo, hi + 1)))
        for oi in sorted(rng.choice(len(options), size=k, replace=False).tolist()):
            fam, (v_formal, _v_lay) = options[oi]
            name = _clean(fam.formal.format(site=site.formal, variant=v_formal))
            procedures.append(dict(procedure_id=len(procedures), service_id=sid, name=name, site=site.formal,
                                   family=fam.key, category=cat.key, variant=v_formal))
    return pd.DataFrame(services), pd.DataFrame(procedures)


def misspell(text: str, rate: float, rng: np.random.Generator) -> str:
    """Typos at ``rate`` per word (≥ 4 letters): swap, drop or double one inner letter."""
    words = text.split(" ")
    for i, w in enumerate(words):
        if len(w) >= 4 and w.isalpha() and rng.random() < rate:
            j = int(rng.integers(1, len(w) - 1))
            op = int(rng.integers(0, 3))
            if op == 0:
                w = w[:j] + w[j + 1] + w[j] + w[j + 2:]
            elif op == 1:
                w = w[:j] + w[j + 1:]
            else:
                w = w[:j] + w[j] + w[j:]
            words[i] = w
    return " ".join(words)


@dataclass(frozen=True)
class QuerySpec:
    text: str
    intent: str
    grade3_families: tuple[str, ...]
    grade2_families: tuple[str, ...]
    variant: str  # formal variant the query asks for ("" = any)


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(0, len(seq)))]


def compose_query(intent: str, proc: dict, site_families: dict[str, set[str]], rng: np.random.Generator) -> QuerySpec | None:
    """One lay-language query whose best answer is ``proc`` (or its family/service at its site)."""
    site = next(s for s in lx.SITES if s.formal == proc["site"])
    fam = lx.FAMILY_BY_KEY[proc["family"]]
    cat = lx.CATEGORY_BY_KEY[proc["category"]]
    here = site_families[site.formal]  # families the catalogue offers at this site
    same_cat = tuple(sorted(f for f in here if lx.FAMILY_BY_KEY[f].category == cat.key and f != fam.key))
    site_lay = _pick(rng, site.lay)
    v_lay = dict(fam.variants).get(proc["variant"], "")
    if intent == "direct":
        say_variant = bool(v_lay) and rng.random() < 0.7
        text = _pick(rng, lx.DIRECT_TEMPLATES).format(fam=_pick(rng, fam.lay), site=site_lay,
                                                       variant=f" {v_lay}" if say_variant else "")
        return QuerySpec(text, intent, (fam.key,), same_cat, proc["variant"] if say_variant else "")
    conditions = [c for c in lx.CONDITIONS if site.kind in c.kinds and fam.key in c.families]
    if intent == "symptom":
        if not conditions:
            return None
        cond = _pick(rng, conditions)
        offered = [f for f in cond.families if f in here]
        text = _pick(rng, lx.SYMPTOM_TEMPLATES).format(symptom=_pick(rng, cond.symptoms).format(site=site_lay))
        # first-line family offered at the site is the best answer; the rest of the condition's families are related
        return QuerySpec(text, intent, (offered[0],), tuple(offered[1:]), "")
    # coverage: three flavours — name the family, name the category, or name the condition
    flavour = int(rng.integers(0, 3))
    if flavour == 2 and conditions:
        cond = _pick(rng, conditions)
        offered = [f for f in cond.families if f in here]
        text = _pick(rng, lx.COVERAGE_TEMPLATES[4:]).format(site=site_lay, cond=cond.lay_name, cat=_pick(rng, cat.lay))
        # the named category plus the condition: its offered families in the category are best
        in_cat = tuple(f for f in offered if lx.FAMILY_BY_KEY[f].category == cat.key) or (offered[0],)
        return QuerySpec(text, intent, in_cat, tuple(f for f in offered if f not in in_cat), "")
    if flavour == 1:
        text = _pick(rng, lx.COVERAGE_TEMPLATES[2:4]).format(site=site_lay, cat=_pick(rng, cat.lay))
        return QuerySpec(text, intent, tuple(sorted({fam.key, *same_cat})), (), "")
    say_variant = bool(v_lay) and rng.random() < 0.5
    text = _pick(rng, lx.COVERAGE_TEMPLATES[:2]).format(fam=_pick(rng, fam.lay), site=site_lay,
                                                         variant=f" {v_lay}" if say_variant else "")
    return QuerySpec(text, intent, (fam.key,), same_cat, proc["variant"] if say_variant else "")


def grade_row(site: str, grade3: tuple[str, ...], grade2: tuple[str, ...], variant: str,
              p_site: np.ndarray, p_fam: np.ndarray, p_var: np.ndarray) -> np.ndarray:
    """Graded relevance of every procedure for one query, from the catalogue structure.

    3: the query's site and a best-answer family (and the asked variant, if any);
    2: the query's site and a related family (or the best family in another variant);
    1: the query's site, any other procedure; 0: everything else.
    """
    at_site = p_site == site
    best = at_site & np.isin(p_fam, list(grade3))
    variant_ok = (p_var == variant) if variant else np.ones_like(at_site)
    related = at_site & np.isin(p_fam, list(grade2))
    g = np.where(at_site, 1, 0)
    g = np.where(related | (best & ~variant_ok), 2, g)
    g = np.where(best & variant_ok, 3, g)
    return g.astype(np.int8)


def _arrays(procedures: pd.DataFrame):
    return procedures["site"].to_numpy(), procedures["family"].to_numpy(), procedures["variant"].to_numpy()


def generate_queries(services: pd.DataFrame, procedures: pd.DataFrame, n_queries: int, intent_mix: dict[str, float],
                     misspelling_rate: float, distractor_rate: float, rng: np.random.Generator) -> pd.DataFrame:
    """Queries in lay language; each takes the split of the service holding its best answer."""
    site_families: dict[str, set[str]] = procedures.groupby("site")["family"].apply(set).to_dict()
    split_of = services.set_index("service_id")["split"].to_dict()
    service_of = procedures["service_id"].to_numpy()
    arrays = _arrays(procedures)
    intents = list(intent_mix)
    probs = np.array([intent_mix[i] for i in intents], dtype=float)
    procs = procedures.to_dict("records")
    rows = []
    for _ in range(n_queries):
        intent = intents[int(rng.choice(len(intents), p=probs))]
        for _attempt in range(1000):
            proc = procs[int(rng.integers(0, len(procs)))]
            spec = compose_query(intent, proc, site_families, rng)
            if spec is not None:
                break
        else:
            raise ValueError(f"insurance.data: no procedure supports a '{intent}' query (catalogue too small)")
        text = spec.text
        if rng.random() < distractor_rate:
            others = [s for s in lx.SITES if s.formal != proc["site"]]
            text = _pick(rng, lx.DISTRACTOR_TEMPLATES).format(other=_pick(rng, _pick(rng, others).lay)) + text
        text = misspell(text, misspelling_rate, rng)
        g = grade_row(proc["site"], spec.grade3_families, spec.grade2_families, spec.variant, *arrays)
        target = int(np.flatnonzero(g == 3)[0])  # the label's top-1: first best-graded procedure
        rows.append(dict(query_id=len(rows), text=_clean(text), intent=spec.intent,
                         split=split_of[int(service_of[target])], target_procedure_id=target,
                         service_id=int(service_of[target]), site=proc["site"],
                         grade3_families=list(spec.grade3_families), grade2_families=list(spec.grade2_families),
                         variant=spec.variant))
    return pd.DataFrame(rows)


def grade_matrix(queries: pd.DataFrame, procedures: pd.DataFrame) -> np.ndarray:
    """Graded relevance (n_queries × n_procedures); see :func:`grade_row`."""
    arrays = _arrays(procedures)
    return np.stack([grade_row(q.site, tuple(q.grade3_families), tuple(q.grade2_families), q.variant, *arrays)
                     for q in queries.itertuples(index=False)]) if len(queries) else np.zeros((0, len(procedures)), np.int8)


def domain_corpus(services: pd.DataFrame, procedures: pd.DataFrame) -> list[str]:
    """Sentences for domain-adaptive MLM: catalogue entries and condition→procedure knowledge (no queries)."""
    lines = [f"{r.name}. covered under {r.coverage}." for r in services.itertuples(index=False)]
    lines += [f"{r.name} is a {lx.CATEGORY_BY_KEY[r.category].formal} procedure." for r in procedures.itertuples(index=False)]
    for cond in lx.CONDITIONS:
        for site in lx.SITES:
            if site.kind not in cond.kinds:
                continue
            for symptom in cond.symptoms:
                fams = [lx.FAMILY_BY_KEY[f] for f in cond.families if site.kind in lx.FAMILY_BY_KEY[f].kinds]
                if fams:
                    procs = ", ".join(_clean(f.formal.format(site=site.formal, variant="")) for f in fams)
                    lines.append(f"{cond.lay_name} of the {site.formal}: when {symptom.format(site=site.lay[0])}, "
                                 f"consider {procs}.")
    for fam in lx.FAMILIES:
        lines.append(f"{_clean(fam.formal.format(site='affected site', variant=''))} is also called {' or '.join(fam.lay)}.")
    for site in lx.SITES:
        lines.append(f"the {site.formal} is what patients call the {' or the '.join(site.lay)}.")
    return lines


# ---------------------------------------------------------------- label audit
def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _fuzzy_in(phrase: str, text_tokens: list[str], cutoff: float = 0.8) -> int:
    """End position (token index) of the last fuzzy occurrence of ``phrase`` in the text, −1 if none."""
    p = _tokens(phrase)
    n = len(p)
    best = -1
    for i in range(len(text_tokens) - n + 1):
        window = " ".join(text_tokens[i:i + n])
        if difflib.SequenceMatcher(None, window, " ".join(p)).ratio() >= cutoff:
            best = i + n  # end position: "nerve in my wrist" and "wrist" end together
    return best


def audit_judge(query_text: str, procedure: dict) -> bool:
    """An independent rule set re-judging whether ``procedure`` is an appropriate top-1.

    It sees only the query text and the procedure's catalogue entry: it finds the body
    site the query is about (the last one mentioned, tolerant to typos) and the families
    the words point to (a named procedure, a named category, or the condition whose
    symptom phrases overlap most), and accepts the procedure when both agree.
    """
    toks = _tokens(query_text)
    # body site: the last-mentioned one wins (distractor sites come first in the templates)
    site_pos = {}
    for site in lx.SITES:
        pos = max(_fuzzy_in(name, toks) for name in (*site.lay, site.formal))
        if pos >= 0:
            site_pos[site.formal] = pos
    if not site_pos:
        return False
    last = max(site_pos.values())
    sites = {s for s, p in site_pos.items() if p == last}
    if procedure["site"] not in sites:
        return False
    fam = lx.FAMILY_BY_KEY[procedure["family"]]
    named = [f for f in lx.FAMILIES if any(_fuzzy_in(l, toks, 0.85) >= 0 for l in f.lay if len(_tokens(l)) > 0)]
    if named:
        return fam in named or any(f.category == fam.category for f in named)
    cats = [c for c in lx.CATEGORIES if any(_fuzzy_in(l, toks, 0.85) >= 0 for l in c.lay)]
    if cats:
        return fam.category in {c.key for c in cats}
    qset = set(toks)
    best, best_score = None, 0.0
    for cond in lx.CONDITIONS:
        for s in cond.symptoms:
            st = set(_tokens(s.replace("{site}", "")))
            score = len(qset & st) / max(1, len(st))
            if score > best_score:
                best, best_score = cond, score
        if any(_fuzzy_in(cond.lay_name, toks, 0.85) >= 0 for _ in (0,)):
            best, best_score = cond, 2.0
    return best is not None and fam.key in best.families
