"""Instructed zero-shot reranker and its automated instruction optimisation (paper §4.4, Fig. 1).

Stand-in for Qwen3-Reranker-4B + a GPT-4.1 prompt optimiser: the MiniLM bi-encoder
scores ``Instruct: <instruction>\\nQuery: <query>`` against each candidate (cosine), and
an automated loop proposes rewrites of the instruction (slot-wise edits of an
instruction grammar, a few per iteration), evaluates each on the validation lists, keeps
the best, and stops after ``patience`` iterations without improvement.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

# The slots an instruction is built from; the rewrite proposer edits one or two at a time.
SLOTS: dict[str, tuple[str, ...]] = {
    "verb": ("Rank", "Retrieve", "Find", "Identify", "Select", "Order"),
    "object": ("the candidates", "the medical procedures", "the billable medical procedures",
               "the clinical procedures and services", "the insurance-covered procedures"),
    "relation": ("by relevance to", "that best address", "that match", "that a clinician would order for",
                 "that are covered for"),
    "subject": ("the query", "the patient's question", "the symptoms, diagnostic needs, or procedural requests in the query",
                "the body site and complaint the patient describes", "the patient's insurance coverage inquiry"),
    "suffix": ("", " Focus on the body site.", " Patients describe problems in everyday language.",
               " Prefer the specific procedure over related ones.", " Consider symptoms, diagnostic needs, or procedural requests."),
}
Instruction = tuple[int, ...]  # one choice index per slot


def render(ins: Instruction) -> str:
    verb, obj, rel, subj, suffix = (SLOTS[k][i] for k, i in zip(SLOTS, ins))
    return f"{verb} {obj} {rel} {subj}.{suffix}"


def parse(text: str) -> Instruction:
    """Slot indices of a rendered instruction (the initial one must be expressible)."""
    for cand in np.ndindex(*(len(v) for v in SLOTS.values())):
        if render(cand) == text:
            return tuple(int(c) for c in cand)
    raise ValueError(f"instruction '{text}' is not expressible in the rewrite grammar")


def propose(current: Instruction, n: int, seen: set[Instruction], rng: np.random.Generator) -> list[Instruction]:
    """Up to ``n`` unseen rewrites of ``current``: change one slot (or two, with prob. 0.3)."""
    keys = list(SLOTS)
    out: list[Instruction] = []
    for _ in range(50 * n):
        if len(out) >= n:
            break
        cand = list(current)
        for slot in rng.choice(len(keys), size=2 if rng.random() < 0.3 else 1, replace=False):
            cand[slot] = int(rng.integers(0, len(SLOTS[keys[slot]])))
        t = tuple(cand)
        if t not in seen and t not in out:
            out.append(t)
    return out


@dataclass
class InstructedReranker:
    """Cosine between the instructed query and each candidate; candidate embeddings cached."""

    encoder: object
    batch_size: int = 64
    _doc_cache: dict[str, np.ndarray] = field(default_factory=dict)

    def _docs(self, docs: Sequence[str]) -> np.ndarray:
        new = [d for d in dict.fromkeys(docs) if d not in self._doc_cache]
        if new:
            emb = self.encoder.encode(new, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True)
            self._doc_cache.update(zip(new, emb))
        return np.stack([self._doc_cache[d] for d in docs])

    def score_lists(self, instruction: str | None, lists: pd.DataFrame) -> list[np.ndarray]:
        """Cosine per candidate; ``instruction=None`` embeds the bare query (the plain bi-encoder)."""
        texts = [q if instruction is None else f"Instruct: {instruction}\nQuery: {q}" for q in lists["query"]]
        q = self.encoder.encode(texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True)
        return [self._docs(list(r.docs)) @ q[i] for i, r in enumerate(lists.itertuples(index=False))]


def optimise_instruction(evaluate: Callable[[str], float], initial: str, max_iterations: int,
                         proposals_per_iteration: int, patience: int, seed: int) -> dict:
    """Propose → evaluate on validation → keep the best → early stop with patience.

    Returns the best instruction and the iteration curve (best-so-far and the
    iteration's best proposal).
    """
    rng = np.random.default_rng(seed)
    best = parse(initial)
    best_score = evaluate(initial)
    seen = {best}
    curve = [{"iteration": 0, "best_score": best_score, "proposal_score": best_score, "instruction": initial, "accepted": True}]
    stale = 0
    for it in range(1, max_iterations + 1):
        cands = propose(best, proposals_per_iteration, seen, rng)
        if not cands:
            break
        seen.update(cands)
        scored = [(evaluate(render(c)), c) for c in cands]
        top_score, top = max(scored, key=lambda x: x[0])
        accepted = top_score > best_score + 1e-9
        if accepted:
            best, best_score, stale = top, top_score, 0
        else:
            stale += 1
        curve.append({"iteration": it, "best_score": best_score, "proposal_score": top_score,
                      "instruction": render(top), "accepted": accepted})
        if stale >= patience:
            break
    return {"best_instruction": render(best), "best_score": best_score, "initial_instruction": initial,
            "initial_score": curve[0]["best_score"], "iterations": len(curve) - 1, "curve": curve}
