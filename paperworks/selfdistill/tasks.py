"""Three verifiable task families with worked solutions (the privileged context).

| family | prompt | a correct response | several correct responses? |
| --- | --- | --- | --- |
| ``add``  | ``add 347+586:``          | ``7+6=13,4+8+1=13,3+5+1=9>933`` (columns, right to left) | no |
| ``sum``  | ``sum 3 5 8 2:``          | ``3+5=8,8+8=16,16+2=18>18`` — any order of the terms | yes (up to k!) |
| ``prog`` | ``prog x=3;x*2;x+5;x-4:`` | ``x=6,x=11,x=7>7`` (trace of a tiny program) | no |

The reward is exact match of the final answer (after the last ``>``). The privileged
prompt puts one verified worked solution in front: ``ref <solution>|<prompt>``.
Pure functions of a numpy Generator: same seed → same rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

FAMILIES = ("add", "sum", "prog")
MULTI_SOLUTION = ("sum",)

TASK_SCHEMA = pa.schema([
    ("split", pa.string()),          # sft | train | val | test
    ("family", pa.string()),
    ("prompt", pa.string()),
    ("privileged_prompt", pa.string()),
    ("completion", pa.string()),     # a verified worked solution (sft: the target; train/test: the one in the privileged prompt)
    ("answer", pa.string()),
    ("use_privileged", pa.bool_()),  # sft rows: train on the privileged prompt instead of the plain one
])


@dataclass(frozen=True)
class Problem:
    family: str
    prompt: str
    answer: str
    key: tuple  # identity of the problem (for disjoint splits)


def privileged_prompt(solution: str, prompt: str) -> str:
    return f"ref {solution}|{prompt}"


def extract_answer(text: str) -> str | None:
    if ">" not in text:
        return None
    return text.rsplit(">", 1)[1].strip()


def is_correct(text: str, answer: str) -> bool:
    return extract_answer(text) == answer


# ---- add: column addition with carries --------------------------------------------------
def draw_add(rng: np.random.Generator, digits: int) -> tuple:
    lo, hi = 10 ** (digits - 1), 10**digits
    return ("add", int(rng.integers(lo, hi)), int(rng.integers(lo, hi)))


def add_problem(key: tuple) -> Problem:
    _, a, b = key
    return Problem("add", f"add {a}+{b}:", str(a + b), key)


def add_solution(key: tuple, rng: np.random.Generator | None = None) -> str:
    _, a, b = key
    da, db = str(a)[::-1], str(b)[::-1]
    carry, steps = 0, []
    for i in range(max(len(da), len(db))):
        x, y = int(da[i]) if i < len(da) else 0, int(db[i]) if i < len(db) else 0
        s = x + y + carry
        steps.append(f"{x}+{y}" + (f"+{carry}" if carry else "") + f"={s}")
        carry = s // 10
    return ",".join(steps) + f">{a + b}"


# ---- sum: running sum in any order (the multi-solution family) ---------------------------
def draw_sum(rng: np.random.Generator, terms: int) -> tuple:
    return ("sum", *(int(t) for t in rng.integers(1, 10, size=terms)))


def sum_problem(key: tuple) -> Problem:
    terms = key[1:]
    return Problem("sum", "sum " + " ".join(map(str, terms)) + ":", str(sum(terms)), key)


def sum_solution(key: tuple, rng: np.random.Generator | None = None) -> str:
    """A running sum over the terms in a random order (every order is a correct response)."""
    terms = list(key[1:])
    if rng is not None:
        terms = [terms[i] for i in rng.permutation(len(terms))]
    total, steps = terms[0], []
    for t in terms[1:]:
        steps.append(f"{total}+{t}={total + t}")
        total += t
    return ",".join(steps) + f">{total}"


# ---- prog: trace a tiny straight-line program ---------------------------------------------
def _draw_prog(rng: np.random.Generator, n_ops: int) -> tuple:
    x0 = int(rng.integers(0, 10))
    x, ops = x0, []
    while len(ops) < n_ops:
        kind = ("+", "-", "*")[int(rng.integers(0, 3))]
        d = int(rng.integers(2, 4)) if kind == "*" else int(rng.integers(1, 10))
        y = x + d if kind == "+" else x - d if kind == "-" else x * d
        if 0 <= y <= 99:
            ops.append(f"{kind}{d}")
            x = y
    return ("prog", x0, *ops)


def _run_prog(key: tuple) -> list[int]:
    x, trace = key[1], []
    for op in key[2:]:
        d = int(op[1:])
        x = x + d if op[0] == "+" else x - d if op[0] == "-" else x * d
        trace.append(x)
    return trace


def prog_problem(key: tuple) -> Problem:
    body = ";".join(f"x{op}" for op in key[2:])
    return Problem("prog", f"prog x={key[1]};{body}:", str(_run_prog(key)[-1]), key)


def prog_solution(key: tuple, rng: np.random.Generator | None = None) -> str:
    trace = _run_prog(key)
    return ",".join(f"x={v}" for v in trace) + f">{trace[-1]}"


def draw_key(family: str, rng: np.random.Generator, p) -> tuple:
    if family == "add":
        return draw_add(rng, p.add_digits)
    if family == "sum":
        return draw_sum(rng, p.sum_terms)
    return _draw_prog(rng, p.prog_ops)


def problem_identity(key: tuple) -> tuple:
    """What makes two problems the same one. For ``sum`` it is the multiset of terms: every order of
    the same terms has the same answer and the same set of correct responses, so two orders of one
    multiset are one problem (a held-out split must not share a multiset with training)."""
    if key[0] == "sum":
        return ("sum", *sorted(key[1:]))
    return key


PROBLEM = {"add": add_problem, "sum": sum_problem, "prog": prog_problem}
SOLUTION = {"add": add_solution, "sum": sum_solution, "prog": prog_solution}


def make_tasks(p, seed: int) -> list[dict]:
    """All rows of the task table: held-out test prompts first, then validation, then train and SFT
    rows. Test and validation problems are unique, disjoint from each other and from every
    training/SFT problem by :func:`problem_identity` (for ``sum``: the multiset of terms)."""
    rng = np.random.default_rng(seed)
    rows: list[dict] = []

    def fresh(family: str, avoid: set[tuple], tries: int = 1000) -> tuple:
        for _ in range(tries):
            key = draw_key(family, rng, p)
            if problem_identity(key) not in avoid:
                return key
        raise ValueError(f"could not draw a fresh '{family}' problem: the problem space is too small "
                         f"(selfdistill.data: fewer held-out problems or more terms/digits)")

    def row(split: str, key: tuple, use_priv: bool = False) -> dict:
        prob = PROBLEM[key[0]](key)
        reference = SOLUTION[key[0]](key, rng)  # the verified solution shown as privileged context
        # SFT target: an independently drawn solution, so on the multi-solution family the model
        # learns to use the context's *answer* without copying its order (for unique-solution
        # families both draws coincide)
        target = SOLUTION[key[0]](key, rng) if split == "sft" else reference
        return {"split": split, "family": prob.family, "prompt": prob.prompt,
                "privileged_prompt": privileged_prompt(reference, prob.prompt),
                "completion": target, "answer": prob.answer, "use_privileged": use_priv}

    held_out: set[tuple] = set()
    for split, n in (("test", p.n_test_per_family), ("val", p.n_val_per_family)):
        for family in FAMILIES:  # held-out problems are unique and never seen in training
            for _ in range(n):
                key = fresh(family, held_out)
                held_out.add(problem_identity(key))
                rows.append(row(split, key))
    for i in range(p.n_train_prompts):
        rows.append(row("train", fresh(FAMILIES[i % len(FAMILIES)], held_out)))
    for i in range(p.n_sft):
        use_priv = bool(rng.random() < p.sft_privileged_share)
        rows.append(row("sft", fresh(FAMILIES[i % len(FAMILIES)], held_out), use_priv))
    return rows
