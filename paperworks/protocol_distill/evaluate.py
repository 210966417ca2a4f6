"""Evaluation of one model on the test questions, and the aggregation into claims.

Per question: exact match, whether an answer was closed at all, output length (model-written
tokens), style drift (any teacher tic word in the output), and whether the answer is supported by
a document the episode actually retrieved.
"""
from __future__ import annotations

import numpy as np

from paperworks.protocol_distill.episode import Codec, exact_match
from paperworks.protocol_distill.rollout import rollout
from paperworks.protocol_distill.search import SearchTool


def evaluate_prompts(model, codec: Codec, tool: SearchTool, questions: list[dict], prompts: list[list[int]],
                     tic_words: set[str], max_completion: int, max_searches: int, batch_size: int = 128) -> list[dict]:
    """Greedy episodes for every prompt; one row per question."""
    rows = []
    for start in range(0, len(prompts), batch_size):
        ro = rollout(model, codec, prompts[start:start + batch_size], tool, max_completion, max_searches, greedy=True)
        for i, q in enumerate(questions[start:start + batch_size]):
            words = [w for w, m in zip(ro.words[i], ro.loss_mask[i].tolist()) if m]
            answer = ro.answers[i]
            supported = answer is not None and any(answer in d for d in ro.retrieved[i])
            rows.append({
                "qid": q["qid"], "qset": q["qset"],
                "em": exact_match(answer, q["answer"]),
                "answered": float(answer is not None),
                "length": float(len(words)),
                "style_drift": float(any(w in tic_words for w in words)),
                "unsupported": float(answer is not None and not supported),
                "n_searches": float(ro.n_searches[i]),
            })
    return rows


def em_by_set(rows: list[dict]) -> dict[str, float]:
    sets = sorted({r["qset"] for r in rows})
    out = {s: float(np.mean([r["em"] for r in rows if r["qset"] == s])) for s in sets}
    out["avg"] = float(np.mean([out[s] for s in sets]))
    return out
