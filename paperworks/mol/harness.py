"""The harness search of a versioned-loop cycle: how the served adapter produces its own candidate trajectories.

In the paper a version is a model snapshot *plus* its harness (the runtime configuration: prompts, tools,
orchestration), and the loop searches over that configuration. Here a harness is

- **decoding**: greedy, or temperature sampling at ``temperature``;
- **retries**: up to ``max_retries`` samples per problem; the **first** answer the capability's external verifier
  accepts is kept, and the problem costs the samples drawn until then (none accepted → no trajectory, every sample
  counted).

Optuna (TPE, seeded from the cycle) searches decoding × temperature × retries on a **harness dev pool** of the
cycle's traffic, disjoint from every acceptance suite, dev pool, test conversation, training item and the cycle's
seed problems. Objective: the verified share of the pool. The first trial is greedy decoding with one try — the
harness the loop used before the search existed — so the search is compared with it on the same pool. The
choice: the highest verified share, ties → fewer samples, then the earlier trial. The chosen harness then answers
the cycle's seed problems; its verified answers are the served model's own trajectories.

Few-shot exemplars are not searched (see :class:`paperworks.mol.params.HarnessParams`).

Everything model-specific is a ``generate(prompts, temperature, seed) -> answers`` callable (``temperature`` None =
greedy), so the retry semantics and the search are tested with planted generators.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import optuna
import torch

from paperworks.core.lm import sample

Generate = Callable[[list[str], "float | None", int], list[str]]
Verify = Callable[[dict, str], bool]


@dataclass(frozen=True)
class Harness:
    """One harness: ``temperature`` None = greedy decoding (then one try: a retry would give the same answer)."""

    temperature: float | None
    max_retries: int

    @property
    def decoding(self) -> str:
        return "greedy" if self.temperature is None else "sample"

    def label(self) -> str:
        return "greedy" if self.temperature is None else f"sample t={self.temperature:.2f} ×{self.max_retries}"


GREEDY = Harness(None, 1)


@dataclass
class HarnessRun:
    outputs: list[str | None]   # per problem: the first verified answer, None when no sample verified
    samples: list[int]          # per problem: samples drawn (up to and including the first verified one)

    @property
    def verified(self) -> int:
        return sum(o is not None for o in self.outputs)

    @property
    def total_samples(self) -> int:
        return sum(self.samples)


def run_harness(generate: Generate, problems: Sequence[dict], verify: Verify, harness: Harness, seed: int) -> HarnessRun:
    """Answer every problem with ``harness``: attempt r samples only the problems still without a verified answer
    (seed ``seed + r``), so a problem stops costing samples at its first verified one."""
    outputs: list[str | None] = [None] * len(problems)
    samples = [0] * len(problems)
    pending = list(range(len(problems)))
    for attempt in range(harness.max_retries):
        if not pending:
            break
        answers = generate([problems[i]["prompt"] for i in pending], harness.temperature, seed + attempt)
        still = []
        for i, answer in zip(pending, answers):
            samples[i] += 1
            if verify(problems[i], answer):
                outputs[i] = answer       # the first verified sample; later attempts never see this problem
            else:
                still.append(i)
        pending = still
    return HarnessRun(outputs, samples)


def choose(trials: Sequence[dict]) -> dict:
    """The best trial: highest verified share, ties → fewer samples, then the earlier trial."""
    return max(trials, key=lambda t: (t["value"], -t["samples"], -t["number"]))


def search_harness(generate: Generate, pool: Sequence[dict], verify: Verify, hp, seed: int) -> tuple[Harness, dict]:
    """Optuna over decoding × temperature × retries on the harness dev pool (``hp``: :class:`HarnessParams`).
    Returns the chosen harness and the search record (every trial, the greedy baseline's value, samples used)."""
    low, high = hp.temperature_range
    trials: list[dict] = []

    def objective(trial: optuna.Trial) -> float:
        if trial.suggest_categorical("decoding", ["greedy", "sample"]) == "greedy":
            harness = GREEDY
        else:
            harness = Harness(trial.suggest_float("temperature", low, high), trial.suggest_int("max_retries", 1, hp.max_retries))
        run = run_harness(generate, pool, verify, harness, seed=seed + 1000 * (trial.number + 1))
        value = run.verified / len(pool)
        trials.append({"number": trial.number, **asdict(harness), "label": harness.label(), "value": value,
                       "samples": run.total_samples})
        return value

    # TPE over a seeded sampler: the same params and seed give the same trials; in-memory storage (seconds per cycle,
    # nothing to resume). The first trial is the loop's old harness, the baseline the search is measured against.
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(5, hp.trials))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial({"decoding": "greedy"})
    study.optimize(objective, n_trials=hp.trials)
    best = choose(trials)
    chosen = Harness(best["temperature"], best["max_retries"])
    return chosen, {
        "decoding": chosen.decoding, "temperature": chosen.temperature, "max_retries": chosen.max_retries,
        "label": chosen.label(), "dev_verified_share": best["value"], "dev_samples": best["samples"],
        "greedy_dev_verified_share": trials[0]["value"], "n_trials": len(trials), "trials": trials,
        "search_samples": sum(t["samples"] for t in trials), "dev_pool": len(pool), "sampler_seed": seed,
        "search_space": {"decoding": ["greedy", "sample"], "temperature": [low, high], "max_retries": [1, hp.max_retries]},
    }


def model_generate(model, tok, max_new_tokens: int, batch_size: int = 64) -> Generate:
    """``generate`` for a (peft) causal LM: greedy for ``temperature`` None, else temperature sampling seeded by
    ``seed`` inside a forked torch RNG (the caller's random state is left as it was)."""
    def generate(prompts: list[str], temperature: float | None, seed: int) -> list[str]:
        out: list[str] = []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for i in range(0, len(prompts), batch_size):
                chunk = list(prompts[i: i + batch_size])
                res = sample(model, tok, chunk, max_new_tokens=max_new_tokens, greedy=temperature is None,
                             temperature=1.0 if temperature is None else temperature)
                out.extend(res.texts)
        return out
    return generate
