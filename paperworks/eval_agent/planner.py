"""The trained planner (Open-EA-like): step records of the scripted planner, validated JSON actions, rollouts.

A session unrolls into **steps**. Before round 1 and after every round the planner sees the
instruction (dimension, its sub-aspects, batch size, round cap), the history (its last actions)
and the observation (per sub-aspect: samples read / passed; the stratified estimate, its
interval and the levels the interval's ends fall in), and answers with a short reasoning line and
one JSON action:

    {"action": "sample", "n": [3, 2, 2, 1]}   samples per sub-aspect for the next round
    {"action": "stop", "level": "High"}       the answer

The scripted planner's step (``scripted_action``) is exactly ``agent.run_agent``'s decision
(a test replays sessions both ways). An action is **valid** when it parses and lies in the
allowed set: ``n`` has one non-negative integer per sub-aspect, sums to the batch (or to what
is left) and asks no sub-aspect for more than it has left; ``stop`` names one of the five levels;
at the round cap only ``stop`` is allowed. An invalid action is retried once (temperature
sampling); if the retry is invalid too the step falls back to a neutral rule (proportional
allocation, or at the cap a stop at the estimate's level) — every one is counted in the rollout.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from paperworks.core.adaptive import StoppingRule, check_stop, level_of
from paperworks.eval_agent.agent import LEVEL_NAMES, Pool, allocate, stratified_interval
from paperworks.eval_agent.params import AgentParams


@dataclass
class StepState:
    """A live session driven one decision at a time (the same queues and rule as ``run_agent``)."""

    pool: Pool
    weights: np.ndarray
    edges: tuple[float, ...]
    p: AgentParams
    queues: list[list[int]]
    rows: list[int] = field(default_factory=list)
    round: int = 0
    decision: object = None
    history: list[str] = field(default_factory=list)
    done: bool = False
    level: int = -1
    reason: str = ""

    @classmethod
    def start(cls, pool: Pool, weights: np.ndarray, edges, p: AgentParams, rng: np.random.Generator) -> "StepState":
        queues = [list(rng.permutation(np.flatnonzero(pool.stratum == h))) for h in range(len(weights))]
        return cls(pool, np.asarray(weights), tuple(edges), p, queues)

    @property
    def rule(self) -> StoppingRule:
        return StoppingRule(edges=self.edges, batch_size=self.p.batch_size, max_samples=self.p.batch_size * self.p.max_rounds,
                            confidence=self.p.confidence, interval="wilson")

    def left(self) -> np.ndarray:
        return np.array([len(q) for q in self.queues])

    def must_stop(self) -> bool:
        """Only ``stop`` is allowed: the round cap is reached or the pool is empty."""
        return self.round >= self.p.max_rounds or self.left().sum() == 0

    def apply(self, action: dict) -> None:
        """Execute a valid action (``validate`` first)."""
        if action["action"] == "stop":
            self.done, self.level = True, LEVEL_NAMES.index(action["level"])
            self.reason = self.decision.reason if self.decision is not None and self.decision.stop else "planner stop"
            self.history.append(f"stop {action['level']}")
            return
        for h, k in enumerate(action["n"]):
            self.rows += [int(self.queues[h].pop(0)) for _ in range(k)]
        self.round += 1
        strata = self.pool.stratum[self.rows]
        self.decision = check_stop(self.rule, self.pool.outcome[self.rows],
                                   interval_fn=lambda v, c, s=strata: stratified_interval(v, s, self.weights, c))
        self.history.append("sample " + json.dumps(action["n"]))

    @property
    def estimate(self) -> float:
        return float(self.decision.estimate) if self.decision is not None else float("nan")


def prompt_text(s: StepState, dim: str, aspects: tuple[str, ...]) -> str:
    """Instruction, history (last two actions) and observation: what the planner reads (never the model's name)."""
    instr = f"task {dim} | aspects: {'; '.join(aspects)} | batch {s.p.batch_size}, rounds {s.p.max_rounds}"
    hist = "history: " + ("; ".join(s.history[-2:]) if s.history else "none")
    if s.decision is None:
        obs = "obs: nothing read"
    else:
        st, out = s.pool.stratum[s.rows], s.pool.outcome[s.rows]
        per = ", ".join(f"{int((st == h).sum())}/{int(out[st == h].sum())}" for h in range(len(aspects)))
        d = s.decision
        lo, hi = LEVEL_NAMES[level_of(d.low, s.edges)], LEVEL_NAMES[level_of(d.high, s.edges)]
        obs = (f"obs: round {s.round}/{s.p.max_rounds} n/pass {per} | est {d.estimate:.2f} "
               f"ci {d.low:.2f}-{d.high:.2f} levels {lo}-{hi}")
    return f"{instr}\n{hist}\n{obs}\n"


def scripted_action(s: StepState) -> tuple[str, dict]:
    """The scripted planner's reasoning line and action at this step (``run_agent``'s decision)."""
    d = s.decision
    if d is not None and (d.stop or s.must_stop()):
        why = f"inside {LEVEL_NAMES[int(d.level)]}" if d.reason == "interval inside one level" else "cap"
        return f"think: {why}", {"action": "stop", "level": LEVEL_NAMES[int(d.level)]}
    values, strata = s.pool.outcome[s.rows], s.pool.stratum[s.rows]
    neyman = s.p.allocation == "neyman" and s.round > 0
    alloc = allocate(s.p.batch_size, s.weights, values, strata, neyman=neyman, left=s.left())
    why = "spans levels" if d is not None else "start"
    return f"think: {why}", {"action": "sample", "n": [int(k) for k in alloc]}


def completion_text(reasoning: str, action: dict) -> str:
    return reasoning + "\n" + json.dumps(action, separators=(",", ":"))


def parse_action(text: str) -> dict | None:
    """The JSON object on the completion's last non-empty line, or None when there is none."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    try:
        obj = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def validate(action: dict | None, s: StepState) -> str:
    """'' when ``action`` is in the allowed set at this step, else why not."""
    if action is None:
        return "not a JSON object"
    kind = action.get("action")
    if kind == "stop":
        if set(action) != {"action", "level"} or action["level"] not in LEVEL_NAMES:
            return f"stop needs one of the levels {list(LEVEL_NAMES)}"
        return ""
    if kind != "sample":
        return f"action {kind!r} not in ('sample', 'stop')"
    if s.must_stop():
        return "sample at the round cap (only stop is allowed)"
    n, left = action.get("n"), s.left()
    if set(action) != {"action", "n"} or not isinstance(n, list) or len(n) != len(left):
        return f"n must list {len(left)} counts"
    if not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in n):
        return "n holds a non-integer or negative count"
    if sum(n) != min(s.p.batch_size, int(left.sum())):
        return f"n sums to {sum(n)}, not the batch {min(s.p.batch_size, int(left.sum()))}"
    if any(k > lf for k, lf in zip(n, left)):
        return "n asks a sub-aspect for more samples than it has left"
    return ""


REFUSALS = {  # a refusal's reason (``validate``) → its kind, counted per kind in actions.json and the metrics
    "not a JSON object": "not JSON",
    "stop needs one of the levels": "unknown level",
    "action ": "unknown action",
    "sample at the round cap": "sample at the cap",
    "n must list": "wrong number of counts",
    "n holds a non-integer": "non-integer count",
    "n sums to": "wrong total",
    "n asks a sub-aspect for more": "more than a sub-aspect has left",
}


def refusal_kind(why: str) -> str:
    """The kind of a refusal reason returned by ``validate`` (a ValueError for a reason it does not know)."""
    for prefix, kind in REFUSALS.items():
        if why.startswith(prefix):
            return kind
    raise ValueError(f"unknown refusal reason {why!r}")


def fallback_action(s: StepState) -> dict:
    """The neutral rule after a failed retry: proportional allocation, or at the cap stop at the estimate's level."""
    if s.must_stop():
        level = int(s.decision.level) if s.decision is not None else 0
        return {"action": "stop", "level": LEVEL_NAMES[level]}
    alloc = allocate(s.p.batch_size, s.weights, np.empty(0), np.empty(0, dtype=int), neyman=False, left=s.left())
    return {"action": "sample", "n": [int(k) for k in alloc]}


def scripted_records(s: StepState, dim: str, aspects: tuple[str, ...]) -> list[dict]:
    """Run one session with the scripted planner, one record per decision."""
    out = []
    while not s.done:
        prompt = prompt_text(s, dim, aspects)
        reasoning, action = scripted_action(s)
        assert validate(action, s) == "", (validate(action, s), action)
        out.append({"instruction": prompt.splitlines()[0], "history": prompt.splitlines()[1], "observation": prompt.splitlines()[2],
                    "reasoning": reasoning, "action": json.dumps(action, separators=(",", ":")),
                    "prompt": prompt, "completion": completion_text(reasoning, action)})
        s.apply(action)
    return out


def build_records(outcomes, p, seed: int):
    """The scripted planner's sessions on the population generators, unrolled into step records (a DataFrame).

    Population generators are never evaluated: the planner is trained on other models than those
    it is scored on. The last ``planner.heldout_generators`` generators' records only feed the
    held-out loss (the plateau check)."""
    import pandas as pd

    from paperworks.core.seeding import derive_seed
    from paperworks.eval_agent.artifacts import RECORD_SCHEMA
    from paperworks.eval_agent.report import levels, pools
    from paperworks.eval_agent.world import STRATA

    edges = levels(outcomes, p.zoo.dims)
    population = sorted(outcomes.loc[outcomes["role"] == "population", "model"].unique(), key=lambda m: int(m[3:]))
    heldout = set(population[-p.planner.heldout_generators:])
    rows = []
    for gen in population:
        for dim in p.zoo.dims:
            pool = pools(outcomes, gen, "a", dim)
            weights = np.bincount(pool.stratum, minlength=len(STRATA[dim])) / len(pool.stratum)
            for rep in range(p.planner.trace_repeats):
                rng = np.random.default_rng(derive_seed(seed, "eval_agent", "trace", gen, dim, rep))
                s = StepState.start(pool, weights, edges[dim], p.agent, rng)
                for k, r in enumerate(scripted_records(s, dim, STRATA[dim])):
                    rows.append({"split": "heldout" if gen in heldout else "train", "generator": gen, "dim": dim,
                                 "repeat": rep, "step": k, **r})
    return pd.DataFrame(rows, columns=RECORD_SCHEMA.names)


def rollout(model, tok, states: list[StepState], dims: list[str], aspects: list[tuple[str, ...]], max_new_tokens: int,
            seed: int) -> tuple[list[dict], list[dict]]:
    """Drive every session with the trained planner, all sessions' steps decoded as one batch (greedy).

    Returns per session ``{decisions, invalid, retried_ok, fallbacks}`` and the invalid-action log
    (session index, step, the text, why it was refused, what was done instead)."""
    import torch

    from paperworks.core.lm import sample

    counts = [{"decisions": 0, "invalid": 0, "retried_ok": 0, "fallbacks": 0} for _ in states]
    log: list[dict] = []
    step = 0
    while True:
        live = [i for i, s in enumerate(states) if not s.done]
        if not live:
            return counts, log
        prompts = [prompt_text(states[i], dims[i], aspects[i]) for i in live]
        texts = sample(model, tok, prompts, max_new_tokens=max_new_tokens, greedy=True).texts
        bad = [(i, t) for i, t in zip(live, texts) if validate(parse_action(t), states[i])]
        retry: dict[int, str] = {}
        if bad:  # one retry per refused action, by temperature sampling (greedy would repeat itself)
            torch.manual_seed(seed * 1000 + step)
            again = sample(model, tok, [prompt_text(states[i], dims[i], aspects[i]) for i, _ in bad],
                           max_new_tokens=max_new_tokens, temperature=1.0).texts
            retry = {i: t for (i, _), t in zip(bad, again)}
        for i, t in zip(live, texts):
            s, c = states[i], counts[i]
            c["decisions"] += 1
            action = parse_action(t)
            why = validate(action, s)
            if why:
                c["invalid"] += 1
                action2 = parse_action(retry[i])
                why2 = validate(action2, s)
                if why2:
                    c["fallbacks"] += 1
                    action2 = fallback_action(s)
                else:
                    c["retried_ok"] += 1
                log.append({"session": i, "step": step, "text": t, "why": why, "retry": retry[i], "retry_why": why2,
                            "applied": json.dumps(action2, separators=(",", ":")), "outcome": "fallback" if why2 else "retry"})
                action = action2
            s.apply(action)
        step += 1


__all__ = ["build_records", "rollout", "REFUSALS", "refusal_kind", "StepState", "prompt_text", "scripted_action", "completion_text", "parse_action", "validate", "fallback_action",
           "scripted_records"]
