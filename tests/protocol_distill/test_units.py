"""Unit tests: world determinism, search tool, protocol schema, reward, KL term, GRPO pieces, params."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from paperworks.core.params import ParamsError, validate_section
from paperworks.protocol_distill.episode import (
    completion_from_text, exact_match, extract_answer,
)
from paperworks.protocol_distill.protocol import ProtocolError, parse_protocol, protocol_errors, protocol_to_context
from paperworks.protocol_distill.search import SearchTool, terms_of
from paperworks.protocol_distill.teacher import TEACHERS, explore, run_teacher
from paperworks.protocol_distill.train import group_advantages, kl_to_privileged, kl_weight, policy_loss
from paperworks.protocol_distill.world import (
    DOC_FORMS, MULTI_HOP_SETS, QUESTION_SETS, WorldConfig, build_world, make_questions, world_from_dict, world_to_dict,
)

SMALL = WorldConfig(n_persons=60, n_orgs=10, n_cities=6, n_collisions=6, questions_per_set={"warm": 6, "online": 6, "test": 4})

GOOD = {"task_type": "multi_hop_bridge", "plan": ["search a b employer", "search c labs founder"],
        "grounding_facts": ["a b employer c labs"], "partial_findings": [], "answer_verified": True}


@pytest.fixture(scope="module")
def world():
    return build_world(SMALL, 7)


# ---------------------------------------------------------------- world and data
def test_world_and_questions_are_deterministic(world):
    again = build_world(SMALL, 7)
    assert world.docs == again.docs
    q1 = [vars(q) for q in make_questions(world, SMALL, 7)]
    q2 = [vars(q) for q in make_questions(again, SMALL, 7)]
    assert json.dumps(q1, sort_keys=True) == json.dumps(q2, sort_keys=True)
    assert build_world(SMALL, 8).docs != world.docs


def test_seven_sets_with_disjoint_pools(world):
    qs = make_questions(world, SMALL, 7)
    assert {q.qset for q in qs} == set(QUESTION_SETS)
    assert set(MULTI_HOP_SETS) < set(QUESTION_SETS)
    texts = [q.text for q in qs]
    assert len(texts) == len(set(texts))
    # the first subject of a question belongs to exactly one pool
    for q in qs:
        if q.task_type != "comparison":
            assert world.subject_pool[q.chain[0][0]] == q.pool


def test_world_has_collisions_and_aliases(world):
    persons = [e for e in world.entities.values() if e.etype == "person"]
    assert sum(e.name != e.base_name for e in persons) >= 2 * 1
    assert all(any(d.startswith(f"{e.alias} alias ") for d in world.docs) for e in persons)


def test_doc_forms_vary_the_relation_word_per_fact_and_nothing_else(world):
    varied = build_world(WorldConfig(**{**vars(SMALL), "doc_forms": 2}), 7)
    # same entities and facts: only the word a fact's document uses changes
    assert varied.facts == world.facts
    assert {e: vars(v) for e, v in varied.entities.items()} == {e: vars(v) for e, v in world.entities.items()}
    assert all(world.relation_word(s, r) == r for (s, r) in world.facts)
    words = {(s, r): varied.relation_word(s, r) for (s, r) in varied.facts}
    assert all(w in DOC_FORMS[r][:2] for (s, r), w in words.items())
    for rel in DOC_FORMS:  # both words occur for every relation
        assert {w for (s, r), w in words.items() if r == rel} == set(DOC_FORMS[rel][:2])
    assert world_from_dict(json.loads(json.dumps(world_to_dict(varied)))).doc_word == varied.doc_word


def test_no_name_word_is_a_relation_word(world, monkeypatch):
    import paperworks.protocol_distill.world as world_module

    def name_words(w):
        return {x for e in w.entities.values() for x in e.name.split() + (e.alias or "").split()}

    forms = {w for words in DOC_FORMS.values() for w in words}
    assert name_words(world) and not name_words(world) & forms
    # make a word this seed does generate for a name into a relation word: the rebuilt world must avoid it
    taken_word = sorted(name_words(world))[0]
    patched = {**DOC_FORMS, "mentor": (*DOC_FORMS["mentor"], taken_word)}
    monkeypatch.setattr(world_module, "DOC_FORMS", patched)
    assert taken_word not in name_words(build_world(SMALL, 7))


def test_repair_finds_the_word_a_document_uses():
    varied = build_world(WorldConfig(**{**vars(SMALL), "doc_forms": 2}), 7)
    tool = SearchTool(varied.docs)
    qs = [q for q in make_questions(varied, SMALL, 7) if q.qset == "nq"]
    missed = [q for q in qs if varied.relation_word(*q.chain[0]) != q.chain[0][1]]
    assert missed, "some facts should use the second word"
    repaired = 0
    for q in missed:
        ex = explore(varied, tool, q, TEACHERS["opus"])
        assert ex.answer == q.answer
        if ex.steps[0].ok:  # a BM25 tie between the subject's documents can land on the right one
            continue
        assert "is not called" in ex.steps[0].note
        assert ex.successful_queries[-1].endswith(varied.relation_word(*q.chain[0]))
        repaired += 1
    assert repaired >= len(missed) // 2


def test_alias_is_diagnosed_as_an_alias_and_kept_in_the_plan(world):
    tool = SearchTool(world.docs)
    q = next(q for q in make_questions(world, SMALL, 7) if q.qset == "popqa")
    ex = explore(world, tool, q, TEACHERS["opus"])
    assert ex.steps[0].note == f"{q.subject_mention} is an alias of {world.entities[q.chain[0][0]].name}"
    assert ex.successful_queries[0] == f"{q.subject_mention} alias"
    assert ex.answer == q.answer


# ---------------------------------------------------------------- search tool
def test_search_finds_the_fact_and_empty_query_returns_nothing(world):
    tool = SearchTool(world.docs)
    subject, rel = next(iter(sorted(world.facts)))
    expected = world.fact_doc(subject, rel)
    assert tool.search(f"{world.display(subject)} {rel}") == (expected,)
    assert tool.search("") == ()
    assert tool.search("   ") == ()
    assert tool.search("zzzz-unknown-word") == ()


def test_search_is_order_aware_for_person_relations(world):
    tool = SearchTool(world.docs)
    for p in [e for e in world.entities if e.startswith("p")][:20]:
        assert tool.search(f"{world.display(p)} mentor") == (world.fact_doc(p, "mentor"),)


def test_alias_query_returns_the_alias_document(world):
    tool = SearchTool(world.docs)
    ent = next(e for e in world.entities.values() if e.etype == "person")
    assert tool.search(f"{ent.alias} employer") == (f"{ent.alias} alias {ent.name}",)



def test_posting_list_scores_are_rank_bm25s_scores_bit_for_bit(world):
    """`bm25_scores` scores only the documents that hold a query term; rank-bm25's `get_scores` scores all of them.
    The two must agree exactly (floats, not approximately), and every document outside the posting lists must
    score 0 in rank-bm25 too, or the search order (and every synthesized protocol) would change."""
    tool = SearchTool(world.docs, top_k=3)
    queries = [f"{world.display(s)} {rel}" for s, rel in sorted(world.facts)[:40]] + [
        "employer", "mentor founder", f"{world.display(next(iter(world.entities)))}", "a b c employer labs"]
    checked = 0
    for q in queries:
        terms = [t for t in terms_of(q) if t in tool._vocab]
        if not terms:
            continue
        full = tool._bm25.get_scores(terms)
        ids, scores = tool.bm25_scores(terms)
        assert np.array_equal(full[ids], scores), q
        assert not np.delete(full, ids).any(), q
        order = np.lexsort((np.arange(len(full)), -full))[:3]
        assert tool.search(q) == tuple(world.docs[i] for i in order if full[i] > 0), q
        checked += 1
    assert checked >= 40
# ---------------------------------------------------------------- protocol schema
def test_good_protocol_passes():
    assert protocol_errors(GOOD) == []
    assert parse_protocol(json.dumps(GOOD)) == GOOD
    ctx = protocol_to_context(GOOD)
    assert ctx.startswith("[proto] type multi_hop_bridge plan") and ctx.endswith("verified yes [/proto]")


@pytest.mark.parametrize("mutate, where", [
    (lambda p: p.pop("answer_verified"), "answer_verified"),            # missing field
    (lambda p: p.update(answer_verified="yes"), "answer_verified"),     # wrong type
    (lambda p: p.update(plan="search a then b"), "plan"),               # plan not a list
    (lambda p: p.update(task_type="multi-hop"), "task_type"),           # unknown task type
    (lambda p: p.update(extra=1), "extra"),                             # a sixth field
    (lambda p: p.update(grounding_facts=[1]), "grounding_facts/0"),
    (lambda p: p.update(plan=[]), "plan"),                              # an empty plan
    (lambda p: p.update(plan=[""]), "plan/0"),                          # an empty plan step
])
def test_malformed_protocols_are_rejected_with_reason(mutate, where):
    bad = json.loads(json.dumps(GOOD))
    mutate(bad)
    errors = protocol_errors(bad)
    assert errors and any(where in e for e in errors)
    with pytest.raises(ProtocolError):
        parse_protocol(json.dumps(bad))


def test_not_json_is_rejected():
    with pytest.raises(ProtocolError, match="not JSON"):
        parse_protocol("{plan: [")


def test_teachers_reject_and_count_their_own_malformed_protocols(world):
    tool = SearchTool(world.docs)
    qs = make_questions(world, SMALL, 7)
    for name, style in TEACHERS.items():
        rows = run_teacher(world, tool, qs, style, 0)
        for r in rows:
            assert r["valid"] == (protocol_errors(json.loads(r["protocol_json"])) == [])
            assert r["valid"] or r["reject_reason"]
        # the teacher is privileged: it almost always finds the answer
        assert sum(r["teacher_correct"] for r in rows) / len(rows) > 0.9
        tics = style.tic_words
        assert all(any(w in tics for w in r["trace"].split()) for r in rows)


def test_malformed_protocol_never_reaches_training():
    from paperworks.protocol_distill.demos import valid_protocols

    bad = dict(GOOD, task_type="multi-hop")
    rows = [{"qid": "a", "teacher": "opus", "protocol_json": json.dumps(GOOD)},
            {"qid": "b", "teacher": "opus", "protocol_json": json.dumps(bad)}]  # even if flagged otherwise
    assert set(valid_protocols(rows)) == {("a", "opus")}


# ---------------------------------------------------------------- episode format and reward
def test_reward_and_answer_extraction():
    words = "<s> a b </s> <d> a b employer x labs </d> <a> x labs </a>".split()
    assert extract_answer(words) == "x labs"
    assert exact_match(extract_answer(words), "x labs") == 1.0
    assert exact_match(extract_answer(words), "y labs") == 0.0
    never = "<s> a b </s> <d> none </d> <s> a".split()
    assert extract_answer(never) is None and exact_match(None, "x") == 0.0
    assert extract_answer("</a> x".split()) is None


def test_tool_tokens_are_masked_in_completions():
    c = completion_from_text("<s> q </s> <d> doc words </d> <a> x </a>")
    masked = [w for w, m in zip(c.words, c.model_mask) if not m]
    assert masked == ["<d>", "doc", "words", "</d>"]


# ---------------------------------------------------------------- loss terms
def test_kl_term_on_a_hand_made_example():
    # an asymmetric pair: KL(p || q) != KL(q || p), so a swapped direction fails
    p = torch.tensor([0.9, 0.05, 0.05])
    q = torch.tensor([0.2, 0.4, 0.4])
    s_logits, p_logits = p.log()[None, None], q.log()[None, None]
    mask = torch.ones(1, 1)
    rev = sum(a * math.log(a / b) for a, b in zip(p.tolist(), q.tolist()))  # KL(student || privileged)
    fwd = sum(b * math.log(b / a) for a, b in zip(p.tolist(), q.tolist()))  # KL(privileged || student)
    assert abs(rev - fwd) > 0.1
    assert kl_to_privileged(s_logits, p_logits, mask, "reverse").item() == pytest.approx(rev, abs=1e-6)
    assert kl_to_privileged(s_logits, p_logits, mask, "forward").item() == pytest.approx(fwd, abs=1e-6)
    assert kl_to_privileged(s_logits, p_logits, mask).item() == pytest.approx(rev, abs=1e-6)  # reverse is the default
    assert kl_to_privileged(s_logits, s_logits, mask).item() == pytest.approx(0.0, abs=1e-7)
    # masked tokens (tool-inserted) do not count
    two_s = torch.cat([s_logits, s_logits], 1)
    two_p = torch.cat([p_logits, s_logits + 5.0], 1)
    assert kl_to_privileged(two_s, two_p, torch.tensor([[1.0, 0.0]])).item() == pytest.approx(rev, abs=1e-6)
    with pytest.raises(ValueError, match="reverse"):
        kl_to_privileged(s_logits, p_logits, mask, "sideways")


def test_kl_gradient_flows_only_into_the_student_branch():
    s = torch.randn(2, 3, 5, requires_grad=True)
    p = torch.randn(2, 3, 5, requires_grad=True)
    kl_to_privileged(s, p, torch.ones(2, 3)).backward()
    assert s.grad is not None and s.grad.abs().sum() > 0
    assert p.grad is None


def test_kl_weight_warms_up():
    assert kl_weight(0, 0.1, 10) == 0.0
    assert kl_weight(5, 0.1, 10) == pytest.approx(0.05)
    assert kl_weight(50, 0.1, 10) == pytest.approx(0.1)
    assert kl_weight(0, 0.1, 0) == pytest.approx(0.1)


def test_group_advantages():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    a = group_advantages(r, normalise_std=True)
    assert torch.allclose(a[0], torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-3)
    assert torch.all(a[1] == 0)  # an all-zero group carries no signal
    assert torch.allclose(group_advantages(r, normalise_std=False)[0], torch.tensor([0.5, -0.5, -0.5, 0.5]))


def test_policy_loss_ignores_masked_tokens():
    logp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    adv = torch.tensor([2.0])
    loss = policy_loss(logp, logp.detach(), adv, torch.tensor([[1, 0, 1]]), 0.2)
    loss.backward()
    assert logp.grad[0, 1] == 0 and logp.grad[0, 0] < 0


@pytest.mark.parametrize("ratio, adv, expected", [
    (1.5, 1.0, -1.2),    # positive advantage, ratio above 1 + ε: the clipped term is the smaller one
    (1.5, -1.0, 1.5),    # negative advantage: the unclipped term is the smaller one (pessimistic bound)
    (0.5, 1.0, -0.5),    # ratio below 1 − ε, positive advantage: unclipped
    (0.5, -1.0, 0.8),    # ratio below 1 − ε, negative advantage: clipped
    (1.1, 2.0, -2.2),    # inside the clip range: plain ratio · advantage
])
def test_policy_loss_takes_the_pessimistic_clipped_term(ratio, adv, expected):
    """PPO/GRPO: −min(r·A, clip(r, 1−ε, 1+ε)·A), with a ratio other than 1 (max instead of min fails)."""
    old = torch.tensor([[-1.0, -2.0]])
    logp = old + math.log(ratio)
    loss = policy_loss(logp, old, torch.tensor([adv]), torch.ones(1, 2), 0.2)
    assert loss.item() == pytest.approx(expected, abs=1e-5)


def test_policy_loss_gradient_vanishes_where_the_clip_binds():
    old = torch.tensor([[-1.0]])
    logp = (old + math.log(1.5)).requires_grad_(True)
    policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 1), 0.2).backward()
    assert logp.grad.abs().item() == 0.0          # clipped: no push beyond 1 + ε
    logp2 = (old + math.log(1.5)).requires_grad_(True)
    policy_loss(logp2, old, torch.tensor([-1.0]), torch.ones(1, 1), 0.2).backward()
    assert logp2.grad.item() == pytest.approx(1.5, abs=1e-5)  # unclipped: d(r·|A|)/dlogp = r


# ---------------------------------------------------------------- loss masks over tool-inserted tokens
def _toy_codec():
    from paperworks.protocol_distill.episode import Codec, build_word_tokenizer

    return Codec(build_word_tokenizer(["who employs ann lee ?", "ann lee employer acme labs", "acme labs x",
                                                 "bob kim employer zeta works cy dow born 1950 eve fox mentor"]))


class _ScriptedLM(torch.nn.Module):
    """A stand-in policy whose next token depends only on the last input token (greedy decoding
    then follows a fixed script), so the rollout's bookkeeping can be checked token by token."""

    def __init__(self, codec, script: dict[str, str]):
        super().__init__()
        self.v = len(codec)
        self.next = {codec.word_to_id[a]: codec.word_to_id[b] for a, b in script.items()}
        self.eos = codec.eos
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, cache=None, **kw):
        from types import SimpleNamespace

        logits = torch.full((*input_ids.shape, self.v), -10.0)
        for b in range(input_ids.shape[0]):
            for t in range(input_ids.shape[1]):
                logits[b, t, self.next.get(int(input_ids[b, t]), self.eos)] = 10.0
        return SimpleNamespace(logits=logits, cache=None)


def test_rollout_masks_the_tool_span_out_of_the_loss():
    from paperworks.protocol_distill.episode import D_CLOSE, D_OPEN
    from paperworks.protocol_distill.rollout import rollout

    codec = _toy_codec()
    script = {"<act>": "<s>", "<s>": "lee", "lee": "employer", "employer": "</s>", "</d>": "<a>", "<a>": "acme", "acme": "labs",
              "labs": "</a>"}
    model = _ScriptedLM(codec, script)
    tool = SearchTool(["ann lee employer acme labs", "bob kim employer zeta works", "cy dow born 1950", "eve fox mentor bob kim"])
    prompt = [codec.bos] + codec.encode("who employs ann lee ? <act>")
    ro = rollout(model, codec, [prompt], tool, max_completion=40, max_searches=2, greedy=True)
    words = ro.words[0]
    assert words == "<s> lee employer </s> <d> ann lee employer acme labs </d> <a> acme labs </a>".split()
    assert ro.answers == ["acme labs"] and ro.retrieved == [["ann lee employer acme labs"]]
    mask = ro.loss_mask[0].tolist()[: len(words)]
    start, end = words.index(D_OPEN), words.index(D_CLOSE)
    assert mask[start:end + 1] == [0] * (end - start + 1)                     # the tool's tokens: never trained on
    assert mask[:start] == [1] * start and mask[end + 1:] == [1] * (len(words) - end - 1)  # the model's own
    assert ro.completion_mask[0].tolist()[: len(words)] == [1] * len(words)


def test_sft_labels_exclude_prompt_and_tool_tokens():
    from paperworks.core.lm.train import IGNORE
    from paperworks.protocol_distill.train import sft_batch

    codec = _toy_codec()
    prompt = [codec.bos] + codec.encode("who employs ann lee ? <act>")
    comp = completion_from_text("<s> ann lee employer </s> <d> ann lee employer acme labs </d> <a> acme labs </a>")
    batch = sft_batch(codec, [prompt, prompt[:3]], [comp, comp], 64)
    labels = batch["labels"][0].tolist()
    ids = batch["input_ids"][0].tolist()
    n = len(prompt)
    assert labels[:n] == [IGNORE] * n
    for k, (w, m) in enumerate(zip(comp.words, comp.model_mask)):
        assert labels[n + k] == (codec.word_to_id[w] if m else IGNORE), (k, w)
        assert ids[n + k] == codec.word_to_id[w]
    doc = [labels[n + k] for k, m in enumerate(comp.model_mask) if not m]
    assert len(doc) == 7 and set(doc) == {IGNORE}
    assert batch["attention_mask"][1].sum() == 3 + len(comp.words) and set(batch["labels"][1, 3 + len(comp.words):].tolist()) <= {IGNORE}
    with pytest.raises(ValueError, match="max_positions"):
        sft_batch(codec, [prompt], [comp], 8)


# ---------------------------------------------------------------- params
def _section():
    import yaml
    from pathlib import Path

    return yaml.safe_load((Path(__file__).resolve().parents[2] / "conf/default/protocol_distill.yaml").read_text())


def test_default_params_validate():
    from paperworks.protocol_distill.params import Params

    validate_section("protocol_distill", Params, _section())


@pytest.mark.parametrize("path, value, expect", [
    (("online", "kl_direction"), "sideways", "protocol_distill.online.kl_direction"),
    (("online", "group_size"), 1, "protocol_distill.online.group_size"),
    (("teachers",), ["opus", "claude"], "protocol_distill.teachers.1"),
    (("online", "runs"), ["grpo", "ppo"], "protocol_distill.online.runs"),
    (("online", "runs"), ["grpo", "mapd_claude"], "protocol_distill.online.runs"),
    (("online", "runs"), ["grpo", "mapd_gpt_styled"], "style_teachers"),       # gpt writes no styled variant by default
    (("style_teachers",), ["opus", "opus"], "protocol_distill.style_teachers"),
    (("warmstart", "lr", "small"), 0, "protocol_distill.warmstart.lr.small"),
    (("trace", "max_completion"), 8, "protocol_distill.trace.max_completion"),
    (("sizes",), ["huge"], "protocol_distill.sizes.0"),
])
def test_wrong_params_fail_with_key_path(path, value, expect):
    from paperworks.protocol_distill.params import Params

    sec = _section()
    node = sec
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(ParamsError) as err:
        validate_section("protocol_distill", Params, sec)
    assert expect in str(err.value)


def test_unknown_key_is_an_error():
    from paperworks.protocol_distill.params import Params

    sec = _section()
    sec["online"]["lamda"] = 0.1
    with pytest.raises(ParamsError, match="protocol_distill.online.lamda"):
        validate_section("protocol_distill", Params, sec)


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_every_profile_validates(profile, monkeypatch):
    from pathlib import Path

    from paperworks.core.profile import compose
    from paperworks.protocol_distill.params import Params

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    validate_section("protocol_distill", Params, compose(profile)["protocol_distill"])


def test_run_names_parse_into_method_teacher_style_and_lambda():
    from paperworks.protocol_distill.params import parse_run

    assert parse_run("grpo", 0.1).kl_coef == 0.0 and parse_run("opsd", 0.1).kl_coef == 0.1
    r = parse_run("mapd_opus_styled_lam0.3", 0.1)
    assert (r.method, r.teacher, r.styled, r.kl_coef, r.protocol_source) == ("mapd", "opus", True, 0.3, "opus_styled")
    assert parse_run("mapd_gpt", 0.1).protocol_source == "gpt"
    for bad in ("mapd", "mapd_opus_lam", "ppo", "mapd_opus styled"):
        with pytest.raises(ValueError, match="unknown run"):
            parse_run(bad, 0.1)


# ---------------------------------------------------------------- style test and trace baseline
def test_styled_protocol_passes_the_schema_and_carries_the_style_in_free_form_fields(world):
    from paperworks.protocol_distill.episode import plan_queries

    tool = SearchTool(world.docs)
    qs = make_questions(world, SMALL, 7)
    style = TEACHERS["opus"]
    plain = {r["qid"]: r for r in run_teacher(world, tool, qs, style, 0)}
    styled = run_teacher(world, tool, qs, style, 0, styled=True)
    assert {r["teacher"] for r in styled} == {"opus_styled"}
    tics = style.tic_words
    for r in styled:
        p0 = plain[r["qid"]]
        assert r["valid"] == p0["valid"]                      # same synthesizer slips: the schema checks structure only
        if not r["valid"]:
            continue
        sp, pp = json.loads(r["protocol_json"]), json.loads(p0["protocol_json"])
        assert set(sp) == set(pp) and sp["grounding_facts"] == pp["grounding_facts"]
        added = set(protocol_to_context(sp).split()) - set(protocol_to_context(pp).split())
        assert style.query_tic in added and added <= tics | {"note"}   # what the style adds is narration
        # the style sits inside the plan's search steps: a student copying them writes the tic
        assert all(q.split()[0] == style.query_tic for q in plan_queries(sp))
        assert [q.split(" ", 1)[1] for q in plan_queries(sp)] == plan_queries(pp)


def test_tic_words_exclude_every_word_the_task_uses(world):
    from paperworks.protocol_distill.demos import valid_protocols
    from paperworks.protocol_distill.pipeline import Workspace, tic_words

    tool = SearchTool(world.docs)
    qs = make_questions(world, SMALL, 7)
    rows = [r for name in ("opus", "gpt") for r in run_teacher(world, tool, qs, TEACHERS[name], 0)]
    rows += run_teacher(world, tool, qs, TEACHERS["opus"], 0, styled=True)
    questions = [vars(q) for q in qs]
    ws = Workspace(codec=None, tool=tool, questions=questions, protocol_rows=rows, protocols=valid_protocols(rows))
    tics = tic_words(ws, ["opus", "gpt"])
    task = {w for q in questions for w in q["text"].split()} | {w for d in world.docs for w in d.split()}
    assert tics and not tics & task
    assert "what" not in tics and "<s>" not in tics and "search" not in tics
    assert {"carefully", "certainly", "oops"} <= tics       # narration only (opus's query tic is one of them)
    # a word a question uses is never a tic, even when the narration uses it
    questions[0] = dict(questions[0], text=questions[0]["text"] + " carefully")
    assert "carefully" not in tic_words(ws, ["opus", "gpt"])


def test_trace_fit_rejects_a_cap_shorter_than_the_traces():
    from paperworks.core.params import ParamsError
    from paperworks.protocol_distill.episode import Completion
    from stages.protocol_distill.train import trace_fit

    comps = [Completion(["w"] * n, [1] * n) for n in (10, 40, 30)]
    fit = trace_fit(None, [[1]] * 3, comps, 40, 64, [[1, 2, 3]])
    assert fit["longest_trace_tokens"] == 40 and fit["traces"] == 3
    with pytest.raises(ParamsError, match=r"trace.max_completion: 39 < the longest training trace \(40 tokens; 1 of 3"):
        trace_fit(None, [[1]] * 3, comps, 39, 64, [[1, 2, 3]])
    with pytest.raises(ParamsError, match="max_positions=42"):
        trace_fit(None, [[1]] * 3, comps, 40, 42, [[1, 2, 3]])


def test_online_items_carry_each_methods_privileged_context():
    from paperworks.protocol_distill.demos import online_items, valid_protocols
    from paperworks.protocol_distill.episode import answer_context, prompt_text

    codec = _toy_codec()
    qs = [{"qid": "q1", "text": "who employs ann lee ?", "answer": "acme labs"},
          {"qid": "q2", "text": "who employs bob kim ?", "answer": "zeta works"}]
    styled = dict(GOOD, plan=["note certainly", "search carefully ann lee employer", "answer with the last fact"])
    rows = [{"qid": "q1", "teacher": "opus", "protocol_json": json.dumps(GOOD)},
            {"qid": "q1", "teacher": "opus_styled", "protocol_json": json.dumps(styled)}]
    protocols = valid_protocols(rows)
    student = [[codec.bos] + codec.encode(prompt_text(q["text"])) for q in qs]
    grpo = online_items(codec, qs, protocols, "none")
    assert [it.prompt for it in grpo] == student and all(it.privileged is None for it in grpo)
    opsd = online_items(codec, qs, protocols, "answer")
    assert opsd[1].privileged == [codec.bos] + codec.encode(prompt_text(qs[1]["text"], answer_context("zeta works")))
    mapd = online_items(codec, qs, protocols, "protocol", "opus")
    assert mapd[0].privileged == [codec.bos] + codec.encode(prompt_text(qs[0]["text"], protocol_to_context(GOOD)))
    assert mapd[1].privileged is None            # no valid protocol for q2: no KL target
    styled_items = online_items(codec, qs, protocols, "protocol", "opus_styled")
    assert styled_items[0].privileged == [codec.bos] + codec.encode(prompt_text(qs[0]["text"], protocol_to_context(styled)))
    assert [it.prompt for it in styled_items] == student   # the student branch never sees the context


# ---------------------------------------------------------------- report
def _warm_report(student: list[float], privileged: list[float], tic_share: float = 0.0) -> dict:
    qids = [f"hotpotqa-test-{i:04d}" for i in range(len(student))]
    branch = lambda em: {"em_per_question": dict(zip(qids, em)), "em_by_set": {"avg": float(sum(em) / len(em))},  # noqa: E731
                         "tic_share": 0.0}
    out = {"branches": {"student": branch(student), "opus": branch(privileged), "answer": branch(student),
                        "opus_styled": branch(privileged), "opus_strategy": branch(student)}}
    out["branches"]["opus_styled"]["tic_share"] = tic_share
    return out


def test_privileged_gap_table_reports_the_gap_and_its_interval():
    from paperworks.protocol_distill.report import privileged_gap_table

    n = 200
    student = [1.0] * 40 + [0.0] * (n - 40)                     # 0.20
    privileged = [1.0] * 40 + [1.0] * 90 + [0.0] * (n - 130)    # 0.65: a 45-point gap
    table = privileged_gap_table({("tiny", 0): _warm_report(student, privileged)}, ["student", "opus", "answer"])
    row = table["tiny/opus"]
    assert row["gap_points"] == pytest.approx(45.0) and row["questions"] == n and row["interval_over"] == "questions"
    assert 30 < row["gap_ci_low_points"] < 45.0 < row["gap_ci_high_points"] < 60
    assert table["tiny/answer"]["gap_points"] == 0.0
    # several seeds: the gap is the mean over seeds, its interval over seeds
    weaker = [1.0] * 40 + [1.0] * 50 + [0.0] * (n - 90)         # 0.45: a 25-point gap
    table = privileged_gap_table({("tiny", 0): _warm_report(student, privileged), ("tiny", 1): _warm_report(student, weaker),
                                  ("tiny", 2): _warm_report(student, privileged)}, ["student", "opus"])
    row = table["tiny/opus"]
    assert row["seeds"] == 3 and row["interval_over"] == "seeds"
    assert row["gap_points"] == pytest.approx((45 + 25 + 45) / 3)
    assert row["gap_ci_low_points"] < 25 < 45 < row["gap_ci_high_points"]


def test_question_units_pair_online_runs_with_each_seeds_warm_start():
    import pandas as pd

    from paperworks.protocol_distill.report import question_units

    n = 40
    warm = {("tiny", 0): _warm_report([0.0] * n, [0.0] * n), ("tiny", 1): _warm_report([1.0] * n, [0.0] * n)}
    qids = sorted(warm[("tiny", 0)]["branches"]["student"]["em_per_question"])
    rows = [{"qid": q, "qset": "hotpotqa", "size": "tiny", "seed": s, "run": run, "em": em, "unsupported": 0.0,
             "style_drift": 0.0, "length": 5.0} for s in (0, 1) for q in qids for run, em in (("grpo", 1.0), ("mapd_opus", 0.0))]
    units = question_units(pd.DataFrame(rows), warm)
    em = units["em"]
    assert set(em["arm"]) == {"grpo[tiny]", "mapd_opus[tiny]", "warm_start[tiny]"}
    ws = em[em["arm"] == "warm_start[tiny]"]
    assert len(ws) == 2 * n and ws.groupby("cluster")["value"].mean().to_dict() == {"0": 0.0, "1": 1.0}  # each seed its own warm start
    assert set(units["em_multi_hop"]["arm"]) == {"grpo[tiny]", "mapd_opus[tiny]"}  # hotpotqa is multi-hop


def _params(**overrides):
    from paperworks.core.params import load_section
    from paperworks.protocol_distill.params import Params
    from tests.conftest import REPO

    p = load_section("protocol_distill", Params, REPO / "params.yaml")
    runs = overrides.pop("runs", None)
    if runs is not None:  # independent of which runs the committed profile's grid holds
        overrides["online"] = p.online.model_copy(update={"runs": runs})
    return p.model_copy(update=overrides)


def test_claims_rest_on_the_gap_of_their_own_teacher_and_size():
    from paperworks.protocol_distill.report import SIZE_ORDER_NAME, claim_specs, gap_name, style_reach_name

    from paperworks.protocol_distill.report import redirect_gap_name, transfer_gap_name

    p = _params(sizes=["tiny", "small"])
    # issue 15's world (the switches on, as in smoke and paper; default keeps them off until its run is made)
    p = p.model_copy(update={"world": p.world.model_copy(update={"redirects": p.world.redirects.model_copy(update={"enabled": True}),
                                                               "transfer": p.world.transfer.model_copy(update={"enabled": True})})})
    specs = {s.id: s for s in claim_specs(p, {"grpo", "opsd", "trace", "mapd_opus", "mapd_gemini", "mapd_opus_styled"})}
    assert gap_name("gemini", "small", 20) in specs["mapd_gemini_vs_grpo_small"].preconditions
    # MAPD's claims rest on the gap where the protocol's strategy applies, with the question's own
    # protocol and with another question's on the transfer questions
    assert {redirect_gap_name("opus", "tiny", 20), transfer_gap_name("opus", "tiny", 20)} <= set(specs["mapd_vs_grpo_tiny"].preconditions)
    for extra in ("mapd_vs_grpo_redirected_tiny", "mapd_vs_grpo_transfer_tiny", "mapd_vs_grpo_transfer_redirected_tiny"):
        assert specs[extra].role == "exploratory"
    absent: list[dict] = []
    assert "mapd_vs_grpo_transfer_tiny" not in {s.id for s in claim_specs(p, {"grpo", "mapd_opus"}, absent, frozenset({"em_transfer"}))}
    assert any(a["id"] == "mapd_vs_grpo_transfer_tiny" and "no question" in a["reason"] for a in absent)
    # with the switch off, the instance-protocol world's precondition (multi-hop gap) is back
    off = p.model_copy(update={"world": p.world.model_copy(update={"redirects": p.world.redirects.model_copy(update={"enabled": False}),
                                                                   "transfer": p.world.transfer.model_copy(update={"enabled": False})})})
    specs_off = {s.id: s for s in claim_specs(off, {"grpo", "opsd", "mapd_opus"})}
    assert gap_name("opus", "tiny", 20) in specs_off["mapd_vs_grpo_tiny"].preconditions
    assert "mapd_vs_grpo_redirected_tiny" not in specs_off
    assert "mapd_gpt_vs_grpo_tiny" not in specs            # that run is absent
    assert sum(s.role == "headline" for s in specs.values()) == 3
    style = specs["mapd_opus_styled_no_more_style_than_grpo_tiny"]
    assert style.kind == "non_inferiority" and style.margin == p.claims.style_margin and not style.higher_is_better
    assert style_reach_name("opus_styled", "tiny") in style.preconditions
    size = specs["mapd_larger_beats_smaller_small"]
    assert (size.method, size.baseline) == ("mapd_opus[small]", "mapd_opus[tiny]") and SIZE_ORDER_NAME in size.preconditions
    assert "mapd_larger_beats_smaller_small" not in {s.id for s in claim_specs(_params(sizes=["tiny"]), {"grpo", "mapd_opus"})}


def test_inverted_sizes_and_silent_styled_branch_fail_their_preconditions():
    from paperworks.core.claims import EvidenceParams
    from paperworks.protocol_distill.report import SIZE_ORDER_NAME, preconditions, privileged_gap_table, style_reach_name

    p = _params(sizes=["tiny", "small"], seeds=[0, 1], teachers=["opus"], style_teachers=["opus"],
                runs=["grpo", "trace", "mapd_opus", "mapd_opus_styled"])
    n = 20
    warm = {("tiny", k): _warm_report([0.5] * n, [1.0] * n, tic_share=0.0) for k in (0, 1)}
    warm |= {("small", k): _warm_report([0.4] * n, [1.0] * n, tic_share=0.3) for k in (0, 1)}   # the larger is worse
    gap = privileged_gap_table(warm, p.branches())
    curve = [1.0 / (i + 1) for i in range(5)] + [0.2] * 15
    pre = {r["name"]: r for r in preconditions(p, gap, warm, {s: [curve, curve] for s in p.sizes},
                                                 {s: [curve, curve] for s in p.sizes}, EvidenceParams())}
    assert not pre[SIZE_ORDER_NAME]["passed"]
    assert not pre[style_reach_name("opus_styled", "tiny")]["passed"] and pre[style_reach_name("opus_styled", "small")]["passed"]
    assert pre["warm start converged (tiny)"]["passed"] and pre["trace imitation's SFT converged (small)"]["passed"]
    # tics the student branch writes as often (an under-trained model's frequent tokens) are not style
    for k in (0, 1):
        warm[("small", k)]["branches"]["student"]["tic_share"] = 0.3
    pre2 = {r["name"]: r for r in preconditions(p, gap, warm, {s: [curve, curve] for s in p.sizes},
                                                  {s: [curve, curve] for s in p.sizes}, EvidenceParams())}
    assert not pre2[style_reach_name("opus_styled", "small")]["passed"]
    rising = [1.0 / (i + 1) for i in range(20)]
    pre = {r["name"]: r for r in preconditions(p, gap, warm, {s: [curve, rising] for s in p.sizes}, {}, EvidenceParams())}
    assert not pre["warm start converged (tiny)"]["passed"] and "seed 1" in pre["warm start converged (tiny)"]["detail"]


# ---------------------------------------------------------------- held-out convergence curves, styled demonstrations
def test_heldout_split_is_disjoint_seeded_and_keeps_order():
    from paperworks.protocol_distill.demos import split_heldout

    qs = [{"qid": f"q{i}"} for i in range(50)]
    train, held = split_heldout(qs, 12, seed=3)
    assert len(held) == 12 and len(train) == 38
    assert not {q["qid"] for q in train} & {q["qid"] for q in held}
    assert [q["qid"] for q in train + held] != [q["qid"] for q in qs]             # a draw, not the tail
    assert sorted(train + held, key=lambda q: int(q["qid"][1:])) == qs
    assert [int(q["qid"][1:]) for q in held] == sorted(int(q["qid"][1:]) for q in held)
    assert split_heldout(qs, 12, seed=3) == (train, held)
    assert split_heldout(qs, 12, seed=4)[1] != held
    for bad in (0, 50):
        with pytest.raises(ValueError):
            split_heldout(qs, bad, seed=3)


def test_heldout_loss_is_token_weighted_over_labelled_tokens_only():
    from paperworks.core.lm import LMConfig, build_model
    from paperworks.protocol_distill.train import IGNORE, heldout_loss

    model = build_model(LMConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_positions=16), 12, seed=0)
    model.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 12, (5, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 4:] = 0                                   # a short, right-padded example
    labels = ids.clone()
    labels[:, :3] = IGNORE                            # the prompt
    labels[0, 4:] = IGNORE
    labels[1, 5] = IGNORE                             # a tool-inserted token
    data = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 12), labels[:, 1:].reshape(-1),
                                            ignore_index=IGNORE, reduction="none").view(5, 8)
    counted = labels[:, 1:] != IGNORE
    expected = float(nll[counted].sum() / counted.sum())
    per_example = float(torch.stack([nll[i][counted[i]].mean() for i in range(5)]).mean())
    assert abs(expected - per_example) > 1e-4        # the example has unequal lengths, so the weighting matters
    for bs in (1, 2, 64):                            # batching does not change the token-weighted mean
        assert heldout_loss(model, data, batch_size=bs) == pytest.approx(expected, rel=1e-5)
    assert model.training                             # restored after the eval-mode pass
    changed = dict(data, input_ids=ids.clone())
    changed["input_ids"][1, 6] = 4 if ids[1, 6] != 4 else 5    # a labelled token (the prediction of position 5 is masked)
    assert heldout_loss(model, changed) != pytest.approx(expected, rel=1e-6)


def test_packed_sft_loss_is_the_padded_loss_and_gradient():
    """Length-sorted chunks and a head over labelled positions only: the same loss and gradient as
    one padded forward (core ``sft_loss``), on rows of unequal length across several chunks."""
    from paperworks.core.lm import LMConfig, build_model
    from paperworks.core.lm.train import sft_loss
    from paperworks.protocol_distill.train import IGNORE, labelled_token_nll, packed_sft_loss

    model = build_model(LMConfig(hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, max_positions=24), 12, seed=0)
    g = torch.Generator().manual_seed(1)
    rows, width = 19, 20                              # 19 rows: chunks of 8, 8 and 3
    ids = torch.randint(4, 12, (rows, width), generator=g)
    lengths = torch.randint(5, width + 1, (rows,), generator=g)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    labels = torch.where(mask.bool(), ids, torch.full_like(ids, IGNORE))
    labels[:, :3] = IGNORE                            # the prompt
    labels[2, 4:7] = IGNORE                           # a tool span
    labels[5] = IGNORE                                # a row with no labelled token
    ids = torch.where(mask.bool(), ids, torch.zeros_like(ids))
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}

    def grads(loss_fn):
        model.zero_grad()
        loss = loss_fn(model, batch)
        loss.backward()
        return float(loss.detach()), torch.cat([p.grad.flatten() for p in model.parameters()])

    width_used = int(mask.sum(1).max())
    ref_loss, ref_grad = grads(lambda m, b: sft_loss(m, {k: v[:, :width_used] for k, v in b.items()}))
    loss, grad = grads(packed_sft_loss)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert torch.allclose(grad, ref_grad, rtol=1e-4, atol=1e-6)
    total, count = labelled_token_nll(model, batch)
    assert count == int((labels[:, 1:] != IGNORE).sum())
    shifted = dict(batch, labels=torch.roll(labels, 1, dims=1))   # labels one position off: a different loss
    assert float(packed_sft_loss(model, shifted).detach()) != pytest.approx(ref_loss, rel=1e-3)
    with pytest.raises(ValueError, match="no labelled tokens"):
        packed_sft_loss(model, dict(batch, labels=torch.full_like(labels, IGNORE)))


def test_styled_share_teaches_the_privileged_branch_to_copy_the_styled_plan_only(world):
    from paperworks.protocol_distill.demos import valid_protocols, warm_start_examples
    from paperworks.protocol_distill.episode import Codec, build_word_tokenizer

    tool = SearchTool(world.docs)
    qs = make_questions(world, SMALL, 7)
    rows = run_teacher(world, tool, qs, TEACHERS["opus"], 0) + run_teacher(world, tool, qs, TEACHERS["opus"], 0, styled=True)
    protocols = valid_protocols(rows)
    questions = [vars(q) for q in qs]
    texts = [*world.docs, *(q["text"] for q in questions), *(protocol_to_context(p) for p in protocols.values()),
             "what is ?", "[ref] [/ref]"]
    codec = Codec(build_word_tokenizer(texts))
    tic = TEACHERS["opus"].query_tic
    tic_id = codec.word_to_id[tic]
    mix = {"plain": 1.0, "protocol": 1.0, "answer": 1.0}

    def demos(share, style_teachers=("opus",)):
        prompts, completions, counts = warm_start_examples(codec, tool, questions, protocols, ["opus"], mix, 0,
                                                           style_teachers=style_teachers, styled_share=share)
        with_tic = [tic in c.words for c in completions]
        prompt_tic = [tic_id in p for p in prompts]
        return counts, with_tic, prompt_tic

    counts, with_tic, prompt_tic = demos(1.0)
    assert counts["styled"] > 0 and sum(with_tic) == counts["styled"]
    assert with_tic == prompt_tic                     # a tic is written exactly where a styled protocol is read
    assert counts["styled"] <= counts["protocol"]     # never a plain or answer-conditioned demonstration
    n_styled_ok = sum(1 for q in questions if protocols.get((q["qid"], "opus_styled"), {}).get("answer_verified")
                      and protocols.get((q["qid"], "opus"), {}).get("answer_verified"))
    assert counts["styled"] == n_styled_ok           # share 1: every protocol demo with a verified styled variant
    for share, teachers in ((0.0, ("opus",)), (1.0, ())):
        counts, with_tic, prompt_tic = demos(share, teachers)
        assert counts["styled"] == 0 and not any(with_tic) and not any(prompt_tic)
    counts, with_tic, _ = demos(0.5)
    assert 0 < counts["styled"] < n_styled_ok
