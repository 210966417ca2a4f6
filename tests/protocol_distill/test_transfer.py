"""Issue 15's world: redirects (a recognisable failure with one general repair) and the closed transfer
region (questions no training protocol or demonstration ever named)."""
from __future__ import annotations

import json

import pytest

from paperworks.protocol_distill.demos import (
    has_redirect_rule, strategy_donors, unrepaired, valid_protocols, warm_start_examples,
)
from paperworks.protocol_distill.episode import Codec, build_word_tokenizer, completion_from_text
from paperworks.protocol_distill.protocol import ProtocolError, parse_protocol, protocol_to_context
from paperworks.protocol_distill.search import SearchTool
from paperworks.protocol_distill.teacher import REDIRECT_RULE, TEACHERS, explore, run_teacher
from paperworks.protocol_distill.world import (
    DOC_FORMS, QUESTION_SETS, REDIRECT_WORD, TRANSFER_POOL, WorldConfig, build_world, is_redirect, make_questions,
    question_to_row, redirect_target, world_from_dict, world_to_dict,
)

CFG = WorldConfig(n_persons=120, n_orgs=24, n_cities=10, n_collisions=8, doc_forms=2, redirect_share=0.5, transfer_share=0.2,
                  questions_per_set={"warm": 30, "online": 12, "test": 6, "transfer": 6})
TEACHER_NAMES = ("opus", "gpt", "gemini")


@pytest.fixture(scope="module")
def setup():
    world = build_world(CFG, 3)
    qs = make_questions(world, CFG, 3)
    tool = SearchTool(world.docs)
    rows = [r for t in TEACHER_NAMES for r in run_teacher(world, tool, qs, TEACHERS[t], 1)]
    rows_q = [question_to_row(q) for q in qs]
    names = {e: tuple(n for n in (v.name, v.filed_as) if n) for e, v in world.entities.items()}
    texts = list(world.docs) + [q.text for q in qs] + [r["trace"] for r in rows] + \
        [protocol_to_context(json.loads(r["protocol_json"])) for r in rows if r["valid"]]
    return {"world": world, "qs": qs, "tool": tool, "rows": rows, "q_rows": rows_q, "names": names,
            "protocols": valid_protocols(rows), "codec": Codec(build_word_tokenizer(texts))}


def _renamed(world):
    return [e for e, v in world.entities.items() if v.filed_as]


# ---------------------------------------------------------------- the failure signal
def test_a_search_for_a_renamed_entity_returns_its_redirect_and_only_redirects_carry_the_signal(setup):
    world, tool = setup["world"], setup["tool"]
    renamed = _renamed(world)
    assert renamed and {world.entities[e].etype for e in renamed} == {"org", "city"}
    for e in renamed:
        ent = world.entities[e]
        for rel, forms in DOC_FORMS.items():
            for word in forms[:2]:   # whichever relation word a query uses
                assert tool.search(f"{ent.name} {word}") == (world.redirect_doc(e),)
        # its facts are filed under the new name; the redirect names it
        assert redirect_target(world.redirect_doc(e), ent.name) == ent.filed_as
    redirects = [d for d in world.docs if is_redirect(d)]
    assert sorted(redirects) == sorted(world.redirect_doc(e) for e in renamed)
    # the signal word is in no name, so nothing but a redirect can carry it
    assert not any(REDIRECT_WORD in (v.name + " " + (v.filed_as or "") + " " + (v.alias or "")).split()
                   for v in world.entities.values())


def test_switches_off_give_the_world_without_redirects_or_region(setup):
    plain_cfg = WorldConfig(**{**vars(CFG), "redirect_share": 0.0, "transfer_share": 0.0,
                               "questions_per_set": {"warm": 30, "online": 12, "test": 6}})
    plain = build_world(plain_cfg, 3)
    assert not any(is_redirect(d) for d in plain.docs) and not plain.region()
    assert not any(q.redirected for q in make_questions(plain, plain_cfg, 3))
    # the renaming is drawn from its own stream: the facts and documents' words are unchanged by it
    renamed_only = build_world(WorldConfig(**{**vars(plain_cfg), "redirect_share": 0.5}), 3)
    assert renamed_only.facts == plain.facts and renamed_only.doc_word == plain.doc_word
    assert world_from_dict(json.loads(json.dumps(world_to_dict(setup["world"])))).docs == setup["world"].docs


# ---------------------------------------------------------------- the repair rule
def test_every_teacher_repairs_a_redirect_with_the_same_general_rule(setup):
    world, tool, qs = setup["world"], setup["tool"], setup["qs"]
    hit = [q for q in qs if q.redirected]
    assert hit and {q.qset for q in hit} <= set(QUESTION_SETS) - {"2wiki", "popqa"}
    repaired = 0
    for q in hit:
        ex = explore(world, tool, q, TEACHERS["opus"])
        assert ex.answer == q.answer, q.text
        for i, s in enumerate(ex.steps):
            if is_redirect(s.result):
                mention = s.query.rsplit(" ", 1)[0]
                target = redirect_target(s.result, mention)
                assert target is not None and s.note.startswith("redirect")
                # the repair: the entity the redirect names, with the same relation word
                assert ex.steps[i + 1].query == f"{target} {s.query.rsplit(' ', 1)[1]}"
                repaired += 1
        row = next(r for r in setup["rows"] if r["qid"] == q.qid and r["teacher"] == "opus")
        protocol = json.loads(row["protocol_json"])
        if row["valid"]:
            assert REDIRECT_RULE in protocol["plan"] and has_redirect_rule(protocol)
            assert any("see" in f.split() for f in protocol["partial_findings"])
    assert repaired >= len(hit)
    # the rule is one sentence for every instance: it names no entity
    names = {n for v in world.entities.values() for n in (v.name, v.filed_as) if n}
    assert not any(f" {n} " in f" {REDIRECT_RULE} " for n in names)
    unaffected = [q for q in qs if not q.redirected]
    assert not any(has_redirect_rule(json.loads(r["protocol_json"])) for r in setup["rows"]
                   if r["valid"] and r["qid"] in {q.qid for q in unaffected})


# ---------------------------------------------------------------- demonstrations: the repair only behind a protocol
def _demos(setup, plain_redirect: str, **kw):
    warm = [q for q in setup["q_rows"] if q["pool"] == "warm"]
    donors = strategy_donors(warm, warm, setup["protocols"], "opus", setup["names"], 0)
    mix = kw.pop("mix", {"plain": 1.0, "protocol": 1.0, "answer": 1.0, "strategy": 1.0})
    prompts, completions, counts = warm_start_examples(setup["codec"], setup["tool"], warm, setup["protocols"], list(TEACHER_NAMES),
                                                       mix, 0, 0.0, donors=donors, plain_redirect=plain_redirect, **kw)
    return prompts, completions, counts


def _context_kind(codec, prompt):
    words = codec.decode(prompt[1:]).split()
    return "protocol" if words[0] == "[proto]" else "answer" if words[0] == "[ref]" else "plain"


def _repairs(completion) -> int:
    """Redirect documents after which the episode searches again (a repair)."""
    words, n = completion.words, 0
    for i, w in enumerate(words):
        if w == "<d>":
            end = words.index("</d>", i)
            if is_redirect(" ".join(words[i + 1:end])) and "<s>" in words[end + 1:]:
                n += 1
    return n


@pytest.mark.parametrize("mode", ["omit", "no_repair"])
def test_plain_demonstrations_never_show_the_repair(setup, mode):
    codec = setup["codec"]
    prompts, completions, counts = _demos(setup, mode)
    assert counts["redirected"] > 0 and counts["strategy"] > 0
    by_kind: dict[str, list] = {"plain": [], "protocol": [], "answer": []}
    for p, c in zip(prompts, completions):
        by_kind[_context_kind(codec, p)].append(c)
    assert not any(_repairs(c) for c in by_kind["plain"] + by_kind["answer"])
    # ... while the protocol-conditioned ones (own protocol or a strategy protocol) show it
    assert sum(_repairs(c) > 0 for c in by_kind["protocol"]) >= counts["redirected"]
    met = [c for c in by_kind["plain"] if any(is_redirect(" ".join(c.words[i + 1:c.words.index("</d>", i)]))
                                              for i, w in enumerate(c.words) if w == "<d>")]
    if mode == "omit":
        assert not met and counts["plain_no_repair"] == 0
    else:   # cut at the redirect, answered with the entity it names
        assert len(met) == counts["plain_no_repair"] > 0
        # the episode ends at its (only) redirect: the last document is the redirect, then the answer
        for c in met:
            last = len(c.words) - 1 - c.words[::-1].index("<d>")
            end = c.words.index("</d>", last)
            assert is_redirect(" ".join(c.words[last + 1:end])) and c.words[end + 1] == "<a>"


def test_unrepaired_cuts_the_episode_at_the_first_redirect():
    c = completion_from_text("<s> old labs ceo </s> <d> old labs see new works </d> <s> new works ceo </s> "
                             "<d> new works ceo ann lee </d> <a> ann lee </a>")
    cut = unrepaired(c)
    assert " ".join(cut.words) == "<s> old labs ceo </s> <d> old labs see new works </d> <a> new works </a>"
    assert cut.model_mask[-4:] == [1, 1, 1, 1] and cut.model_mask[5:12] == [0] * 7
    assert unrepaired(completion_from_text("<s> a b employer </s> <d> a b employer x labs </d> <a> x labs </a>")) is None


# ---------------------------------------------------------------- transfer questions
def _training_text(setup) -> str:
    """Everything training reads or writes: every warm/online question, its protocols (all teachers),
    traces, and the warm-start demonstrations."""
    train_ids = {q["qid"] for q in setup["q_rows"] if q["pool"] in ("warm", "online")}
    parts = [q["text"] + " " + q["answer"] for q in setup["q_rows"] if q["qid"] in train_ids]
    parts += [r["protocol_json"] + " " + r["trace"] for r in setup["rows"] if r["qid"] in train_ids]
    prompts, completions, _ = _demos(setup, "no_repair")
    parts += [setup["codec"].decode(p) + " " + " ".join(c.words) for p, c in zip(prompts, completions)]
    return " " + " ".join(" ".join(x.replace('"', " ").replace(",", " ").split()) for x in parts) + " "


def test_transfer_questions_share_no_entity_with_any_training_protocol_or_demonstration(setup):
    world, qs = setup["world"], setup["qs"]
    transfer = [q for q in qs if q.pool == TRANSFER_POOL]
    assert {q.qset for q in transfer} == set(QUESTION_SETS) and any(q.redirected for q in transfer)
    region = world.region()
    # the region is closed: its facts point inside, no fact outside points in
    for (s, r), o in world.facts.items():
        if o in world.entities:
            assert (s in region) == (o in region), (s, r, o)
    text = _training_text(setup)
    for q in transfer:
        for s, _ in q.chain:
            assert s in region
            for name in (world.entities[s].name, world.entities[s].filed_as):
                assert not name or f" {name} " not in text, (q.qid, name)
        assert q.answer.isdigit() or f" {q.answer} " not in text, (q.qid, q.answer)   # a year is no entity


def test_strategy_protocols_come_from_another_question_and_name_none_of_its_entities(setup):
    q_rows, protocols, names = setup["q_rows"], setup["protocols"], setup["names"]
    online = [q for q in q_rows if q["pool"] == "online"]
    donors = strategy_donors(q_rows, online, protocols, "opus", names, 0)
    by_id = {q["qid"]: q for q in q_rows}
    online_protocols = {json.dumps(protocols[(q["qid"], "opus")], sort_keys=True): q["qid"] for q in online
                        if (q["qid"], "opus") in protocols}
    assert len(donors) >= 0.8 * len(q_rows)
    for qid, p in donors.items():
        q = by_id[qid]
        donor_qid = online_protocols[json.dumps(p, sort_keys=True)]
        assert donor_qid != qid and by_id[donor_qid]["task_type"] == q["task_type"]
        assert has_redirect_rule(p) == bool(q["redirected"])
        text = f" {protocol_to_context(p)} "
        for c in q["chain"]:
            assert not any(f" {n} " in text for n in names[c.split("|")[0]])
        assert f" {q['answer']} " not in text


def test_a_malformed_protocol_is_never_a_strategy_protocol(setup):
    good = {"task_type": "multi_hop_bridge", "plan": ["search x y ceo", REDIRECT_RULE, "answer with the last fact"],
            "grounding_facts": ["x y see z w"], "partial_findings": [], "answer_verified": True}
    # malformed but otherwise a perfect donor: a sixth field (the rule, the task type and the flag all match)
    bad = dict(good, verdict="trust me")
    with pytest.raises(ProtocolError):
        parse_protocol(json.dumps(bad))
    q = [{"qid": "q", "task_type": "multi_hop_bridge", "redirected": True, "chain": ["p1|employer", "o1|ceo"], "answer": "ann lee"}]
    names = {"p1": ("bo ka",), "o1": ("lu labs",)}
    only_bad = valid_protocols([{"qid": "d1", "teacher": "opus", "protocol_json": json.dumps(bad)}])
    assert strategy_donors(q, [{"qid": "d1", "task_type": "multi_hop_bridge"}], only_bad, "opus", names, 0) == {}
    rows = [{"qid": "d1", "teacher": "opus", "protocol_json": json.dumps(bad)},
            {"qid": "d2", "teacher": "opus", "protocol_json": json.dumps(good)}]
    protocols = valid_protocols(rows)
    pool = [{"qid": "d1", "task_type": "multi_hop_bridge"}, {"qid": "d2", "task_type": "multi_hop_bridge"}]
    for seed in range(4):   # whichever order the donors are tried in
        assert strategy_donors(q, pool, protocols, "opus", names, seed) == {"q": good}
