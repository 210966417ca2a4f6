"""A token corpus with known structure, where the hybrid's variants separate.

Four tasks, every sequence exactly ``length`` tokens (no padding), each token tagged with a *kind*
saying whether (and why) it is predicted:

- ``mqar`` — multi-query associative recall: ``BOS k1 v1 … kn vn <filler> SEP q1 a1 q2 a2 …``;
  each answer ``a`` is the value bound to key ``q``. The number of pairs n is swept (training
  samples it from ``mqar_pairs``) past a KDA head's state capacity (``head_dim`` keys).
- ``timescale`` — multi-timescale recall: ``BOS LONG x`` once, then filler text interleaved with
  ``SHORT y`` writes and queries ``ASKL → x`` (must persist over the whole sequence) and
  ``ASKS → latest y`` (must be overwritten at every write): some channels keep, others reset.
- ``copy`` — ``BOS s1 … sm COPY s1 … sm <filler>``: the second copy is predicted.
- ``text`` — templated sentences with number agreement (``the big dog runs . the dogs run …``):
  plain LM loss on every token.

Filler between events is templated text (never predicted inside the recall tasks). Evaluation sets
keep the number of queries fixed and grow the filler, so longer contexts put more distance between
what is stored and when it is asked. Held-out splits come from their own seed streams.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# ---------------------------------------------------------------- vocabulary
PAD, BOS, SEP, COPY, LONG, SHORT, ASKL, ASKS = range(8)
N_SPECIAL = 8
ADJECTIVES = ["big", "small", "red", "old", "quick", "quiet"]
NOUNS = ["dog", "cat", "bird", "fox", "cow", "owl", "bee", "ant"]
VERBS = ["run", "sleep", "sing", "jump", "eat", "hide"]
WORDS = ["the", "a", ".", "and", *ADJECTIVES, *NOUNS, *(n + "s" for n in NOUNS), *(v + "s" for v in VERBS), *VERBS]

TASKS = ("mqar", "timescale", "copy", "text")
# per-token kinds: 0 = not predicted (context, filler), else what the prediction tests
KIND_NONE, KIND_MQAR, KIND_LONG, KIND_SHORT, KIND_COPY, KIND_TEXT = range(6)
KIND_NAMES = {KIND_MQAR: "mqar", KIND_LONG: "long", KIND_SHORT: "short", KIND_COPY: "copy", KIND_TEXT: "text"}
EVAL_QUERIES = 8   # (query, answer) pairs per MQAR evaluation sequence, at every context


@dataclass(frozen=True)
class Vocab:
    n_keys: int
    n_values: int

    @property
    def key0(self) -> int:
        return N_SPECIAL

    @property
    def value0(self) -> int:
        return N_SPECIAL + self.n_keys

    @property
    def word0(self) -> int:
        return N_SPECIAL + self.n_keys + self.n_values

    @property
    def size(self) -> int:
        return self.word0 + len(WORDS)

    def word(self, w: str) -> int:
        return self.word0 + WORDS.index(w)


def vocab_size(corpus) -> int:
    """Vocabulary size for a :class:`~paperworks.hybrid_lm.params.CorpusParams`."""
    return Vocab(corpus.n_keys, corpus.n_values).size


# ---------------------------------------------------------------- generators (one sequence each)
def sentence(rng: np.random.Generator, vocab: Vocab) -> list[int]:
    """``the [adj] noun(s) verb(s) [the noun(s)] .`` — the verb agrees in number with the subject."""
    plural = rng.random() < 0.5
    out = [vocab.word("the")]
    if rng.random() < 0.6:
        out.append(vocab.word(ADJECTIVES[rng.integers(len(ADJECTIVES))]))
    noun = NOUNS[rng.integers(len(NOUNS))]
    verb = VERBS[rng.integers(len(VERBS))]
    out += [vocab.word(noun + "s" if plural else noun), vocab.word(verb if plural else verb + "s")]
    if rng.random() < 0.4:
        out += [vocab.word("and"), vocab.word("a"), vocab.word(NOUNS[rng.integers(len(NOUNS))])]
    return out + [vocab.word(".")]


def filler(rng: np.random.Generator, vocab: Vocab, n: int) -> list[int]:
    out: list[int] = []
    while len(out) < n:
        out += sentence(rng, vocab)
    return out[:n]


def text_seq(rng, vocab: Vocab, length: int):
    toks = [BOS] + filler(rng, vocab, length - 1)
    return toks, [KIND_NONE] + [KIND_TEXT] * (length - 1)


def mqar_seq(rng, vocab: Vocab, length: int, n_pairs: int, n_queries: int | None = None):
    """Pairs, then filler, then queries. ``n_queries=None`` (training) draws how many queries
    there are, so the filler gap varies; evaluation fixes it and the gap takes the rest."""
    keys = rng.choice(vocab.n_keys, n_pairs, replace=False)
    values = rng.integers(vocab.n_values, size=n_pairs)
    room = (length - 2 - 2 * n_pairs) // 2
    if n_queries is None:
        n_queries = int(rng.integers(min(2, room), room + 1))
    if n_queries > room or n_queries < 1:
        raise ValueError(f"mqar: {n_pairs} pairs and {n_queries} queries do not fit {length} tokens")
    toks = [BOS]
    for k, v in zip(keys, values):
        toks += [vocab.key0 + int(k), vocab.value0 + int(v)]
    gap = length - len(toks) - 1 - 2 * n_queries
    toks += filler(rng, vocab, gap) + [SEP]
    kinds = [KIND_NONE] * len(toks)
    # every key is asked about before any repeats (a permutation, cycled)
    order = np.concatenate([rng.permutation(n_pairs) for _ in range(-(-n_queries // n_pairs))])[:n_queries]
    for i in order:
        toks += [vocab.key0 + int(keys[i]), vocab.value0 + int(values[i])]
        kinds += [KIND_NONE, KIND_MQAR]
    return toks, kinds


def timescale_seq(rng, vocab: Vocab, length: int, updates_per: float, base_length: int):
    """One long-lived register written once, one short-lived register rewritten ~``updates_per``
    times per ``base_length`` tokens; both are queried throughout."""
    long_value = vocab.value0 + int(rng.integers(vocab.n_values))
    toks, kinds = [BOS, LONG, long_value], [KIND_NONE] * 3
    mean_gap = max(1.0, base_length / (3 * updates_per))
    short_value = None
    while True:
        gap = int(rng.poisson(mean_gap))
        event = rng.choice(3, p=[0.4, 0.3, 0.3])
        if len(toks) + gap + 2 > length:
            break
        toks += filler(rng, vocab, gap)
        kinds += [KIND_NONE] * gap
        if event == 0 or short_value is None:
            short_value = vocab.value0 + int(rng.integers(vocab.n_values))
            toks += [SHORT, short_value]
            kinds += [KIND_NONE, KIND_NONE]
        elif event == 1:
            toks += [ASKS, short_value]
            kinds += [KIND_NONE, KIND_SHORT]
        else:
            toks += [ASKL, long_value]
            kinds += [KIND_NONE, KIND_LONG]
    rest = length - len(toks)
    return toks + filler(rng, vocab, rest), kinds + [KIND_NONE] * rest


def copy_seq(rng, vocab: Vocab, length: int, span: int | None = None):
    most = (length - 2) // 2
    span = int(rng.integers(max(1, length // 8), most + 1)) if span is None else span
    if not 1 <= span <= most:
        raise ValueError(f"copy: span {span} does not fit {length} tokens")
    s = [vocab.value0 + int(x) for x in rng.integers(vocab.n_values, size=span)]
    toks = [BOS, *s, COPY, *s]
    kinds = [KIND_NONE] * (span + 2) + [KIND_COPY] * span
    rest = length - len(toks)
    return toks + filler(rng, vocab, rest), kinds + [KIND_NONE] * rest


# ---------------------------------------------------------------- sets
def _stack(rows: list[tuple[list[int], list[int]]], length: int) -> dict[str, np.ndarray]:
    tokens = np.asarray([r[0] for r in rows], dtype=np.int64)
    kinds = np.asarray([r[1] for r in rows], dtype=np.int64)
    if tokens.shape[1:] != (length,) or kinds.shape != tokens.shape:
        raise AssertionError(f"sequence lengths differ from {length}")
    return {"tokens": tokens, "kind": kinds}


def mixture(rng, cp, n: int) -> dict[str, np.ndarray]:
    """``n`` training-context sequences drawn from the task mixture ``cp.mix``."""
    vocab = Vocab(cp.n_keys, cp.n_values)
    names = [t for t in TASKS if cp.mix.get(t, 0) > 0]
    w = np.asarray([cp.mix[t] for t in names], dtype=float)
    tasks = rng.choice(len(names), n, p=w / w.sum())
    rows = []
    for t in tasks:
        name = names[t]
        if name == "mqar":
            rows.append(mqar_seq(rng, vocab, cp.context, int(rng.choice(cp.mqar_pairs))))
        elif name == "timescale":
            rows.append(timescale_seq(rng, vocab, cp.context, cp.timescale_updates, cp.context))
        elif name == "copy":
            rows.append(copy_seq(rng, vocab, cp.context))
        else:
            rows.append(text_seq(rng, vocab, cp.context))
    out = _stack(rows, cp.context)
    out["task"] = np.asarray([TASKS.index(names[t]) for t in tasks], dtype=np.int64)
    return out


def eval_sets(rng, cp) -> dict[str, dict[str, np.ndarray]]:
    """Recall vs context (MQAR with ``eval_pairs`` pairs and timescale, at every multiple of the
    training context) and MQAR vs pair count (at the training context)."""
    vocab = Vocab(cp.n_keys, cp.n_values)
    sets = {}
    for m in cp.eval_multiples:
        length = m * cp.context
        sets[f"mqar_ctx{m}"] = _stack([mqar_seq(rng, vocab, length, cp.eval_pairs, EVAL_QUERIES) for _ in range(cp.n_eval)], length)
        sets[f"timescale_ctx{m}"] = _stack(
            [timescale_seq(rng, vocab, length, cp.timescale_updates, cp.context) for _ in range(cp.n_eval)], length)
    for n in cp.mqar_pairs:
        sets[f"mqar_pairs{n}"] = _stack([mqar_seq(rng, vocab, cp.context, n, EVAL_QUERIES) for _ in range(cp.n_eval)], cp.context)
    return sets


def labels(tokens: np.ndarray, kinds: np.ndarray, ignore: int = -100) -> np.ndarray:
    """Next-token targets: the token where it is predicted, ``ignore`` elsewhere."""
    return np.where(kinds > 0, tokens, ignore)


def duplicate_rows(a: np.ndarray, b: np.ndarray) -> int:
    """How many rows of ``b`` also occur in ``a`` (held-out leakage check)."""
    seen = {r.tobytes() for r in a}
    return sum(r.tobytes() in seen for r in b)
