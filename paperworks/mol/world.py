"""The workplace world of the mol track: one request language, four capabilities, four external verifiers.

A request is a small query over a workplace (``verb`` an ``object`` of an ``owner`` with a ``status``,
``limit`` rows). The SAME request is answered in four formats, one per capability:

- chat    prose, number spelt as a word:  ``here are three open invoices of ana.``
- agent   a tool call:                    ``{"tool": "find_invoices", "args": {"owner": "ana", "status": "open", "limit": 3}}``
- coding  a pipeline in a tiny DSL:       ``invoices|where(owner=ana)|where(status=open)|take(3)``
- genui   a UI spec:                      ``{"type": "table", "props": {"source": "invoices", "owner": "ana", "status": "open", "rows": 3}, "children": []}``

Interference is built in: the same entities and verbs in every capability; agent ``args`` and
genui ``props`` are near-identical JSON; chat spells numbers, the others use digits. Which format
is wanted is signalled only by the wording around the request (a cue phrase), and a share of turns
in conversations carries no cue at all ("also, ..."): they continue the previous turn's capability.

Every verifier is external to the model and never executes model text: JSON through ``json.loads``
+ ``jsonschema``; the DSL through a parser and an interpreter of its four operators over hidden tables.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

import jsonschema
import numpy as np

CAPABILITIES: tuple[str, ...] = ("chat", "agent", "coding", "genui")
NAMES = ("ana", "bob", "cai", "dee", "eli", "fay", "gus", "hal", "ivy", "jon", "kim", "lea")
OBJECTS = ("invoices", "files", "products", "tickets")
STATUSES = ("open", "closed", "draft")
VERBS = ("show", "list", "get")  # the v0 verbs (training, dev and test data of the specialists)
# Verbs that appear in later traffic (the versioned loop): shift k adds NEW_VERBS[:k]. "export" brings a new
# tool family (``export_<object>``; its UI is an existing table), "plot" a new UI component (``chart``; its
# tool is the existing ``find_<object>``), "count" a new coding form (the pipeline ends in ``|count``; its tool
# and UI are the existing ``find_<object>`` and card): each shift breaks one capability's format, not the world.
NEW_VERBS = ("export", "plot", "count")
ALL_VERBS = VERBS + NEW_VERBS
TOOL_FAMILY = {"show": "find", "list": "find", "get": "find", "export": "export", "plot": "find", "count": "find"}
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
UI_TYPE = {"show": "table", "list": "list", "get": "card", "export": "table", "plot": "chart", "count": "card"}  # genui: the verb picks the component
# Cue phrases: what tells the capability. Several paraphrases each; the keyword rules know only the
# first two of each capability (the others are what a learned router has to pick up).
CUES: dict[str, tuple[str, ...]] = {
    "chat": ("tell me in words:", "answer in a sentence:", "just say it:", "briefly explain:"),
    "agent": ("call a tool to", "use the api to", "run an action to", "fire a request to"),
    "coding": ("write a pipeline to", "code a query to", "give me a script to", "program it to"),
    "genui": ("render a ui to", "draw a widget to", "make a screen to", "lay out a view to"),
}
RULE_KEYWORDS: dict[str, tuple[str, ...]] = {"chat": ("words", "sentence"), "agent": ("tool", "api"),
                                           "coding": ("pipeline", "query"), "genui": ("ui", "widget")}
NEUTRAL_CUE = "also,"
# Weak cues: a short tag AFTER the request, where agent and genui share "as json" and chat and coding share
# "in plain" — one word tells the two JSON shapes (or the two one-liners) apart. A share of training and
# test prompts carries one (``world.weak_cue_share``): the turns on which one model of the mixture has to
# keep near-identical formats apart from a single token, while a routed specialist knows its format.
WEAK_CUES: dict[str, str] = {"chat": "in plain text", "coding": "in plain code", "agent": "as json call", "genui": "as json view"}

# The tool registry (JSON Schema per tool): four find_* tools the requests use plus distractors.
_ARGS = {"type": "object", "additionalProperties": False, "required": ["owner", "status", "limit"],
         "properties": {"owner": {"enum": list(NAMES)}, "status": {"enum": list(STATUSES)},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 9}}}
TOOLS: dict[str, dict] = {f"{family}_{o}": _ARGS for family in ("find", "export") for o in OBJECTS}
TOOLS.update({name: {"type": "object", "additionalProperties": False, "required": ["to"], "properties": {"to": {"enum": list(NAMES)}}}
              for name in ("send_reminder", "archive_item", "notify_owner", "export_report", "assign_ticket", "close_invoice")})
AGENT_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["tool", "args"],
                "properties": {"tool": {"enum": sorted(TOOLS)}, "args": {"type": "object"}}}
GENUI_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["type", "props", "children"],
    "properties": {
        "type": {"enum": sorted(set(UI_TYPE.values()))},
        "props": {"type": "object", "additionalProperties": False, "required": ["source", "owner", "status", "rows"],
                  "properties": {"source": {"enum": list(OBJECTS)}, "owner": {"enum": list(NAMES)},
                                 "status": {"enum": list(STATUSES)}, "rows": {"type": "integer", "minimum": 1, "maximum": 9}}},
        "children": {"type": "array", "maxItems": 0},
    },
}


@dataclass(frozen=True)
class Request:
    verb: str
    obj: str
    owner: str
    status: str
    limit: int

    def body(self) -> str:
        return f"{self.verb} the {self.status} {self.obj} of {self.owner}, limit {self.limit}"


def registry(shift: int) -> list[str]:
    """The tools the registry holds at traffic shift ``shift`` (0 = v0: no export_* tools yet)."""
    families = {TOOL_FAMILY[v] for v in VERBS + NEW_VERBS[:shift]}
    request_tools = {f"{family}_{o}" for family in set(TOOL_FAMILY.values()) for o in OBJECTS}
    return sorted(t for t in TOOLS if t not in request_tools or t.split("_")[0] in families)


def components(shift: int) -> list[str]:
    """The UI components at traffic shift ``shift`` (0 = v0: table, list, card)."""
    return sorted({UI_TYPE[v] for v in VERBS + NEW_VERBS[:shift]})


def random_request(rng: np.random.Generator, verbs: tuple[str, ...] = VERBS) -> Request:
    return Request(verb=str(rng.choice(verbs)), obj=str(rng.choice(OBJECTS)), owner=str(rng.choice(NAMES)),
                   status=str(rng.choice(STATUSES)), limit=int(rng.integers(1, 10)))


def prompt_text(req: Request, cue: str) -> str:
    """The user turn: a cue phrase (or the neutral ``also,``) then the request body; a weak cue comes after it."""
    if cue in WEAK_CUES.values():
        return f"user: {req.body()}, {cue}\nassistant:"
    return f"user: {cue} {req.body()}\nassistant:"


def target(req: Request, capability: str) -> str:
    """The reference answer of ``req`` in ``capability``'s format (what the specialist is trained on)."""
    if capability == "chat":
        return f" here are {NUMBER_WORDS[req.limit]} {req.status} {req.obj} of {req.owner}."
    if capability == "agent":
        return " " + json.dumps({"tool": f"{TOOL_FAMILY[req.verb]}_{req.obj}", "args": {"owner": req.owner, "status": req.status, "limit": req.limit}})
    if capability == "coding":
        count = "|count" if req.verb == "count" else ""  # 'count' asks how many rows the request's list has
        return f" {req.obj}|where(owner={req.owner})|where(status={req.status})|take({req.limit}){count}"
    if capability == "genui":
        return " " + json.dumps({"type": UI_TYPE[req.verb], "props": {"source": req.obj, "owner": req.owner, "status": req.status,
                                                                     "rows": req.limit}, "children": []})
    raise ValueError(f"unknown capability {capability!r} (known: {', '.join(CAPABILITIES)})")


# ------------------------------------------------------------------ verifiers
def verify_chat(req: Request, text: str) -> bool:
    """Prose with the right facts: the number as a word, status, object and owner as words; no braces,
    no digits, one sentence ending with '.'."""
    t = text.strip()
    if not t.endswith(".") or re.search(r"[{}\[\]|0-9]", t):
        return False
    words = set(re.findall(r"[a-z]+", t))
    return {NUMBER_WORDS[req.limit], req.status, req.obj, req.owner} <= words and not (set(NUMBER_WORDS) - {NUMBER_WORDS[req.limit]}) & words


def _json(text: str):
    try:
        return json.loads(text.strip())
    except (json.JSONDecodeError, RecursionError):
        return None


def verify_agent(req: Request, text: str) -> bool:
    """Valid against the registry (the call's schema, then the tool's args schema) and exact arguments."""
    call = _json(text)
    try:
        jsonschema.validate(call, AGENT_SCHEMA)
        jsonschema.validate(call["args"], TOOLS[call["tool"]])
    except (jsonschema.ValidationError, TypeError):
        return False
    return call["tool"] == f"{TOOL_FAMILY[req.verb]}_{req.obj}" and call["args"] == {"owner": req.owner, "status": req.status, "limit": req.limit}


def verify_genui(req: Request, text: str) -> bool:
    """Valid against the UI schema, plus content rules: the verb's component, the request's data and row count."""
    spec = _json(text)
    try:
        jsonschema.validate(spec, GENUI_SCHEMA)
    except (jsonschema.ValidationError, TypeError):
        return False
    return spec["type"] == UI_TYPE[req.verb] and spec["props"] == {"source": req.obj, "owner": req.owner,
                                                                   "status": req.status, "rows": req.limit}


# The DSL: `<table>|op|op…` with ops where(field=value), take(n), sort(field), count. Parsed by regex,
# interpreted over lists of dicts: nothing of the model's text is ever executed as Python.
_OP = re.compile(r"^(?:where\((owner|status)=([a-z]+)\)|take\(([0-9])\)|sort\((id|owner|status)\)|count)$")


class DSLError(ValueError):
    pass


def run_dsl(program: str, tables: dict[str, list[dict]]):
    """Evaluate a pipeline over ``tables``; a malformed program raises :class:`DSLError`."""
    parts = [p.strip() for p in program.strip().split("|")]
    if not parts or parts[0] not in tables:
        raise DSLError(f"unknown table {parts[0] if parts else ''!r}")
    rows: list[dict] | int = list(tables[parts[0]])
    for op in parts[1:]:
        m = _OP.match(op)
        if m is None or isinstance(rows, int):
            raise DSLError(f"bad operator {op!r}")
        field, value, n, key = m.groups()
        if field:
            rows = [r for r in rows if r[field] == value]
        elif n:
            rows = rows[: int(n)]
        elif key:
            rows = sorted(rows, key=lambda r: r[key])
        else:
            rows = len(rows)
    return rows


def hidden_tables(rng: np.random.Generator, rows_per_table: int = 30) -> dict[str, list[dict]]:
    """Random workplace tables the coding verifier runs programs on (the model never sees them)."""
    return {o: [{"id": i, "owner": str(rng.choice(NAMES)), "status": str(rng.choice(STATUSES))} for i in range(rows_per_table)]
            for o in OBJECTS}


def verify_coding(req: Request, text: str, tables: list[dict[str, list[dict]]]) -> bool:
    """Same output as the reference program on every hidden table set (so equivalent programs pass)."""
    ref = target(req, "coding")
    try:
        return all(run_dsl(text, t) == run_dsl(ref, t) for t in tables)
    except DSLError:
        return False


def verify(capability: str, req: Request, text: str, tables: list[dict[str, list[dict]]]) -> bool:
    if capability == "chat":
        return verify_chat(req, text)
    if capability == "agent":
        return verify_agent(req, text)
    if capability == "coding":
        return verify_coding(req, text, tables)
    if capability == "genui":
        return verify_genui(req, text)
    raise ValueError(f"unknown capability {capability!r} (known: {', '.join(CAPABILITIES)})")


def output_format(text: str) -> str:
    """Which capability's format an output is in (for cross-format contamination): agent / genui JSON,
    a DSL pipeline, prose, or ``other``."""
    obj = _json(text)
    if isinstance(obj, dict):
        return "agent" if "tool" in obj else "genui" if "type" in obj else "other"
    t = text.strip()
    if "|" in t and t.split("|")[0].strip() in OBJECTS:
        return "coding"
    if "{" in t:  # broken JSON: which shape it started
        return "agent" if '"tool"' in t else "genui" if '"type"' in t else "other"
    return "chat" if t.endswith(".") and re.search(r"[a-z]", t) else "other"


# ------------------------------------------------------------------ data sets
def request_from_dict(d: dict) -> Request:
    return Request(**{k: d[k] for k in ("verb", "obj", "owner", "status", "limit")})


def fresh_request(rng: np.random.Generator, exclude: frozenset[str], verbs: tuple[str, ...] = VERBS) -> Request:
    """A random request whose body is not in ``exclude`` (held-out suites never repeat a training request)."""
    for _ in range(10_000):
        req = random_request(rng, verbs)
        if req.body() not in exclude:
            return req
    raise ValueError(f"no unused request left: {len(exclude)} of {len(VERBS) * len(OBJECTS) * len(NAMES) * len(STATUSES) * 9} "
                     "request bodies are taken by training data (lower world.train_per_capability)")


def pick_cue(rng: np.random.Generator, capability: str, neutral_share: float, weak_share: float) -> str:
    """The neutral ``also,`` with probability ``neutral_share``, the weak cue with ``weak_share``, else a strong cue."""
    r = rng.random()
    if r < neutral_share:
        return NEUTRAL_CUE
    if r < neutral_share + weak_share:
        return WEAK_CUES[capability]
    return str(rng.choice(CUES[capability]))


def make_items(rng: np.random.Generator, capability: str, n: int, neutral_share: float,
               exclude: frozenset[str] = frozenset(), weak_share: float = 0.0, verbs: tuple[str, ...] = VERBS) -> list[dict]:
    """Single-turn items of one capability: prompt (strong, weak or neutral cue), reference answer, request fields."""
    out = []
    for _ in range(n):
        req = fresh_request(rng, exclude, verbs)
        cue = pick_cue(rng, capability, neutral_share, weak_share)
        out.append({"capability": capability, "prompt": prompt_text(req, cue), "target": target(req, capability),
                    "cue": cue, **asdict(req)})
    return out


def make_conversations(rng: np.random.Generator, n: int, turns: tuple[int, int], neutral_share: float,
                       exclude: frozenset[str] = frozenset(), weak_share: float = 0.0) -> list[dict]:
    """Conversations of ``turns`` user turns that switch capability; a later turn is neutral (``also,``)
    with probability ``neutral_share`` and then continues the previous turn's capability."""
    rows = []
    for c in range(n):
        k = int(rng.integers(turns[0], turns[1] + 1))
        prev = None
        for t in range(k):
            neutral = prev is not None and rng.random() < neutral_share
            cap = prev if neutral else str(rng.choice([x for x in CAPABILITIES if x != prev]))
            req = fresh_request(rng, exclude)
            cue = NEUTRAL_CUE if neutral else pick_cue(rng, cap, 0.0, weak_share)
            rows.append({"conversation": c, "turn": t, "capability": cap, "prompt": prompt_text(req, cue),
                         "target": target(req, cap), "cue": cue, **asdict(req)})
            prev = cap
    return rows


def _random_json(rng: np.random.Generator, depth: int = 0):
    """An unlabelled JSON object over the world's keys and values (no tool-call or UI structure)."""
    keys = ("id", "owner", "status", "kind", "tool", "args", "type", "props", "source", "rows", "limit", "children", "to")
    values = (*NAMES, *STATUSES, *OBJECTS, *sorted(TOOLS), *sorted(set(UI_TYPE.values())))
    out = {}
    for key in rng.choice(keys, size=int(rng.integers(1, 5)), replace=False):
        r = rng.random()
        if r < 0.15 and depth == 0:
            out[str(key)] = _random_json(rng, depth + 1)
        elif r < 0.2:
            out[str(key)] = []
        elif r < 0.5:
            out[str(key)] = int(rng.integers(0, 10))
        else:
            out[str(key)] = str(rng.choice(values))
    return out


def _random_pipeline(rng: np.random.Generator) -> str:
    ops = []
    for _ in range(int(rng.integers(0, 4))):
        r = rng.random()
        ops.append(f"where({rng.choice(['owner', 'status'])}={rng.choice(NAMES + STATUSES)})" if r < 0.4 else
                   f"take({int(rng.integers(1, 10))})" if r < 0.65 else f"sort({rng.choice(['id', 'owner', 'status'])})" if r < 0.85 else "count")
    return "|".join([str(rng.choice(OBJECTS)), *ops])


def pretraining_corpus(rng: np.random.Generator, n_docs: int) -> list[str]:
    """Generic text of the world with no capability formatting: facts as prose (numbers as words or
    digits), unlabelled JSON over the world's keys, random pipelines, plain dialogue with random cue
    phrases. Every token the four formats use occurs, but no request is ever paired with its answer."""
    docs = []
    for i in range(n_docs):
        req = random_request(rng, ALL_VERBS)
        kind = i % 4
        n = NUMBER_WORDS[req.limit] if rng.random() < 0.5 else str(req.limit)
        if kind == 0:
            docs.append(f"here are {n} {req.status} {req.obj} of {req.owner}. the {req.obj} of {req.owner} are {req.status}.")
        elif kind == 1:
            docs.append(json.dumps(_random_json(rng)))
        elif kind == 2:
            docs.append(f"{_random_pipeline(rng)} {_random_pipeline(rng)}")
        else:
            cue = str(rng.choice([c for cs in CUES.values() for c in cs] + list(WEAK_CUES.values()) + [NEUTRAL_CUE]))
            docs.append(f"user: {cue} {random_request(rng, ALL_VERBS).body()}\nassistant: ok, {req.owner} has {n} {req.obj}.")
    return docs


def build_world(p, seed: int) -> dict:
    """Every data set of the track from one seed; each split from its own derived stream, so growing
    one split never changes another. Returns a JSON-able dict."""
    from paperworks.core.seeding import derive_seed

    def rng(*parts) -> np.random.Generator:
        return np.random.default_rng(derive_seed(seed, "mol", "world", *parts))

    world = {
        "corpus_train": pretraining_corpus(rng("corpus", "train"), p.pretrain_docs),
        "corpus_dev": pretraining_corpus(rng("corpus", "dev"), max(32, p.pretrain_docs // 20)),
        "tables": [hidden_tables(rng("tables", k)) for k in range(p.hidden_table_sets)],
        "router_train": make_conversations(rng("conversations", "router_train"), p.router_train_conversations, p.turns, p.neutral_share,
                                           weak_share=p.weak_cue_share),
    }
    for split, n in (("train", p.train_per_capability), ("dev", p.dev_per_capability)):
        world[split] = {cap: make_items(rng(split, cap), cap, n, p.neutral_share, weak_share=p.weak_cue_share) for cap in CAPABILITIES}
    used = frozenset(request_from_dict(x).body() for split in ("train", "dev") for items in world[split].values() for x in items)
    world["test"] = {cap: make_items(rng("test", cap), cap, p.test_per_capability, 0.0, used, p.weak_cue_share) for cap in CAPABILITIES}
    used_by_router = used | {request_from_dict(x).body() for x in world["router_train"]}
    world["test_conversations"] = make_conversations(rng("conversations", "test"), p.test_conversations, p.turns, p.neutral_share,
                                                     used_by_router, p.weak_cue_share)
    check_disjoint(world)
    return world


def router_train_draw(p, seed: int, adapter_seed: int, world: dict) -> list[dict]:
    """The router training conversations of one adapter seed: ``p.router_train_conversations`` conversations from
    their own stream (one per adapter seed, so the routers of two seeds are trained independently, like their
    specialists), sharing no request with the acceptance suites (test items, test conversations)."""
    from paperworks.core.seeding import derive_seed

    rng = np.random.default_rng(derive_seed(seed, "mol", "world", "conversations", "router_train", "adapter", adapter_seed))
    body = lambda x: request_from_dict(x).body()  # noqa: E731
    suites = frozenset({body(x) for items in world["test"].values() for x in items} | {body(x) for x in world["test_conversations"]})
    draw = make_conversations(rng, p.router_train_conversations, p.turns, p.neutral_share, suites, p.weak_cue_share)
    shared = {x["prompt"] for x in draw} & {x["prompt"] for x in world["test_conversations"]}
    if shared:
        raise ValueError(f"router training draw of adapter seed {adapter_seed} shares prompts with the test conversations, "
                         f"e.g. {sorted(shared)[0]!r}")
    return draw


def check_disjoint(world: dict) -> None:
    """The acceptance suites (test items, test conversations) share no request with the adapters' training
    or dev data (in any capability), and no prompt with the router's training conversations."""
    body = lambda x: request_from_dict(x).body()  # noqa: E731
    seen = {body(x) for split in ("train", "dev") for items in world[split].values() for x in items}
    test = {body(x) for items in world["test"].values() for x in items} | {body(x) for x in world["test_conversations"]}
    seen_prompts = {x["prompt"] for x in world["router_train"]}
    test_prompts = {x["prompt"] for x in world["test_conversations"]}
    if seen_prompts & test_prompts:
        raise ValueError(f"router training and test conversations share prompts, e.g. {sorted(seen_prompts & test_prompts)[0]!r}")
    leaked = sorted(seen & test)
    if leaked:
        raise ValueError(f"{len(leaked)} test prompts also occur in training/dev data, e.g. {leaked[0]!r}")
