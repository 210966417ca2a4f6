"""One cycle of the versioned loop, as a function: what the stage ``mol_versions`` runs once per configured cycle and
what the Prefect deployment (``flows/mol_cycle.py``) runs once per scheduled run on a live version store.

:class:`Loop` holds what every cycle needs (params, world, tokenizer, frozen base, the loop's suites / dev pools /
audit traffic — deterministic from the params and the global seed, so the live store audits the same traffic the DVC
stage did); :meth:`Loop.cycle` runs cycle ``k`` on a :class:`~paperworks.mol.versions.VersionStore`: audit with the
served version → weakest capability → harness search on a harness dev pool (:mod:`paperworks.mol.harness`) →
verified trajectories on seed problems (the served adapter under the chosen harness + the teacher) → update that
adapter → contract → accept or reject, and returns the lineage record.

A :class:`Layout` is the one thing that differs between the mixture of LoRA and one monolithic model: which adapter
file of a version answers — and is updated for — each capability. ``mol_versions`` runs the loop on
:func:`mol_layout` (one adapter per capability; an update touches one of four files), ``mol_versions_monolith``
on :func:`monolith_layout` (the one LoRA on the mixture answers every capability; an update rewrites it).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paperworks.core.io import load_safetensors
from paperworks.core.seeding import derive_seed
from paperworks.mol import harness as H
from paperworks.mol import versions as V
from paperworks.mol import world as W
from paperworks.mol.models import generate, lora_model, save_adapter, train_on


@dataclass(frozen=True)
class Layout:
    """Which adapter file (slot) of a version answers, and is updated for, each capability; the rank of those files,
    the update's learning rate and what v0 is (recorded in the lineage)."""

    name: str
    slots: tuple[str, ...]
    slot_of: tuple[tuple[str, str], ...]   # (capability, slot) pairs
    rank: int
    update_lr: float
    v0: tuple[tuple[str, object], ...]     # v0's training config (lineage)
    replay_answered: bool = False          # replay every capability the rewritten file answers, not only the updated one
    update_steps: int | None = None        # the update's steps (None: versions.update_steps)

    def slot(self, cap: str) -> str:
        return dict(self.slot_of)[cap]

    def shares(self, cap: str) -> list[str]:
        """The capabilities answered by the file an update of ``cap`` rewrites (``cap`` itself for the mixture)."""
        return [c for c in W.CAPABILITIES if self.slot(c) == self.slot(cap)]

    def replay_capabilities(self, cap: str) -> list[str]:
        """Whose training items an update of ``cap`` replays: ``cap`` alone, or with ``replay_answered`` every
        capability the rewritten file answers (the same for the mixture, whose files answer one capability each)."""
        return self.shares(cap) if self.replay_answered else [cap]


def mol_layout(p, seed: int | None = None) -> Layout:
    """The mixture of LoRA: one rank-``adapters.rank`` adapter per capability, v0 = the specialists of ``seed``
    (default ``versions.seed``)."""
    a = p.adapters
    return Layout("mol", tuple(W.CAPABILITIES), tuple((c, c) for c in W.CAPABILITIES), a.rank, p.versions.update_lr,
                  (("specialists_seed", p.versions.seed if seed is None else seed), ("steps", a.steps), ("rank", a.rank), ("lr", a.lr)))


def monolith_layout(p, seed: int | None = None) -> Layout:
    """One monolithic model: the one LoRA on the mixture of ``versions.seed`` (rank 4 × ``adapters.rank``, the
    specialists' trainable parameters together) answers every capability, and every update rewrites it."""
    a, n = p.adapters, len(W.CAPABILITIES)
    return Layout("monolith", (V.MONOLITH,), tuple((c, V.MONOLITH) for c in W.CAPABILITIES), n * a.rank, p.monolith.update_lr,
                  (("single_lora_seed", p.versions.seed if seed is None else seed), ("steps", n * a.steps), ("rank", n * a.rank), ("lr", a.single_lora_lr)),
                  replay_answered=p.monolith.replay == "answered", update_steps=p.monolith.update_steps)


class Bank:
    """Greedy answers of an adapter file on items, verified; cached by (adapter sha256, pool, capability) — the same
    bytes on the frozen base give the same greedy answers, so an untouched adapter is never re-run."""

    def __init__(self, base, tok, a, tables, rank: int | None = None):
        from peft import get_peft_model_state_dict

        self.model = lora_model(base, rank or a.rank, a.alpha_over_rank, seed=0).eval()
        self.shapes = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(self.model).items()}
        self.tok, self.mnt, self.tables = tok, a.max_new_tokens, tables
        self.cache: dict[tuple[str, str, str], list[bool]] = {}

    def load(self, model, path: Path) -> None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_safetensors(path, self.shapes))

    def outputs(self, path: Path, items: list[dict]) -> list[str]:
        self.load(self.model, path)
        return generate(self.model, self.tok, [x["prompt"] for x in items], self.mnt)

    def generator(self, path: Path) -> H.Generate:
        """The adapter file's ``generate(prompts, temperature, seed)`` for the harness (loaded on every call: the
        bank's model is shared with other files between calls)."""
        sample = H.model_generate(self.model, self.tok, self.mnt)

        def generate(prompts: list[str], temperature: float | None, seed: int) -> list[str]:
            self.load(self.model, path)
            return sample(prompts, temperature, seed)
        return generate

    def successes(self, path: Path, pool: str, cap: str, items: list[dict]) -> list[bool]:
        key = (V.sha256_file(path), pool, cap)
        if key not in self.cache:
            outs = self.outputs(path, items)
            self.cache[key] = [bool(W.verify(cap, W.request_from_dict(x), o, self.tables)) for x, o in zip(items, outs)]
        return self.cache[key]


def verified_share(items: list[dict], tables):
    def share(outputs: list[str]) -> float:
        return sum(W.verify(x["capability"], W.request_from_dict(x), o, tables) for x, o in zip(items, outputs)) / len(items)
    return share


class Loop:
    """Everything a cycle needs, built once: ``p`` (the mol params), ``g`` (the global seed), the world, the tokenizer,
    the frozen base and its config, ``ev`` (evidence params: alpha, bootstrap resamples), ``layout`` (which adapter
    file answers and is updated for each capability; default the mixture of LoRA)."""

    def __init__(self, p, g: int, world: dict, tok, base, cfg, ev, layout: Layout | None = None, seed: int | None = None):
        self.p, self.g, self.world, self.tok, self.base, self.cfg, self.ev = p, g, world, tok, base, cfg, ev
        self.a, self.vp = p.adapters, p.versions
        self.seed = p.versions.seed if seed is None else seed
        self.layout = layout or mol_layout(p, self.seed)
        # a replicate loop (another adapter seed) trains its updates from its own initialisation and data order; the
        # traffic, suites, seed problems and teacher are shared data (paired across loop runs); versions.seed's keep
        # the streams they always had
        self.update_tag = () if self.seed == p.versions.seed else ("replicate", self.seed)
        self.tables = world["tables"]
        self.data = V.build_loop_data(world, self.vp, p.world.weak_cue_share, self.rng_for)
        self.suites, self.dev = self.data["suites"], self.data["dev"]
        self.held = V.held_out_bodies(world, self.suites) | {V.body(x) for d in self.dev.values() for items in d.values() for x in items}
        self.trained = frozenset(V.body(x) for s in ("train", "dev") for items in world[s].values() for x in items)
        self.bank = Bank(base, tok, self.a, self.tables, self.layout.rank)
        self.suite_hash = {sid: V.sha256_json(s) for sid, s in self.suites.items()}
        self.update_steps = self.layout.update_steps or self.vp.update_steps
        self.config = {"update_steps": self.update_steps, "update_lr": self.layout.update_lr, "replay_items": self.vp.replay_items,
                       "rank": self.layout.rank, "teacher_samples": self.vp.teacher_samples, "teacher_noise": self.vp.teacher_noise,
                       "seed_problems": self.vp.seed_problems, "eval_every": self.vp.eval_every, "contract": self.vp.contract.model_dump(),
                       "harness_search": self.vp.harness.model_dump(mode="json")}

    def rng_for(self, *parts) -> np.random.Generator:
        return np.random.default_rng(derive_seed(self.g, "mol", "versions", *parts))

    def new_store(self, root: Path | str) -> V.VersionStore:
        return V.VersionStore(root, self.layout.slots)

    def init_store(self, store: V.VersionStore, adapters: dict[str, Path]) -> str:
        """v0 (``adapters``: slot → file): the four specialists of ``versions.seed``, or its one LoRA on the mixture."""
        return store.init(adapters, {"candidate": "-", "shift": 0, "faulty": False, "config": dict(self.layout.v0),
                                     "data": {"train_sha256": V.sha256_json(self.world["train"]), "suites_sha256": {"0": self.suite_hash["0"]}}})

    @staticmethod
    def suite_of(store: V.VersionStore) -> dict[str, str]:
        """The acceptance suite each accepted version brought in (v0: the world's test suites, "0")."""
        return {r["version"]: str(r.get("shift", 0)) for r in store.lineage() if r["status"] == "accepted"}

    def cycle(self, store: V.VersionStore, k: int, scratch: Path) -> dict:
        """Run configured cycle ``k`` (1-based) on ``store``; returns its lineage record (with ``cpu_s``)."""
        a, vp, p, g, lay = self.a, self.vp, self.p, self.g, self.layout
        if not 1 <= k <= len(vp.cycles):
            raise ValueError(f"cycle {k}: mol.versions.cycles configures cycles 1..{len(vp.cycles)}")
        cycle = vp.cycles[k - 1]
        suites, dev, bank, tables = self.suites, self.dev, self.bank, self.tables
        suite_of = self.suite_of(store)
        t0 = time.process_time()
        cand = f"cand{k}"
        s = str(cycle.shift)
        served = store.serving()
        answering = {c: served["adapters"][lay.slot(c)] for c in W.CAPABILITIES}  # the served file of each capability
        audit = {cap: float(np.mean(bank.successes(answering[cap], f"audit{k}", cap, self.data["audit"][k - 1][cap])))
                 for cap in W.CAPABILITIES}
        cap = V.pick_weakest(audit)
        slot = lay.slot(cap)
        problems = V.traffic_items(self.rng_for("problems", k, cap), cap, vp.seed_problems, cycle.shift, vp.new_verb_share, self.held,
                                   p.world.weak_cue_share)
        own, harness, harness_pool = self.harness(k, cap, cycle, problems, answering[cap])
        kept, stats = V.propose_trajectories(self.rng_for("teacher", k), problems, cap, own, vp.teacher_samples, vp.teacher_noise,
                                             tables, cycle.faulty)
        replay_caps = self.layout.replay_capabilities(cap)
        pool = [x for c in replay_caps for x in self.world["train"][c]]
        replay = [pool[i] for i in sorted(self.rng_for("replay", k).choice(len(pool), min(vp.replay_items, len(pool)), replace=False))]
        update = kept + replay
        V.check_update_disjoint(update, self.held | {V.body(x) for x in harness_pool})

        model = lora_model(self.base, lay.rank, a.alpha_over_rank, derive_seed(g, "mol", "versions", "lora", k, *self.update_tag))
        bank.load(model, answering[cap])
        history = train_on(model, self.tok, update, dev[s][cap], self.update_steps, lay.update_lr, a, self.cfg.max_positions,
                           derive_seed(g, "mol", "versions", "order", k, *self.update_tag), vp.eval_every, None, f"{cand} {cap}",
                           verified_share(dev[s][cap], tables))
        cand_file = Path(scratch) / f"{cand}_{slot}.safetensors"
        save_adapter(model, cand_file, lay.rank, a.alpha_over_rank * lay.rank)
        del model

        new_c = bank.successes(cand_file, f"suite{s}", cap, suites[s][cap])
        new_p = bank.successes(answering[cap], f"suite{s}", cap, suites[s][cap])
        candidate = {c: (cand_file if c in lay.shares(cap) else answering[c]) for c in W.CAPABILITIES}
        retention, ret_means, ret_all = {}, {}, {}
        for sid in sorted(set(suite_of.values())):
            pairs = {c: (bank.successes(candidate[c], f"suite{sid}", c, suites[sid][c]),
                         bank.successes(answering[c], f"suite{sid}", c, suites[sid][c])) for c in W.CAPABILITIES}
            # the contract compares every capability the rewritten file answers; the others are byte-identical
            retention[sid] = {c: (pairs[c] if c in lay.shares(cap) else None) for c in W.CAPABILITIES}
            ret_means[sid] = {"candidate": float(np.mean(pairs[cap][0])), "parent": float(np.mean(pairs[cap][1]))}
            ret_all[sid] = {c: {"candidate": float(np.mean(pairs[c][0])), "parent": float(np.mean(pairs[c][1]))} for c in W.CAPABILITIES}
        cand_sha = V.sha256_file(cand_file)
        identical = {c: (cand_sha if c in lay.shares(cap) else served["sha256"][lay.slot(c)]) == served["sha256"][lay.slot(c)]
                     for c in W.CAPABILITIES}
        checks = V.contract_checks(vp.contract, cap, data_verified=V.verified_share_of(update, cap, tables), new_suite=(new_c, new_p),
                                   retention=retention, identical=identical, alpha=self.ev.alpha, n_boot=self.ev.bootstrap_resamples,
                                   seed=derive_seed(g, "mol", "versions", "contract", k),
                                   others=[c for c in W.CAPABILITIES if c not in lay.shares(cap)])
        rec = store.propose(cand, cap, cand_file, checks, slot=slot, record={
            "shift": cycle.shift, "faulty": cycle.faulty, "audit": audit, "weakest": cap, "trajectories": stats,
            "registry": W.registry(cycle.shift), "components": W.components(cycle.shift),
            "data": {"update_sha256": V.sha256_json([[x["prompt"], x["target"]] for x in update]),
                     "problems_sha256": V.sha256_json(problems), "update_items": len(update), "replay_items": len(replay),
                     "replay_by_capability": {c: sum(x["capability"] == c for x in replay) for c in replay_caps},
                     "suites_sha256": {sid: self.suite_hash[sid] for sid in sorted({s, *suite_of.values()})}},
            "config": self.config, "harness": harness, "history": history,
            "new_suite": {"suite": s, "candidate": float(np.mean(new_c)), "parent": float(np.mean(new_p))},
            "retention": ret_means, "retention_by_capability": ret_all})
        print(f"{cand} (shift {s}{', faulty' if cycle.faulty else ''}): audit {audit} → update {cap}; harness "
              f"{harness.get('label', harness.get('skipped'))}; kept "
              f"{stats['kept']}/{stats['proposed']}; new suite {np.mean(new_c):.3f} vs parent {np.mean(new_p):.3f} → "
              f"{rec['status']}{' as ' + rec['version'] if rec['version'] else ''}"
              + (f" ({'; '.join(rec['failed_checks'])})" if rec["failed_checks"] else ""))
        return {**rec, "cpu_s": time.process_time() - t0}

    def harness(self, k: int, cap: str, cycle, problems: list[dict], served: Path) -> tuple[list[str | None], dict, list[dict]]:
        """The served adapter's own answers to the seed problems under the harness Optuna chose on a harness dev pool
        (None where no sample verified), the lineage's harness record and the pool. The faulty cycle skips the search:
        its update data is the mislabelled teacher's alone, so the model's answers would be computed and dropped."""
        if cycle.faulty:
            return [None] * len(problems), {"skipped": "faulty cycle"}, []
        hp, tables = self.vp.harness, self.tables
        # its own rng stream; disjoint from every held-out request, the training items and this cycle's seed problems
        pool = V.traffic_items(self.rng_for("harness", k, cap), cap, hp.pool, cycle.shift, self.vp.new_verb_share,
                               self.held | self.trained | {V.body(x) for x in problems}, self.p.world.weak_cue_share)

        def verify(x: dict, answer: str) -> bool:
            return bool(W.verify(cap, W.request_from_dict(x), answer, tables))

        generate = self.bank.generator(served)
        chosen, record = H.search_harness(generate, pool, verify, hp, derive_seed(self.g, "mol", "versions", "harness", k))
        run = H.run_harness(generate, problems, verify, chosen, derive_seed(self.g, "mol", "versions", "harness_run", k))
        record.update(dev_pool_sha256=V.sha256_json(pool), problems=len(problems), problems_verified=run.verified,
                      problems_samples=run.total_samples, samples=record["search_samples"] + run.total_samples)
        return run.outputs, record, pool

    def answers(self, store: V.VersionStore) -> dict:
        """Every accepted version on every acceptance suite, per item (the per-unit values of the loop's claims)."""
        return {version: {sid: {cap: self.bank.successes(store.path(version, self.layout.slot(cap)), f"suite{sid}", cap,
                                                         self.suites[sid][cap])
                                for cap in W.CAPABILITIES} for sid in sorted(self.suites)}
                for version in store.accepted_versions()}
