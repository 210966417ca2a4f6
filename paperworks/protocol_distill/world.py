"""The synthetic world: a seeded knowledge base, its documents and aliases, and seven question sets.

Designed so that a search *protocol* is genuinely useful (the calibration notes of the issue):
- question wording uses relation *paraphrases*, some ambiguous ("head" is a company's ceo but a
  city's mayor), while documents use one canonical relation word, so the literal wording finds
  the wrong document;
- some people share a name (colliding names); their documents carry a qualifier ("senior"/"junior")
  that the query must repeat, otherwise the namesake's document may come back;
- people have nicknames (aliases) that only an alias document resolves: searching the nickname
  with a relation returns the alias document, and the search has to be repaired with the real name;
- with ``doc_forms`` > 1 each fact's document writes its relation with one of several words, drawn
  per fact: which word a document uses is not in the question and not predictable from any rule,
  only a search (and a repair when the first word misses) reveals it. This is the information a
  teacher's exploration finds and its protocol carries; a student reading only the question has to
  guess or repair.
- with ``redirect_share`` > 0 (issue 15's transferable strategy) a share of the organisations and cities
  was renamed: the world still calls them by their old name (questions, answers, every document that
  names them as an object), but their own fact documents are filed under the new name, and a short
  redirect document ``<old name> see <new name>`` stands in their place. A search for the old name
  returns that document: the failure is *recognisable* (the reserved word ``see``, in no name and no
  other document) and one *general* repair fixes every instance of it: search the entity the
  redirect names, with the same relation. The teachers apply it and their protocols state it; the
  student branch's warm-start demonstrations never show it (see demos.py);
- with ``transfer_share`` > 0 a share of the people, organisations and cities forms a closed *region*:
  every fact of a region entity points inside the region and no fact outside points in, so questions
  on it (the ``transfer`` pool, test only) share no entity and no document with any training question
  or its protocol. The privileged branch reads, for them, another question's protocol (a *strategy*
  protocol): whatever it gains there transfers across instances. Every name (people, nicknames,
  organisations, cities, and the new names of renamed entities) is a combination of words from shared
  pools, and a region name only uses words that also occur in names outside the region, so the words a
  transfer question needs written are words the model writes in training (``_name_combos``).

Everything is a pure function of the seed; texts are lower-case words separated by single spaces.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

# canonical relation -> (subject type, object type)
RELATIONS: dict[str, tuple[str, str]] = {
    "employer": ("person", "org"),
    "birthplace": ("person", "city"),
    "born": ("person", "year"),
    "mentor": ("person", "person"),
    "founder": ("org", "person"),
    "headquarters": ("org", "city"),
    "ceo": ("org", "person"),
    "mayor": ("city", "person"),
}
# how questions name a relation; the first form is the canonical word, "head"/"leader" are ambiguous
SURFACES: dict[str, list[str]] = {
    "employer": ["employer", "workplace", "company"],
    "birthplace": ["birthplace", "hometown", "native city"],
    "born": ["born", "birth year", "year of birth"],
    "mentor": ["mentor", "teacher", "advisor"],
    "founder": ["founder", "creator"],
    "headquarters": ["headquarters", "base city"],
    "ceo": ["ceo", "head", "leader"],
    "mayor": ["mayor", "head", "leader"],
}
# the words documents may write a relation with (single words, disjoint across relations; name words
# never take them, see build_world); with doc_forms = k, each fact's document uses one of the first k,
# drawn per fact
DOC_FORMS: dict[str, tuple[str, ...]] = {
    "employer": ("employer", "workplace", "job"),
    "birthplace": ("birthplace", "hometown", "origin"),
    "born": ("born", "birthyear", "yob"),
    "mentor": ("mentor", "advisor", "tutor"),
    "founder": ("founder", "creator", "originator"),
    "headquarters": ("headquarters", "base", "seat"),
    "ceo": ("ceo", "chief", "boss"),
    "mayor": ("mayor", "governor", "alderman"),
}
ORG_SUFFIXES = ("labs", "guild", "works", "company")
# the word a redirect document uses; reserved (no name takes it), so a document containing it is a redirect
REDIRECT_WORD = "see"
YEARS = tuple(range(1850, 1950))

# the seven question sets standing in for the paper's seven benchmarks
QUESTION_SETS: dict[str, str] = {
    "nq": "single_hop",            # canonical relation word
    "triviaqa": "single_hop",      # paraphrased relation word
    "popqa": "single_hop",         # subject named by an alias
    "hotpotqa": "multi_hop_bridge",
    "2wiki": "comparison",
    "musique": "multi_hop_compositional",
    "bamboogle": "multi_hop_bridge",  # bridge whose subject is an alias or a colliding name
}
MULTI_HOP_SETS = ("hotpotqa", "2wiki", "musique", "bamboogle")
POOLS = ("warm", "online", "test")
TRANSFER_POOL = "transfer"   # test questions on the closed region (transfer_share > 0)


@dataclass(frozen=True)
class WorldConfig:
    n_persons: int = 120
    n_orgs: int = 30
    n_cities: int = 20
    n_collisions: int = 12          # people who share their name with another person
    doc_forms: int = 1              # relation words a fact's document may use (1 = always the canonical one)
    redirect_share: float = 0.0     # share of organisations and of cities filed under a new name (0 = no redirects)
    transfer_share: float = 0.0     # share of people, organisations and cities in the closed transfer region (0 = none)
    questions_per_set: dict[str, int] = field(default_factory=lambda: {"warm": 160, "online": 160, "test": 60})


@dataclass
class Entity:
    eid: str
    etype: str
    name: str            # the display name used in documents and answers (with qualifier if colliding)
    base_name: str       # the name without qualifier
    alias: str | None = None
    filed_as: str | None = None  # renamed: its own fact documents use this name; a redirect document points to it


@dataclass
class World:
    entities: dict[str, Entity]
    facts: dict[tuple[str, str], str]      # (subject eid, relation) -> object eid or year string
    docs: list[str]
    alias_of: dict[str, str]               # alias -> eid
    subject_pool: dict[str, str]           # eid -> pool of questions asked about it
    doc_word: dict[tuple[str, str], str] = field(default_factory=dict)  # (subject, relation) -> word its document uses

    def relation_word(self, subject: str, relation: str) -> str:
        return self.doc_word.get((subject, relation), relation)

    def filed_name(self, eid: str) -> str:
        """The name the entity's own fact documents start with (its new name if it was renamed)."""
        e = self.entities[eid]
        return e.filed_as or e.name

    def redirect_doc(self, eid: str) -> str | None:
        e = self.entities[eid]
        return f"{e.name} {REDIRECT_WORD} {e.filed_as}" if e.filed_as else None

    def region(self) -> set[str]:
        """The closed transfer region's entities (empty without transfer_share)."""
        return {e for e, pool in self.subject_pool.items() if pool == TRANSFER_POOL}

    def display(self, value: str) -> str:
        return self.entities[value].name if value in self.entities else value

    def kind(self, value: str) -> str:
        return self.entities[value].etype if value in self.entities else "year"

    def fact_doc(self, subject: str, relation: str) -> str:
        word = self.relation_word(subject, relation)
        return f"{self.filed_name(subject)} {word} {self.display(self.facts[(subject, relation)])}"


def is_redirect(doc: str) -> bool:
    """The failure signal a model can read: a redirect document is the only one with the reserved word."""
    return REDIRECT_WORD in doc.split()


def redirect_target(doc: str, mention: str) -> str | None:
    """The general repair rule's argument: ``<mention> see <target>`` → target (None if ``doc`` is not
    the redirect of ``mention``)."""
    head = f"{mention} {REDIRECT_WORD} "
    return doc[len(head):] if doc.startswith(head) and len(doc) > len(head) else None


def _syllable_words(rng: np.random.Generator, n: int, taken: set[str], min_syll: int = 2, max_syll: int = 3) -> list[str]:
    """Pronounceable made-up words, unique across every pool (``taken`` is updated)."""
    onsets = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kl", "st", "tr", "sh"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou"]
    out: list[str] = []
    while len(out) < n:
        k = int(rng.integers(min_syll, max_syll + 1))
        word = "".join(onsets[rng.integers(len(onsets))] + vowels[rng.integers(len(vowels))] for _ in range(k))
        if rng.random() < 0.5:
            word += ["n", "r", "l", "s", "x"][rng.integers(5)]
        if word not in taken:
            taken.add(word)
            out.append(word)
    return out


def _name_combos(rng: np.random.Generator, pools: tuple[list[str], ...], n_outside: int, n_region: int,
                 what: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]], list[tuple[str, ...]]]:
    """Names as combinations of one word per pool, in a random order: ``n_outside`` for the entities outside the
    transfer region, then ``n_region`` whose every word also occurs in an outside name; returns (outside,
    region, spare) where spare are the unused combinations made of outside words only (new names of renamed
    entities). Why: a word that occurs only in held-out names is never written in training, so its output
    embedding stays untrained and the model could never produce it, whatever a protocol tells it."""
    combos = list(itertools.product(*pools))
    order = [combos[i] for i in rng.permutation(len(combos))]
    if n_outside > len(order):
        raise ValueError(f"{what}: {n_outside} names asked of {len(order)} word combinations (enlarge the word pools)")
    outside = order[:n_outside]
    seen = {w for c in outside for w in c}
    rest = [c for c in order[n_outside:] if all(w in seen for w in c)]
    if len(rest) < n_region:
        raise ValueError(f"{what}: {n_region} region names asked, only {len(rest)} unused combinations of words "
                         f"used outside the region (enlarge the word pools)")
    return outside, rest[:n_region], rest[n_region:]


def build_world(cfg: WorldConfig, seed: int) -> World:
    rng = np.random.default_rng(seed)
    taken: set[str] = {w for forms in DOC_FORMS.values() for w in forms} | {REDIRECT_WORD, "alias"}  # never a name word
    # every name is a combination of words from shared pools, so each word occurs in many names and
    # the model gets to *write* it during training (see _name_combos)
    firsts = _syllable_words(rng, 40, taken)
    lasts = _syllable_words(rng, 60, taken)
    nick_heads = _syllable_words(rng, 24, taken, 2, 2)
    nick_tails = _syllable_words(rng, max(30, cfg.n_persons // 20), taken, 2, 2)
    # room for every organisation and city twice (renamed ones take a second name)
    org_words = _syllable_words(rng, max(8, cfg.n_orgs // 2), taken)
    city_heads = _syllable_words(rng, max(6, cfg.n_cities // 5), taken)
    city_tails = _syllable_words(rng, max(5, cfg.n_cities // 6, -(-2 * cfg.n_cities // max(6, cfg.n_cities // 5))), taken, 1, 2)
    cities = [f"c{i:03d}" for i in range(cfg.n_cities)]
    orgs = [f"o{i:03d}" for i in range(cfg.n_orgs)]
    persons = [f"p{i:03d}" for i in range(cfg.n_persons)]

    # the closed transfer region, from its own stream (with transfer_share = 0 it is empty)
    region: set[str] = set()
    if cfg.transfer_share > 0:
        region_rng = np.random.default_rng([seed, 4])
        for group, least in ((persons, 2), (orgs, 1), (cities, 1)):
            k = max(least, int(round(cfg.transfer_share * len(group))))
            if k >= len(group):
                raise ValueError(f"transfer_share {cfg.transfer_share} leaves no entity of a type outside the region")
            region.update(group[i] for i in region_rng.choice(len(group), size=k, replace=False))

    def assign(ids: list[str], pools: tuple[list[str], ...], what: str) -> tuple[dict[str, str], list[tuple[str, ...]]]:
        """id → name for ``ids`` (outside the region first, then the region), and the spare combinations."""
        out_ids, reg_ids = [e for e in ids if e not in region], [e for e in ids if e in region]
        outside, inside, spare = _name_combos(rng, pools, len(out_ids), len(reg_ids), what)
        return {e: " ".join(c) for e, c in zip(out_ids + reg_ids, outside + inside)}, spare

    entities: dict[str, Entity] = {}
    city_name, city_spare = assign(cities, (city_heads, city_tails), "world.n_cities")
    for eid in cities:
        entities[eid] = Entity(eid, "city", city_name[eid], city_name[eid])
    org_name, org_spare = assign(orgs, (org_words, list(ORG_SUFFIXES)), "world.n_orgs")
    for eid in orgs:
        entities[eid] = Entity(eid, "org", org_name[eid], org_name[eid])
    # colliding names: the last n_collisions people reuse a name of an earlier person
    unique = persons[:cfg.n_persons - cfg.n_collisions]
    person_name, _ = assign(unique, (firsts, lasts), "world.n_persons")
    for eid, j in zip(persons[len(unique):], rng.choice(len(unique), size=cfg.n_collisions, replace=False)):
        person_name[eid] = person_name[unique[int(j)]]
    nickname, _ = assign(persons, (nick_heads, nick_tails), "world.n_persons (nicknames)")

    # facts stay on their subject's side of the region boundary (each side's list built once, in order)
    sides = {id(g): ([x for x in g if x not in region], [x for x in g if x in region]) for g in (persons, orgs, cities)}

    def side(group: list[str], eid: str) -> list[str]:
        return sides[id(group)][eid in region] if region else group

    facts: dict[tuple[str, str], str] = {}
    for eid in persons:
        entities[eid] = Entity(eid, "person", person_name[eid], person_name[eid], alias=nickname[eid])
        o, c = side(orgs, eid), side(cities, eid)
        facts[(eid, "employer")] = o[rng.integers(len(o))]
        facts[(eid, "birthplace")] = c[rng.integers(len(c))]
        facts[(eid, "born")] = str(YEARS[rng.integers(len(YEARS))])
    for eid in persons:
        others = [p for p in side(persons, eid) if p != eid]
        facts[(eid, "mentor")] = others[rng.integers(len(others))]
    for eid in orgs:
        ps, c = side(persons, eid), side(cities, eid)
        facts[(eid, "founder")] = ps[rng.integers(len(ps))]
        facts[(eid, "headquarters")] = c[rng.integers(len(c))]
        facts[(eid, "ceo")] = ps[rng.integers(len(ps))]
    for eid in cities:
        ps = side(persons, eid)
        facts[(eid, "mayor")] = ps[rng.integers(len(ps))]

    # colliding people are told apart by a qualifier ("senior"/"junior") in documents, questions and
    # answers; a query without it ties between the namesakes' documents
    holders: dict[str, list[str]] = {}
    for eid in persons:
        holders.setdefault(entities[eid].base_name, []).append(eid)
    for group in holders.values():
        if len(group) > 1:
            for eid, qual in zip(group, ("senior", "junior")):
                entities[eid].name = f"{entities[eid].base_name} {qual}"

    # the relation word of each fact's document, from its own stream so that the entities and facts
    # above are the same for every doc_forms
    word_rng = np.random.default_rng([seed, 2])
    doc_word = {key: DOC_FORMS[key[1]][int(word_rng.integers(cfg.doc_forms))] for key in sorted(facts)}
    # renamed organisations and cities (own stream again): called by the old name everywhere, filed
    # under the new one, with a redirect document in between
    if cfg.redirect_share > 0:
        ren_rng = np.random.default_rng([seed, 5])
        for group, spare in ((orgs, org_spare), (cities, city_spare)):
            k = max(1, int(round(cfg.redirect_share * len(group))))
            if k > len(spare):
                raise ValueError(f"world.redirects.share {cfg.redirect_share}: {k} new names needed, {len(spare)} spare "
                                 f"word combinations")
            # new names: unused combinations of words that occur in names outside the region, sharing no word
            # with the old name (the redirect document would otherwise start like the new name's own documents
            # and win the repair search for it)
            fresh = [spare[i] for i in ren_rng.permutation(len(spare))]
            for i in sorted(ren_rng.choice(len(group), size=k, replace=False).tolist()):
                old = set(entities[group[i]].base_name.split())
                j = next((j for j, c in enumerate(fresh) if not old & set(c)), None)
                if j is None:
                    raise ValueError(f"world.redirects.share {cfg.redirect_share}: no spare name shares no word with "
                                     f"{entities[group[i]].base_name!r} (enlarge the world or lower the share)")
                entities[group[i]].filed_as = " ".join(fresh.pop(j))
    world = World(entities, facts, [], {}, {}, doc_word)
    docs = [world.fact_doc(s, r) for (s, r) in sorted(facts)]
    docs += [d for e in sorted(entities) if (d := world.redirect_doc(e)) is not None]
    for eid in persons:
        world.alias_of[entities[eid].alias] = eid
        docs.append(f"{entities[eid].alias} alias {entities[eid].name}")
    # shuffled, so that BM25 ties (a query whose relation word no document of the subject uses, a name
    # without its qualifier) return an arbitrary document of the subject, not one its relation's
    # alphabetical rank predicts
    world.docs = [docs[i] for i in np.random.default_rng([seed, 3]).permutation(len(docs))]
    # disjoint subjects per pool: test questions never start from an entity seen in training questions
    # (the region's entities are transfer subjects only)
    for group in (persons, orgs, cities):
        outside = [e for e in group if e not in region]
        order = [outside[i] for i in rng.permutation(len(outside))]
        for i, eid in enumerate(order):
            world.subject_pool[eid] = POOLS[i % 3]
        for eid in group:
            if eid in region:
                world.subject_pool[eid] = TRANSFER_POOL
    return world


@dataclass(frozen=True)
class Question:
    qid: str
    qset: str
    pool: str
    task_type: str
    text: str
    answer: str
    chain: tuple[tuple[str, str], ...]   # (subject eid, canonical relation) per hop, in search order
    subject_mention: str                 # how the question names the first subject (name or alias)
    surfaces: tuple[str, ...]            # the relation wording the question uses, per hop in search order
    uses_alias: bool
    collides: bool
    redirected: bool = False             # some hop's subject was renamed: its search meets a redirect document


def _valid_chains(world: World, start: str, hops: int) -> list[tuple[tuple[str, str], ...]]:
    chains: list[tuple[tuple[str, str], ...]] = [()]
    current = [start]
    for _ in range(hops):
        new_chains, new_current = [], []
        for chain, ent in zip(chains, current):
            if world.kind(ent) == "year":
                continue
            for rel, (stype, _) in RELATIONS.items():
                if stype == world.kind(ent) and (ent, rel) in world.facts:
                    new_chains.append(chain + ((ent, rel),))
                    new_current.append(world.facts[(ent, rel)])
        chains, current = new_chains, new_current
    return chains


def _phrase(rel: str, rng: np.random.Generator, paraphrase: bool) -> str:
    forms = SURFACES[rel]
    return forms[0] if not paraphrase else forms[1 + int(rng.integers(len(forms) - 1))]


def _chain_question(world: World, chain, mention: str, rng, paraphrase: bool) -> tuple[str, tuple[str, ...]]:
    # outermost relation first: "what is the founder of the employer of alba rook ?"
    surfaces = tuple(_phrase(rel, rng, paraphrase) for (_, rel) in chain)
    parts = [f"the {surf} of" for surf in reversed(surfaces)]
    return "what is " + " ".join(parts) + f" {mention} ?", surfaces


def _answer_of(world: World, chain) -> str:
    subject, rel = chain[-1]
    return world.display(world.facts[(subject, rel)])


def make_questions(world: World, cfg: WorldConfig, seed: int) -> list[Question]:
    """Seven question sets × three disjoint pools (warm start / online training / test)."""
    rng = np.random.default_rng(seed + 1)
    persons = sorted(e for e, v in world.entities.items() if v.etype == "person")
    colliding = [p for p in persons if world.entities[p].name != world.entities[p].base_name]
    starts_any = sorted(world.entities)
    out: list[Question] = []
    seen_text: set[str] = set()
    pools = POOLS + ((TRANSFER_POOL,) if cfg.questions_per_set.get(TRANSFER_POOL, 0) > 0 else ())
    if TRANSFER_POOL in pools and not world.region():
        raise ValueError("transfer questions need a transfer region (transfer_share > 0)")
    for qset, task_type in QUESTION_SETS.items():
        for pool in pools:
            want = cfg.questions_per_set[pool]
            pool_any = [e for e in starts_any if world.subject_pool[e] == pool]
            pool_persons = [e for e in persons if world.subject_pool[e] == pool]
            pool_colliding = [e for e in colliding if world.subject_pool[e] == pool]
            made, attempts = 0, 0
            while made < want and attempts < want * 200:
                attempts += 1
                uses_alias, paraphrase = False, qset != "nq"
                if qset == "2wiki":
                    a, b = rng.choice(len(pool_persons), size=2, replace=False)
                    pa, pb = pool_persons[a], pool_persons[b]
                    ya, yb = int(world.facts[(pa, "born")]), int(world.facts[(pb, "born")])
                    if ya == yb:
                        continue
                    verb = ["who was born earlier", "who was born first", "who is older"][rng.integers(3)]
                    na, nb = world.display(pa), world.display(pb)
                    text = f"{verb} , {na} or {nb} ?"
                    chain = ((pa, "born"), (pb, "born"))
                    surfaces = ("born", "born")
                    answer = na if ya < yb else nb
                    mention, collides = na, pa in colliding or pb in colliding
                else:
                    hops = {"single_hop": 1, "multi_hop_bridge": 2, "multi_hop_compositional": 3}[task_type]
                    if qset == "popqa":
                        start, uses_alias = pool_persons[rng.integers(len(pool_persons))], True
                    elif qset == "bamboogle":
                        use_collision = rng.random() < 0.5 and pool_colliding
                        src = pool_colliding if use_collision else pool_persons
                        start = src[rng.integers(len(src))]
                        uses_alias = not use_collision
                    else:
                        start = pool_any[rng.integers(len(pool_any))]
                    chains = _valid_chains(world, start, hops)
                    if not chains:
                        continue
                    chain = chains[rng.integers(len(chains))]
                    mention = world.entities[start].alias if uses_alias else world.display(start)
                    text, surfaces = _chain_question(world, chain, mention, rng, paraphrase)
                    answer = _answer_of(world, chain)
                    collides = start in colliding
                if text in seen_text:
                    continue
                seen_text.add(text)
                redirected = any(world.entities[s].filed_as for s, _ in chain) if qset != "2wiki" else False
                out.append(Question(f"{qset}-{pool}-{made:04d}", qset, pool, task_type, text, answer,
                                    tuple(chain), mention, surfaces, uses_alias, bool(collides), bool(redirected)))
                made += 1
    return out


# ---------------------------------------------------------------- serialisation (JSON / Parquet rows)
def world_to_dict(world: World) -> dict:
    return {
        "entities": [vars(e) for e in world.entities.values()],
        "facts": [[s, r, o, world.relation_word(s, r)] for (s, r), o in sorted(world.facts.items())],
        "docs": world.docs,
        "alias_of": world.alias_of,
        "subject_pool": world.subject_pool,
    }


def world_from_dict(data: dict) -> World:
    entities = {e["eid"]: Entity(**e) for e in data["entities"]}
    facts = {(s, r): o for s, r, o, _ in data["facts"]}
    doc_word = {(s, r): word for s, r, _, word in data["facts"]}
    return World(entities, facts, list(data["docs"]), dict(data["alias_of"]), dict(data["subject_pool"]), doc_word)


def question_to_row(q: Question) -> dict:
    row = dict(vars(q))
    row["chain"] = [f"{s}|{r}" for s, r in q.chain]
    row["surfaces"] = list(q.surfaces)
    return row


def question_from_row(row: dict) -> Question:
    row = dict(row)
    row["chain"] = tuple(tuple(x.split("|")) for x in row["chain"])
    row["surfaces"] = tuple(row["surfaces"])
    return Question(**row)
