"""Stage mol_versions: the versioned loop v0 → v1 → … on shifting traffic, each candidate gated by the contract.

v0 = the four specialists of ``mol.versions.seed``. Each cycle audits its traffic with the served version,
updates the weakest capability's adapter on verified trajectories and proposes it; the contract accepts or
rejects it (see :mod:`paperworks.mol.versions`). Outputs: the version store (``data/mol/versions``: accepted
versions, candidates, ``serving.json``, ``lineage.json``, ``lineage.md``, per-item answers of every accepted
version on every acceptance suite), ``metrics/mol_versions.json`` (scalars for ``dvc exp show``) and
``plots/mol/lineage.csv``.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from paperworks.core.claims import load_evidence
from paperworks.core.io import atomic_path, load_safetensors, write_json, write_run_log, write_text
from paperworks.core.lm import load_checkpoint, load_tokenizer
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.mol import versions as V
from paperworks.mol import world as W
from paperworks.mol.artifacts import BASE, PLOTS, VERSIONS, WORLD, read_world, seed_dir
from paperworks.mol.models import freeze, generate, lora_model, save_adapter, train_on
from paperworks.mol.params import Params

METRICS = Path("metrics/mol_versions.json")


class Bank:
    """Greedy answers of an adapter file on items, verified; cached by (adapter sha256, pool, capability) — the same
    bytes on the frozen base give the same greedy answers, so an untouched adapter is never re-run."""

    def __init__(self, base, tok, a, tables):
        from peft import get_peft_model_state_dict

        self.model = lora_model(base, a.rank, a.alpha_over_rank, seed=0).eval()
        self.shapes = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(self.model).items()}
        self.tok, self.mnt, self.tables = tok, a.max_new_tokens, tables
        self.cache: dict[tuple[str, str, str], list[bool]] = {}

    def load(self, model, path: Path) -> None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_safetensors(path, self.shapes))

    def outputs(self, path: Path, items: list[dict]) -> list[str]:
        self.load(self.model, path)
        return generate(self.model, self.tok, [x["prompt"] for x in items], self.mnt)

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


@stage_main
def main() -> None:
    p = load_section("mol", Params)
    a, vp = p.adapters, p.versions
    raw = read_params_file()
    g = global_seed(raw)
    seed_everything(derive_seed(g, "mol", "versions"))
    ev = load_evidence()
    world = read_world()
    tables = world["tables"]
    tok = load_tokenizer(WORLD / "tokenizer.json")
    base, cfg, _ = load_checkpoint(BASE)
    freeze(base)

    def rng_for(*parts) -> np.random.Generator:
        return np.random.default_rng(derive_seed(g, "mol", "versions", *parts))

    data = V.build_loop_data(world, vp, p.world.weak_cue_share, rng_for)
    suites, dev = data["suites"], data["dev"]
    held = V.held_out_bodies(world, suites) | {V.body(x) for d in dev.values() for items in d.values() for x in items}
    bank = Bank(base, tok, a, tables)
    cpu: dict[str, float] = {}
    config = {"update_steps": vp.update_steps, "update_lr": vp.update_lr, "replay_items": vp.replay_items, "rank": a.rank,
              "teacher_samples": vp.teacher_samples, "teacher_noise": vp.teacher_noise, "seed_problems": vp.seed_problems,
              "eval_every": vp.eval_every, "contract": vp.contract.model_dump()}
    suite_hash = {sid: V.sha256_json(s) for sid, s in suites.items()}

    with atomic_path(VERSIONS) as root, tempfile.TemporaryDirectory() as scratch:
        store = V.VersionStore(root)
        src = {cap: seed_dir(vp.seed) / "adapters" / f"{cap}.safetensors" for cap in W.CAPABILITIES}
        store.init(src, {"candidate": "-", "shift": 0, "faulty": False,
                         "config": {"specialists_seed": vp.seed, "steps": a.steps, "rank": a.rank, "lr": a.lr},
                         "data": {"train_sha256": V.sha256_json(world["train"]), "suites_sha256": {"0": suite_hash["0"]}}})
        suite_of = {"v0": "0"}  # the acceptance suite each accepted version brought in
        for k, cycle in enumerate(vp.cycles, 1):
            t0 = time.process_time()
            cand = f"cand{k}"
            s = str(cycle.shift)
            served = store.serving()
            audit = {cap: float(np.mean(bank.successes(served["adapters"][cap], f"audit{k}", cap, data["audit"][k - 1][cap])))
                     for cap in W.CAPABILITIES}
            cap = V.pick_weakest(audit)
            problems = V.traffic_items(rng_for("problems", k, cap), cap, vp.seed_problems, cycle.shift, vp.new_verb_share, held,
                                       p.world.weak_cue_share)
            own = bank.outputs(served["adapters"][cap], problems)
            kept, stats = V.propose_trajectories(rng_for("teacher", k), problems, cap, own, vp.teacher_samples, vp.teacher_noise,
                                                 tables, cycle.faulty)
            pool = world["train"][cap]
            replay = [pool[i] for i in sorted(rng_for("replay", k).choice(len(pool), min(vp.replay_items, len(pool)), replace=False))]
            update = kept + replay
            V.check_update_disjoint(update, held)

            model = lora_model(base, a.rank, a.alpha_over_rank, derive_seed(g, "mol", "versions", "lora", k))
            bank.load(model, served["adapters"][cap])
            history = train_on(model, tok, update, dev[s][cap], vp.update_steps, vp.update_lr, a, cfg.max_positions,
                               derive_seed(g, "mol", "versions", "order", k), vp.eval_every, None, f"{cand} {cap}",
                               verified_share(dev[s][cap], tables))
            cand_file = Path(scratch) / f"{cand}_{cap}.safetensors"
            save_adapter(model, cand_file, a.rank, a.alpha_over_rank * a.rank)
            del model

            new_c = bank.successes(cand_file, f"suite{s}", cap, suites[s][cap])
            new_p = bank.successes(served["adapters"][cap], f"suite{s}", cap, suites[s][cap])
            retention, ret_means = {}, {}
            for sid in sorted(set(suite_of.values())):
                pair = (bank.successes(cand_file, f"suite{sid}", cap, suites[sid][cap]),
                        bank.successes(served["adapters"][cap], f"suite{sid}", cap, suites[sid][cap]))
                retention[sid] = {c: (pair if c == cap else None) for c in W.CAPABILITIES}
                ret_means[sid] = {"candidate": float(np.mean(pair[0])), "parent": float(np.mean(pair[1]))}
            cand_sha = V.sha256_file(cand_file)
            identical = {c: (cand_sha if c == cap else served["sha256"][c]) == served["sha256"][c] for c in W.CAPABILITIES}
            checks = V.contract_checks(vp.contract, cap, data_verified=V.verified_share_of(update, cap, tables), new_suite=(new_c, new_p),
                                       retention=retention, identical=identical, alpha=ev.alpha, n_boot=ev.bootstrap_resamples,
                                       seed=derive_seed(g, "mol", "versions", "contract", k))
            rec = store.propose(cand, cap, cand_file, checks, {
                "shift": cycle.shift, "faulty": cycle.faulty, "audit": audit, "weakest": cap, "trajectories": stats,
                "registry": W.registry(cycle.shift), "components": W.components(cycle.shift),
                "data": {"update_sha256": V.sha256_json([[x["prompt"], x["target"]] for x in update]),
                         "problems_sha256": V.sha256_json(problems), "update_items": len(update), "replay_items": len(replay),
                         "suites_sha256": {sid: suite_hash[sid] for sid in sorted({s, *suite_of.values()})}},
                "config": config, "history": history,
                "new_suite": {"suite": s, "candidate": float(np.mean(new_c)), "parent": float(np.mean(new_p))},
                "retention": ret_means})
            if rec["status"] == "accepted":
                suite_of[rec["version"]] = s
            cpu[cand] = time.process_time() - t0
            print(f"{cand} (shift {s}{', faulty' if cycle.faulty else ''}): audit {audit} → update {cap}; kept "
                  f"{stats['kept']}/{stats['proposed']}; new suite {np.mean(new_c):.3f} vs parent {np.mean(new_p):.3f} → "
                  f"{rec['status']}{' as ' + rec['version'] if rec['version'] else ''}"
                  + (f" ({'; '.join(rec['failed_checks'])})" if rec["failed_checks"] else ""))

        # every accepted version on every acceptance suite, per item (the per-unit values of the loop's claims)
        answers = {}
        for version in store.accepted_versions():
            answers[version] = {sid: {cap: bank.successes(store.path(version, cap), f"suite{sid}", cap, suites[sid][cap])
                                      for cap in W.CAPABILITIES} for sid in sorted(suites)}
        write_json(Path(root) / "answers.json", {"suite_of": suite_of, "answers": answers})
        write_json(Path(root) / "suites.json", {"suites": suites, "dev": dev, "audit": data["audit"]})
        lineage = store.lineage()
        serving = store.serving()["version"]
        write_text(Path(root) / "lineage.md", V.lineage_markdown(lineage, serving))

    write_text(PLOTS / "lineage.csv", pd.DataFrame(V.lineage_rows(lineage)).to_csv(index=False, float_format="%.6g"))
    cands = [r for r in lineage if r["candidate"] != "-"]
    write_json(METRICS, {
        "profile": raw.get("profile"),
        "serving_version": serving,
        "accepted": sum(r["status"] == "accepted" for r in cands),
        "rejected": sum(r["status"] == "rejected" for r in cands),
        "candidates": {r["candidate"]: {"status": r["status"], "version": r["version"] or "-", "parent": r["parent"],
                                        "capability": r["capability"], "shift": r["shift"], "faulty": r["faulty"],
                                        "audit_success": r["audit"][r["capability"]], "kept_share": r["trajectories"]["kept_share"],
                                        "new_suite_success": r["new_suite"]["candidate"], "parent_new_suite_success": r["new_suite"]["parent"],
                                        "failed_checks": len(r["failed_checks"])} for r in cands},
        "versions": {v: {f"suite_{sid}": {cap: float(np.mean(x)) for cap, x in per.items()} for sid, per in by.items()}
                     for v, by in answers.items()},
    })
    write_run_log("mol_versions", {"cpu_s": cpu})


if __name__ == "__main__":
    main()
