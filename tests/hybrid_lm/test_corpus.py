"""The hybrid_lm corpus: deterministic, every predicted token is what the task's structure says."""
from __future__ import annotations

import numpy as np
import pytest

from paperworks.hybrid_lm import corpus as C
from paperworks.hybrid_lm.params import CorpusParams

CP = CorpusParams(context=64, n_train=64, n_heldout=16, n_eval=4, eval_multiples=[1, 2, 4], mqar_pairs=[4, 20],
                  eval_pairs=8, n_keys=24, n_values=24)
VOCAB = C.Vocab(CP.n_keys, CP.n_values)


def test_same_seed_same_arrays_other_seed_differs():
    a = C.mixture(np.random.default_rng(3), CP, 32)
    b = C.mixture(np.random.default_rng(3), CP, 32)
    c = C.mixture(np.random.default_rng(4), CP, 32)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["tokens"], c["tokens"])
    ea, eb = C.eval_sets(np.random.default_rng(5), CP), C.eval_sets(np.random.default_rng(5), CP)
    assert ea.keys() == eb.keys()
    for s in ea:
        np.testing.assert_array_equal(ea[s]["tokens"], eb[s]["tokens"])


def test_mixture_shapes_tokens_in_vocab_and_all_tasks_present():
    d = C.mixture(np.random.default_rng(0), CP, 200)
    assert d["tokens"].shape == d["kind"].shape == (200, CP.context)
    assert d["tokens"].min() >= 0 and d["tokens"].max() < VOCAB.size == C.vocab_size(CP)
    assert set(np.unique(d["task"])) == set(range(len(C.TASKS)))
    assert (d["tokens"][:, 0] == C.BOS).all() and (d["kind"][:, 0] == C.KIND_NONE).all()
    # held-out sequences come from another stream and do not repeat training ones
    held = C.mixture(np.random.default_rng(1), CP, 50)
    assert C.duplicate_rows(d["tokens"], held["tokens"]) == 0
    assert C.duplicate_rows(d["tokens"], d["tokens"][:7]) == 7


@pytest.mark.parametrize("n_pairs", [1, 4, 20])
def test_mqar_every_answer_is_the_value_bound_to_its_key(n_pairs):
    rng = np.random.default_rng(n_pairs)
    for _ in range(20):
        toks, kinds = C.mqar_seq(rng, VOCAB, 64, n_pairs)
        assert len(toks) == len(kinds) == 64
        binding = {toks[1 + 2 * i]: toks[2 + 2 * i] for i in range(n_pairs)}
        assert len(binding) == n_pairs   # distinct keys
        answers = [i for i, k in enumerate(kinds) if k == C.KIND_MQAR]
        assert answers and answers[0] > toks.index(C.SEP)
        for i in answers:
            assert toks[i] == binding[toks[i - 1]]
        assert all(k in (C.KIND_NONE, C.KIND_MQAR) for k in kinds)


def test_mqar_eval_queries_fixed_and_distance_grows_with_context():
    sets = C.eval_sets(np.random.default_rng(0), CP)
    gaps = []
    for m in CP.eval_multiples:
        d = sets[f"mqar_ctx{m}"]
        assert d["tokens"].shape == (CP.n_eval, m * CP.context)
        assert ((d["kind"] == C.KIND_MQAR).sum(1) == C.EVAL_QUERIES).all()
        sep = (d["tokens"] == C.SEP).argmax(1)
        gaps.append(sep.mean())
    assert gaps == sorted(gaps) and gaps[-1] > 3 * gaps[0]
    for n in CP.mqar_pairs:
        d = sets[f"mqar_pairs{n}"]
        assert (d["tokens"] == C.SEP).argmax(1).min() >= 1 + 2 * n


def test_timescale_long_answer_persists_short_answer_is_latest_write():
    rng = np.random.default_rng(7)
    seen = {C.KIND_LONG: 0, C.KIND_SHORT: 0}
    stale = 0   # short answers that differ from the first write: the register really is overwritten
    for _ in range(30):
        toks, kinds = C.timescale_seq(rng, VOCAB, 256, 6, 64)
        assert len(toks) == len(kinds) == 256 and toks[:2] == [C.BOS, C.LONG]
        latest = None
        for i, (t, k) in enumerate(zip(toks, kinds)):
            if i > 0 and toks[i - 1] == C.SHORT and kinds[i - 1] == C.KIND_NONE and k == C.KIND_NONE:
                latest = t
            if k == C.KIND_LONG:
                assert toks[i - 1] == C.ASKL and t == toks[2]
            elif k == C.KIND_SHORT:
                assert toks[i - 1] == C.ASKS and t == latest
                stale += t != toks[toks.index(C.SHORT) + 1]
            if k in seen:
                seen[k] += 1
    assert min(seen.values()) > 20 and stale > 10


def test_copy_second_half_repeats_first_and_text_predicts_every_token():
    rng = np.random.default_rng(2)
    toks, kinds = C.copy_seq(rng, VOCAB, 64, span=20)
    assert toks[21] == C.COPY and toks[1:21] == toks[22:42]
    assert [i for i, k in enumerate(kinds) if k == C.KIND_COPY] == list(range(22, 42))
    toks, kinds = C.text_seq(rng, VOCAB, 64)
    assert kinds == [C.KIND_NONE] + [C.KIND_TEXT] * 63 and min(toks[1:]) >= VOCAB.word0
    with pytest.raises(ValueError, match="does not fit"):
        C.copy_seq(rng, VOCAB, 64, span=40)
    labels = C.labels(np.array([toks]), np.array([kinds]))
    assert labels[0, 0] == -100 and (labels[0, 1:] == np.array(toks[1:])).all()


def test_text_verbs_agree_with_subjects():
    rng = np.random.default_rng(0)
    for _ in range(50):
        words = [C.WORDS[t - VOCAB.word0] for t in C.sentence(rng, VOCAB)]
        noun = next(w for w in words if w.rstrip("s") in C.NOUNS or w in C.NOUNS)
        verb = next(w for w in words if w in C.VERBS or w[:-1] in C.VERBS)
        assert (noun.endswith("s") and noun[:-1] in C.NOUNS) == (verb in C.VERBS)
