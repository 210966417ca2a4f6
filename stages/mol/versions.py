"""Stage mol_versions: the versioned loop v0 → v1 → … on shifting traffic, each candidate gated by the contract.

v0 = the four specialists of ``mol.versions.seed``. Each cycle audits its traffic with the served version,
updates the weakest capability's adapter on verified trajectories and proposes it; the contract accepts or
rejects it (see :mod:`paperworks.mol.versions`; one cycle is :meth:`paperworks.mol.loop.Loop.cycle`, which the
Prefect deployment ``flows/mol_cycle.py`` runs once per scheduled run on a live store). Outputs: the version store (``data/mol/versions``: accepted
versions, candidates, ``serving.json``, ``lineage.json``, ``lineage.md``, per-item answers of every accepted
version on every acceptance suite), ``metrics/mol_versions.json`` (scalars for ``dvc exp show``) and
``plots/mol/lineage.csv``.

``--layout monolith`` (stage ``mol_versions_monolith``) runs the same loop on one monolithic model: v0 = the one
LoRA on the mixture that ``mol_train@<versions.seed>`` trained, every update rewrites that one adapter
(:func:`paperworks.mol.loop.monolith_layout`); outputs ``data/mol/versions_monolith``,
``metrics/mol_versions_monolith.json``, ``plots/mol/lineage_monolith.csv``.

``--seed S`` (stage ``mol_versions_replicate@S-<layout>``, S in ``mol.versions.replicate_seeds``) runs the same loop
once more from v0 = seed S's specialists (or single LoRA): an independent loop run for the loop and forgetting claims.
Its outputs all go into ``data/mol/versions_replicates/<layout>_seed_<S>`` (the store, ``lineage.csv``, ``metrics.json``).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from paperworks.core.claims import load_evidence
from paperworks.core.io import atomic_path, write_json, write_run_log, write_text
from paperworks.core.lm import load_checkpoint, load_tokenizer
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.mol import versions as V
from paperworks.mol import world as W
from paperworks.mol.artifacts import BASE, PLOTS, VERSIONS, VERSIONS_MONOLITH, WORLD, read_world, replicate_dir, seed_dir, single_lora_file
from paperworks.mol.loop import Loop, mol_layout, monolith_layout
from paperworks.mol.models import freeze
from paperworks.mol.params import Params

# layout → (v0's files by slot, store, metrics, lineage plot, run-log name)
OUTPUTS = {
    "mol": (lambda seed: {cap: seed_dir(seed) / "adapters" / f"{cap}.safetensors" for cap in W.CAPABILITIES},
            VERSIONS, Path("metrics/mol_versions.json"), PLOTS / "lineage.csv", "mol_versions"),
    "monolith": (lambda seed: {V.MONOLITH: single_lora_file(seed)},
                 VERSIONS_MONOLITH, Path("metrics/mol_versions_monolith.json"), PLOTS / "lineage_monolith.csv", "mol_versions_monolith"),
}
LAYOUTS = {"mol": mol_layout, "monolith": monolith_layout}


def loop_metrics(lineage: list[dict], answers: dict, serving: str, profile) -> dict:
    """Scalars of one loop run (``dvc exp show`` reads versions.seed's as ``metrics/mol_versions*.json``)."""
    cands = [r for r in lineage if r["candidate"] != "-"]
    return {
        "profile": profile,
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
    }


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", choices=sorted(LAYOUTS), default="mol")
    ap.add_argument("--seed", type=int, default=None, help="a mol.versions.replicate_seeds entry (default: versions.seed)")
    args = ap.parse_args()
    v0_files, out_dir, metrics, lineage_csv, log_name = OUTPUTS[args.layout]
    p = load_section("mol", Params)
    vp = p.versions
    seed = vp.seed if args.seed is None else args.seed
    if seed != vp.seed:
        if seed not in vp.replicate_seeds:
            raise SystemExit(f"--seed {seed}: not in mol.versions.replicate_seeds {vp.replicate_seeds} (nor versions.seed={vp.seed})")
        out_dir, log_name = replicate_dir(args.layout, seed), f"{log_name}_seed_{seed}"
    raw = read_params_file()
    g = global_seed(raw)
    seed_everything(derive_seed(g, "mol", "versions"))
    ev = load_evidence()
    world = read_world()
    tok = load_tokenizer(WORLD / "tokenizer.json")
    base, cfg, _ = load_checkpoint(BASE)
    freeze(base)

    loop = Loop(p, g, world, tok, base, cfg, ev, LAYOUTS[args.layout](p, seed), seed=seed)
    cpu: dict[str, float] = {}

    with atomic_path(out_dir) as root, tempfile.TemporaryDirectory() as scratch:
        store = loop.new_store(root)
        loop.init_store(store, v0_files(seed))
        for k in range(1, len(vp.cycles) + 1):
            cpu[f"cand{k}"] = loop.cycle(store, k, Path(scratch))["cpu_s"]
        answers = loop.answers(store)
        write_json(Path(root) / "answers.json", {"suite_of": loop.suite_of(store), "answers": answers})
        write_json(Path(root) / "suites.json", {"suites": loop.suites, "dev": loop.dev, "audit": loop.data["audit"]})
        lineage = store.lineage()
        serving = store.serving()["version"]
        write_text(Path(root) / "lineage.md", V.lineage_markdown(lineage, serving))
        summary = loop_metrics(lineage, answers, serving, raw.get("profile"))
        table = pd.DataFrame(V.lineage_rows(lineage)).to_csv(index=False, float_format="%.6g")
        if seed != vp.seed:  # a replicate keeps everything inside its one output directory, written atomically with it
            write_text(Path(root) / "lineage.csv", table)
            write_json(Path(root) / "metrics.json", summary)

    if seed == vp.seed:
        write_text(lineage_csv, table)
        write_json(metrics, summary)
    write_run_log(log_name, {"cpu_s": cpu})


if __name__ == "__main__":
    main()
