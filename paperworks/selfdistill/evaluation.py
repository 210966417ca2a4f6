"""Held-out evaluation of a policy: greedy pass@1, pass@k at a temperature, token entropy of
its own samples, and diversity of correct responses on the multi-solution family.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from paperworks.core.lm import completion_logits, sample
from paperworks.selfdistill.divergences import entropy, kl
from paperworks.selfdistill.tasks import FAMILIES, MULTI_SOLUTION, is_correct

CHUNK = 256  # prompts per generate call (bounds memory)


def _chunks(n: int, size: int = CHUNK):
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def per_family(values: Sequence[float], families: Sequence[str], prefix: str) -> dict[str, float]:
    v, f = np.asarray(values, dtype=float), np.asarray(families)
    out = {f"{prefix}": float(v.mean())}
    for fam in FAMILIES:
        if (f == fam).any():
            out[f"{prefix}_{fam}"] = float(v[f == fam].mean())
    return out


@torch.no_grad()
def greedy_correct(model, tok, prompts: Sequence[str], answers: Sequence[str], max_new_tokens: int) -> list[bool]:
    correct: list[bool] = []
    for sl in _chunks(len(prompts)):
        s = sample(model, tok, prompts[sl], max_new_tokens, greedy=True)
        correct += [is_correct(t, a) for t, a in zip(s.texts, answers[sl])]
    return correct


@torch.no_grad()
def sampled_entropy(model, tok, prompts: Sequence[str], max_new_tokens: int, temperature: float = 1.0,
                    reference=None) -> tuple[list[float], list[float]]:
    """Per prompt, along its own sampled completion: the mean full-vocabulary token entropy (nats)
    and, when ``reference`` is given, the mean token KL(model ‖ reference) (how far the policy has
    moved from the base; NaN without a reference)."""
    ent: list[float] = []
    kl_ref: list[float] = []
    for sl in _chunks(len(prompts)):
        s = sample(model, tok, prompts[sl], max_new_tokens, temperature=temperature)
        logits = completion_logits(model, s.prompt_ids, s.prompt_mask, s.completion_ids, s.completion_mask)
        m = s.completion_mask.float()
        ent += ((entropy(logits) * m).sum(1) / m.sum(1).clamp(min=1)).tolist()
        if reference is None:
            kl_ref += [float("nan")] * len(s.texts)
            continue
        ref_logits = completion_logits(reference, s.prompt_ids, s.prompt_mask, s.completion_ids, s.completion_mask)
        d = kl(torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1))
        kl_ref += ((d * m).sum(1) / m.sum(1).clamp(min=1)).tolist()
    return ent, kl_ref


def probe(student, teacher, tok, rows, max_new_tokens: int, reference=None) -> dict[str, float]:
    """The curve metrics logged every ``eval_every`` steps on the fixed validation subset.

    ``acc``: student greedy accuracy (plain prompt); ``teacher_acc``: the self-teacher's greedy
    accuracy *with* the privileged context; ``entropy``: token entropy of the student's T=1
    samples; ``kl_ref``: token KL(student ‖ base) along those samples (with a reference).
    """
    prompts, answers, fams = list(rows["prompt"]), list(rows["answer"]), list(rows["family"])
    out = per_family(greedy_correct(student, tok, prompts, answers, max_new_tokens), fams, "acc")
    ent, kl_ref = sampled_entropy(student, tok, prompts, max_new_tokens, reference=reference)
    out.update(per_family(ent, fams, "entropy"))
    if reference is not None:
        out["kl_ref"] = float(np.mean(kl_ref))
    if teacher is not None:
        priv = list(rows["privileged_prompt"])
        out.update(per_family(greedy_correct(teacher, tok, priv, answers, max_new_tokens), fams, "teacher_acc"))
    return out


@torch.no_grad()
def final_eval(model, tok, rows, max_new_tokens: int, k: int, temperature: float) -> dict[str, float]:
    """Greedy pass@1, pass@k at ``temperature``, sample entropy, and distinct correct responses
    per prompt among the k samples of the multi-solution family (a direct mode-collapse gauge)."""
    prompts, answers, fams = list(rows["prompt"]), list(rows["answer"]), list(rows["family"])
    out = per_family(greedy_correct(model, tok, prompts, answers, max_new_tokens), fams, "pass1")
    out.update(per_family(sampled_entropy(model, tok, prompts, max_new_tokens)[0], fams, "entropy"))
    any_correct, distinct = [], []
    for sl in _chunks(len(prompts), CHUNK // k or 1):
        s = sample(model, tok, prompts[sl], max_new_tokens, temperature=temperature, num_return_sequences=k)
        for i, ans in enumerate(answers[sl]):
            texts = s.texts[i * k: (i + 1) * k]
            ok = [t for t in texts if is_correct(t, ans)]
            any_correct.append(bool(ok))
            distinct.append(len(set(ok)))
    out.update(per_family(any_correct, fams, f"pass{k}"))
    multi = [d for d, f in zip(distinct, fams) if f in MULTI_SOLUTION]
    if multi:
        out["distinct_correct_multi"] = float(np.mean(multi))
    return out
