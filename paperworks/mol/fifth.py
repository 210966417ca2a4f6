"""Add a fifth specialist to a deployment of four, without touching them (issue 18, beyond the paper).

The new capability is **sql**: the same workplace request answered as a one-line query of a small SQL subset,

    `` select id from invoices where owner=ana and status=open limit 3``

with its own external verifier (:func:`verify_sql`): a regex parser of the subset (``select id|count from <table>
where <field>=<value> [and …] [limit n]``) and an interpreter run on the world's hidden tables, compared with the
reference query's result — so a query with its conditions in another order passes; nothing of the model's text is
ever executed as Python; the parsed query must also equal the reference's up to the order of its conditions (on 30-row
hidden tables ``limit 3`` and ``limit 4`` often return the same rows). The base never saw a query (its corpus has the words, not the format).

:func:`add_specialist` is the operation a team runs to add a specialist to a live deployment: the four served
adapters are loaded as named adapters of ONE peft model on the frozen base, a fifth named adapter is added and
trained alone (``set_adapter`` makes only it trainable; the optimizer takes ``requires_grad`` parameters only), and
afterwards each of the four is read back out of that same model and saved again: the check is that those files are
byte-identical to the served ones (sha256), and that their suites' per-item verified results are unchanged.
"""
from __future__ import annotations

import re
from dataclasses import asdict
from typing import Sequence

import numpy as np

from paperworks.mol import world as W

CAPABILITY = "sql"
# cue phrases of the new capability: none shares a word with the four capabilities' cues or rule keywords
CUES = ("in sql,", "as sql please,", "sql for this:", "select rows with sql:")
_SQL = re.compile(r"^select (id|count) from ([a-z]+)((?: (?:where|and) (?:owner|status)=[a-z]+)*)(?: limit ([0-9]))?$")
_COND = re.compile(r" (where|and) (owner|status)=([a-z]+)")


def target(req: W.Request) -> str:
    """The reference query of ``req`` (the new specialist's training target)."""
    return f" select id from {req.obj} where owner={req.owner} and status={req.status} limit {req.limit}"


def parse_sql(query: str) -> tuple[str, str, frozenset, int | None]:
    """(select what, table, the set of (field, value) conditions, limit) of a query of the subset; ``W.DSLError`` else."""
    m = _SQL.match(query.strip())
    if m is None:
        raise W.DSLError(f"not a query of the subset: {query.strip()[:60]!r}")
    what, table, conds, limit = m.groups()
    parts = _COND.findall(conds)
    if parts and (parts[0][0] != "where" or any(k != "and" for k, _, _ in parts[1:])):
        raise W.DSLError("conditions must read 'where …' then 'and …'")
    return what, table, frozenset((f, v) for _, f, v in parts), None if limit is None else int(limit)


def run_sql(query: str, tables: dict[str, list[dict]]):
    """Evaluate a query of the subset over ``tables``; a malformed query raises ``W.DSLError``."""
    what, table, conds, limit = parse_sql(query)
    if table not in tables:
        raise W.DSLError(f"unknown table {table!r}")
    rows = [r for r in tables[table] if all(r[f] == v for f, v in conds)]
    if limit is not None:
        rows = rows[:limit]
    return len(rows) if what == "count" else [r["id"] for r in rows]


def verify_sql(req: W.Request, text: str, tables: Sequence[dict[str, list[dict]]]) -> bool:
    """The reference query up to the order of its conditions (parsed: the same selection, table, set of conditions and
    limit — the hidden tables alone cannot tell ``limit 3`` from ``limit 4`` when fewer rows match), and the same
    result on every hidden table set."""
    try:
        return parse_sql(text) == parse_sql(target(req)) and all(run_sql(text, t) == run_sql(target(req), t) for t in tables)
    except W.DSLError:
        return False


def verify(capability: str, req: W.Request, text: str, tables) -> bool:
    """The world's verifiers plus the fifth capability's."""
    return verify_sql(req, text, tables) if capability == CAPABILITY else W.verify(capability, req, text, tables)


def make_items(rng: np.random.Generator, n: int, exclude: frozenset[str] = frozenset()) -> list[dict]:
    """Single-turn items of the new capability (a strong cue on every prompt; no weak or neutral cues)."""
    out = []
    for _ in range(n):
        req = W.fresh_request(rng, exclude)
        cue = str(rng.choice(CUES))
        out.append({"capability": CAPABILITY, "prompt": W.prompt_text(req, cue), "target": target(req), "cue": cue, **asdict(req)})
    return out


def build_data(world: dict, wp, rng_for) -> dict[str, list[dict]]:
    """train / dev / test items of the new capability at the world's sizes. The test suite repeats no request of any
    training or dev split (the four capabilities' and its own) nor of the four capabilities' suites and test
    conversations; dev repeats no training request of its own."""
    body = lambda x: W.request_from_dict(x).body()  # noqa: E731
    seen = frozenset(body(x) for s in ("train", "dev", "test") for items in world[s].values() for x in items) | {
        body(x) for x in world["test_conversations"]}
    train = make_items(rng_for("train"), wp.train_per_capability)
    dev = make_items(rng_for("dev"), wp.dev_per_capability, frozenset(body(x) for x in train))
    used = seen | {body(x) for x in train + dev}
    test = make_items(rng_for("test"), wp.test_per_capability, used)
    check_disjoint(world, {"train": train, "dev": dev, "test": test})
    return {"train": train, "dev": dev, "test": test}


def check_disjoint(world: dict, data: dict[str, list[dict]]) -> None:
    body = lambda x: W.request_from_dict(x).body()  # noqa: E731
    trained = {body(x) for s in ("train", "dev") for items in world[s].values() for x in items} | {body(x) for x in data["train"] + data["dev"]}
    leaked = sorted(trained & {body(x) for x in data["test"]})
    if leaked:
        raise ValueError(f"{len(leaked)} requests of the {CAPABILITY} test suite occur in training/dev data, e.g. {leaked[0]!r}")


# ------------------------------------------------------------------ the operation: add one adapter to a deployment
def load_named(model, name: str, tensors: dict) -> None:
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, tensors, adapter_name=name)
    bad = [k for k in getattr(result, "unexpected_keys", []) if "lora" in k]
    if bad:
        raise ValueError(f"adapter {name}: {len(bad)} tensors fit no LoRA module, e.g. {bad[0]}")


def adapter_tensors(model, name: str) -> dict:
    """One named adapter's LoRA tensors, keyed as peft saves a single adapter (what ``save_adapter`` writes)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().contiguous().clone() for k, v in get_peft_model_state_dict(model, adapter_name=name).items()}


def deployment(base, rank: int, alpha_over_rank: float, served: dict[str, dict], seed: int):
    """One peft model on a copy of the frozen base holding every adapter of ``served`` (name → tensors) by name."""
    from peft import LoraConfig

    from paperworks.mol.models import LORA_TARGETS, lora_model

    names = list(served)
    model = lora_model(base, rank, alpha_over_rank, seed)  # its "default" adapter is replaced below
    cfg = LoraConfig(r=rank, lora_alpha=alpha_over_rank * rank, lora_dropout=0.0, target_modules=list(LORA_TARGETS), bias="none",
                     task_type="CAUSAL_LM")
    for name in names:
        model.add_adapter(name, cfg)
        load_named(model, name, served[name])
    model.set_adapter(names[0])
    model.delete_adapter("default")
    for param in model.parameters():
        param.requires_grad_(False)
    return model.eval()


def add_specialist(model, name: str, rank: int, alpha_over_rank: float, seed: int):
    """Add ``name`` as a new, trainable LoRA of ``model`` (the others stay frozen); returns the model, ``name`` active."""
    import torch
    from peft import LoraConfig

    from paperworks.mol.models import LORA_TARGETS

    torch.manual_seed(seed)  # the new adapter's LoRA A init
    model.add_adapter(name, LoraConfig(r=rank, lora_alpha=alpha_over_rank * rank, lora_dropout=0.0, target_modules=list(LORA_TARGETS),
                                       bias="none", task_type="CAUSAL_LM"))
    model.set_adapter(name)  # peft: the active adapter's LoRA requires grad, every other adapter's does not
    others = [n for n, p in model.named_parameters() if p.requires_grad and f".{name}." not in n]
    if others:
        raise RuntimeError(f"adding {name}: {len(others)} parameters of other adapters or the base would train, e.g. {others[0]}")
    return model.train()
