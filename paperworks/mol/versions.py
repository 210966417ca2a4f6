"""The versioned loop: versions of the four specialists that compound under shifting traffic, gated by a contract.

v0 is the four specialists of one training seed. A cycle:

1. **audit** simulated traffic of its shift (new verbs bring new tools or UI components) with the served
   version, every answer checked by its capability's verifier;
2. pick the **weakest capability** (lowest verified success on the audit; ties → first in CAPABILITIES);
3. **seed problems** of that capability from the shifted traffic distribution, disjoint from every acceptance
   suite and dev pool (hash-checked); trajectories proposed by the served adapter (greedy) and by a noisy
   teacher (a stand-in for a stronger generator: a share ``teacher_noise`` of its proposals is wrong);
   **only verified trajectories are kept**;
4. **update that one adapter** (continue its LoRA from the served weights on the kept trajectories + replay of
   its original training items); the other three adapters are not touched;
5. **contract** (:func:`contract_checks`): the update data re-verified; the updated capability ≥ a threshold on
   the new traffic's acceptance suite and better than the parent there; non-inferior to the parent on every
   earlier accepted suite (per capability; an adapter byte-identical to the parent's passes by identity);
6. **accept** (a new version under ``accepted/``, the serving pointer moves) or **reject** (the candidate stays
   under ``candidates/`` with the failed checks; serving and the accepted files are untouched);
   either way a **lineage record** (parent, data hashes, config, metrics, checks).

:class:`VersionStore` is the on-disk registry: ``accepted/<v>/<cap>.safetensors``, ``candidates/<c>/…``,
``serving.json`` (version + sha256 of each served file, re-checked on load), ``lineage.json``. Rollback to any
accepted version is one call (``python -m paperworks.mol.versions rollback v0``).

A store holds one file per **slot**: the four capabilities for the mixture of LoRA, or the one slot
:data:`MONOLITH` for the monolithic model (one LoRA answers every capability; stage ``mol_versions_monolith``).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from paperworks.core.io import ArtifactError, atomic_path, read_json, write_json, write_text
from paperworks.core.stats import compare_clustered
from paperworks.mol import world as W

SERVING = "serving.json"
LINEAGE = "lineage.json"
# A mislabelling bug: the faulty candidate's update targets are written in this other capability's format.
FAULT_SWAP = {"chat": "coding", "coding": "chat", "agent": "genui", "genui": "agent"}
MONOLITH = "monolith"  # the one slot of a monolithic model's store


def sha256_file(path: Path | str) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_json(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ------------------------------------------------------------------ the registry on disk
class VersionStore:
    """Accepted versions (immutable), candidates, the serving pointer and the lineage, under ``root``.

    ``slots``: the adapter files of a version (default: the four capabilities; ``(MONOLITH,)`` for one monolithic
    adapter). Omitted on an existing store, they are read from its first lineage record."""

    def __init__(self, root: Path | str, slots: Sequence[str] | None = None):
        self.root = Path(root)
        self._slots = tuple(slots) if slots else None

    @property
    def slots(self) -> tuple[str, ...]:
        if self._slots is None:
            lineage = self.lineage()
            names = set(lineage[0]["adapters"]) if lineage else set(W.CAPABILITIES)
            self._slots = tuple(W.CAPABILITIES) if names == set(W.CAPABILITIES) else tuple(sorted(names))
        return self._slots

    def path(self, version: str, slot: str) -> Path:
        return self.root / "accepted" / version / f"{slot}.safetensors"

    def lineage(self) -> list[dict]:
        p = self.root / LINEAGE
        return read_json(p) if p.exists() else []

    def _append(self, record: dict) -> None:
        write_json(self.root / LINEAGE, [*self.lineage(), record])

    def accepted_versions(self) -> list[str]:
        return [r["version"] for r in self.lineage() if r["status"] == "accepted"]

    def _point(self, version: str) -> None:
        files = {cap: {"path": str(self.path(version, cap).relative_to(self.root)), "sha256": sha256_file(self.path(version, cap))}
                 for cap in self.slots}
        write_json(self.root / SERVING, {"version": version, "adapters": files})

    def init(self, adapters: dict[str, Path], record: dict) -> str:
        """v0: copy the adapter files (one per slot) in, serve them, first lineage record."""
        if (self.root / LINEAGE).exists():
            raise ArtifactError(f"{self.root}: already holds a lineage (a store is initialised once)")
        self._copy_version("v0", adapters)
        self._append({**record, "version": "v0", "parent": None, "status": "accepted", "adapters": self._hashes("v0")})
        self._point("v0")
        return "v0"

    def _copy_version(self, version: str, adapters: dict[str, Path]) -> None:
        missing = [c for c in self.slots if c not in adapters]
        if missing:
            raise ValueError(f"version {version}: adapters missing for {missing}")
        with atomic_path(self.root / "accepted" / version) as tmp:
            tmp.mkdir(parents=True)
            for cap in self.slots:
                shutil.copyfile(adapters[cap], tmp / f"{cap}.safetensors")

    def _hashes(self, version: str) -> dict[str, str]:
        return {cap: sha256_file(self.path(version, cap)) for cap in self.slots}

    def serving(self) -> dict:
        """The served version and its adapter paths, every file re-hashed against the pointer (corruption → error)."""
        ptr = read_json(self.root / SERVING)
        out = {"version": ptr["version"], "adapters": {}}
        for cap in self.slots:
            path = self.root / ptr["adapters"][cap]["path"]
            if not path.exists() or sha256_file(path) != ptr["adapters"][cap]["sha256"]:
                raise ArtifactError(f"{path}: served adapter of {ptr['version']} is missing or altered (sha256 differs from {SERVING})")
            out["adapters"][cap] = path
        out["sha256"] = {cap: ptr["adapters"][cap]["sha256"] for cap in self.slots}
        return out

    def propose(self, candidate: str, cap: str, adapter_file: Path, checks: list[dict], record: dict,
                slot: str | None = None) -> dict:
        """Stage ``adapter_file`` (the updated ``slot``, by default the capability ``cap``'s own) as ``candidate`` of
        the served version; accept it only if every check passed. Returns the lineage record (``status`` accepted or
        rejected)."""
        slot = slot or cap
        if slot not in self.slots:
            raise ValueError(f"{candidate}: slot {slot!r} is not one of this store's {self.slots}")
        parent = self.serving()
        cand_dir = self.root / "candidates" / candidate
        with atomic_path(cand_dir / f"{slot}.safetensors") as tmp:
            shutil.copyfile(adapter_file, tmp)
        files = {c: parent["adapters"][c] for c in self.slots} | {slot: cand_dir / f"{slot}.safetensors"}
        hashes = {c: sha256_file(f) for c, f in files.items()}
        failed = [c["name"] for c in checks if not c["passed"]]
        rec = {**record, "candidate": candidate, "parent": parent["version"], "capability": cap, "adapters": hashes,
               "checks": checks, "failed_checks": failed}
        if failed or not checks:
            rec.update(status="rejected", version=None,
                       reason="contract failed: " + ", ".join(failed) if failed else "no contract checks were run")
            self._append(rec)
            return rec
        version = f"v{len(self.accepted_versions())}"
        self._copy_version(version, files)
        if self._hashes(version) != hashes:
            raise ArtifactError(f"{version}: copied adapters differ from the candidate's")
        rec.update(status="accepted", version=version, reason="every contract check passed")
        self._append(rec)
        self._point(version)
        return rec

    def rollback(self, version: str) -> None:
        """Serve an earlier accepted version again (its files are immutable; the lineage is unchanged)."""
        accepted = self.accepted_versions()
        if version not in accepted:
            raise ValueError(f"rollback to {version!r}: not an accepted version (accepted: {', '.join(accepted)})")
        recorded = next(r["adapters"] for r in self.lineage() if r["status"] == "accepted" and r["version"] == version)
        altered = [c for c in self.slots if sha256_file(self.path(version, c)) != recorded[c]]
        if altered:  # never point serving at files that differ from what the contract accepted
            raise ArtifactError(f"rollback to {version}: {', '.join(altered)} adapter(s) altered since acceptance "
                                f"(sha256 differs from {LINEAGE}); still serving {read_json(self.root / SERVING)['version']}")
        self._point(version)
        self.serving()


# ------------------------------------------------------------------ traffic and data
def traffic_items(rng: np.random.Generator, cap: str, n: int, shift: int, new_share: float, exclude: frozenset[str],
                  weak_share: float) -> list[dict]:
    """Items of ``cap`` from the traffic of ``shift``: a share ``new_share`` uses the shift's new verbs."""
    out = []
    new = W.NEW_VERBS[:shift]
    for _ in range(n):
        verbs = new if new and rng.random() < new_share else W.VERBS
        out.append({**W.make_items(rng, cap, 1, 0.0, exclude, weak_share, verbs)[0], "shift": shift})
    return out


def body(x: dict) -> str:
    return W.request_from_dict(x).body()


def build_loop_data(world: dict, vp, weak_share: float, rng_for) -> dict:
    """Acceptance suites per shift (suite "0" = the world's test suites), dev pools per shift and audit traffic per
    cycle. Suites never repeat a request of the specialists' training or dev data; dev pools avoid every suite and the
    specialists' training and dev data (an update replays training items)."""
    trained = frozenset(body(x) for s in ("train", "dev") for items in world[s].values() for x in items)
    shifts = sorted({c.shift for c in vp.cycles})
    suites = {"0": {cap: [{**x, "shift": 0} for x in world["test"][cap]] for cap in W.CAPABILITIES}}
    for s in shifts:
        if s > 0:
            suites[str(s)] = {cap: traffic_items(rng_for("suite", s, cap), cap, vp.suite_per_capability, s, vp.new_verb_share, trained,
                                                 weak_share) for cap in W.CAPABILITIES}
    held = held_out_bodies(world, suites)
    # dev pools choose an update's checkpoint: disjoint from the suites and from the training pool the update replays
    dev = {str(s): {cap: traffic_items(rng_for("dev", s, cap), cap, vp.dev_per_capability, s, vp.new_verb_share, held | trained, weak_share)
                    for cap in W.CAPABILITIES} for s in shifts}
    audit = [{cap: traffic_items(rng_for("audit", k, cap), cap, vp.audit_per_capability, c.shift, vp.new_verb_share, frozenset(),
                                 weak_share) for cap in W.CAPABILITIES} for k, c in enumerate(vp.cycles, 1)]
    return {"suites": suites, "dev": dev, "audit": audit}


def held_out_bodies(world: dict, suites: dict) -> frozenset[str]:
    """Every request an update must never train on: the acceptance suites of every shift and the test conversations."""
    return frozenset({body(x) for items in (s[c] for s in suites.values() for c in W.CAPABILITIES) for x in items}
                     | {body(x) for x in world["test_conversations"]})


def check_update_disjoint(update_items: Sequence[dict], held: frozenset[str]) -> None:
    leaked = sorted({body(x) for x in update_items} & held)
    if leaked:
        raise ValueError(f"{len(leaked)} update items repeat a held-out request (an acceptance-suite, test-conversation "
                         f"or dev-pool request), e.g. {leaked[0]!r}")


def propose_trajectories(rng: np.random.Generator, problems: Sequence[dict], cap: str, model_outputs: Sequence[str | None],
                         teacher_samples: int, teacher_noise: float, tables, faulty: bool) -> tuple[list[dict], dict]:
    """Candidate trajectories per seed problem — the served adapter's answer under the cycle's harness
    (:mod:`paperworks.mol.harness`: its first verified sample, None when none verified) and ``teacher_samples`` from a
    noisy teacher (with probability ``teacher_noise`` the answer of a request with another owner) — and the verified
    ones kept (deduplicated). ``faulty``: the mislabelling bug — targets in FAULT_SWAP[cap]'s format, nothing verified."""
    kept, seen, proposed, from_model = [], set(), 0, 0
    for x, own in zip(problems, model_outputs):
        req = W.request_from_dict(x)
        if faulty:
            outs = [("teacher", W.target(req, FAULT_SWAP[cap]))]
        else:
            outs = [("model", own)]
            for _ in range(teacher_samples):
                if rng.random() < teacher_noise:
                    other = str(rng.choice([n for n in W.NAMES if n != req.owner]))
                    outs.append(("teacher", W.target(replace(req, owner=other), cap)))
                else:
                    outs.append(("teacher", W.target(req, cap)))
        for source, out in outs:
            proposed += 1  # a problem the harness found no verified answer for still counts as one model proposal
            if out is None or (not faulty and not W.verify(cap, req, out, tables)):
                continue
            if (x["prompt"], out) in seen:
                continue
            seen.add((x["prompt"], out))
            from_model += source == "model"
            kept.append({**x, "target": out, "source": source})
    return kept, {"proposed": proposed, "kept": len(kept), "kept_from_model": from_model,
                  "kept_share": len(kept) / max(proposed, 1)}


def verified_share_of(items: Sequence[dict], cap: str, tables) -> float:
    """The contract re-verifies the update's items, each with its own capability's verifier (``cap`` where an item
    names none): trajectories of ``cap``, and replayed training items of whichever capability they belong to."""
    if not items:
        return 0.0
    return sum(W.verify(x.get("capability", cap), W.request_from_dict(x), x["target"], tables) for x in items) / len(items)


# ------------------------------------------------------------------ the contract
def _check(name: str, passed: bool, value=None, threshold=None, detail: str = "") -> dict:
    return {"name": name, "passed": bool(passed), "value": value, "threshold": threshold, "detail": detail}


def _diff(cand: Sequence[bool], parent: Sequence[bool], margin: float | None, n_boot: int, seed: int):
    a = [np.array([float(v)]) for v in cand]
    b = [np.array([float(v)]) for v in parent]
    return compare_clustered(a, b, paired=True, margin=margin, n_boot=n_boot, seed=seed)


def contract_checks(cp, cap: str, *, data_verified: float, new_suite: tuple[Sequence[bool], Sequence[bool]],
                    retention: dict[str, dict[str, tuple[Sequence[bool], Sequence[bool]] | None]],
                    identical: dict[str, bool], alpha: float, n_boot: int, seed: int,
                    others: Sequence[str] | None = None) -> list[dict]:
    """Every check of the contract for a candidate that updated ``cap``.

    ``new_suite``: (candidate, parent) item successes of ``cap`` on the new traffic's acceptance suite.
    ``retention[suite][c]``: (candidate, parent) item successes of capability ``c`` on an earlier accepted suite,
    or None where ``c``'s adapter is byte-identical to the parent's (the same greedy answers). ``identical[c]``:
    the candidate's adapter of ``c`` has the parent's sha256 (must hold for every capability in ``others``: those
    served by another adapter than the updated one — by default every c ≠ cap; none for a monolithic model)."""
    checks = [_check("update data verified", data_verified >= cp.min_data_verified, round(data_verified, 4), cp.min_data_verified,
                     f"share of the update's trajectories that {cap}'s verifier accepts")]
    others = [c for c in W.CAPABILITIES if c != cap] if others is None else list(others)
    checks.append(_check("other adapters untouched", all(identical[c] for c in others), sum(identical[c] for c in others), len(others),
                         "sha256 of every other adapter equals the parent's"))
    cand, parent = new_suite
    rate = float(np.mean(cand))
    checks.append(_check(f"{cap} on the new suite ≥ {cp.min_success:g}", rate >= cp.min_success, round(rate, 4), cp.min_success,
                         f"candidate {rate:.3f} vs parent {np.mean(parent):.3f} on {len(cand)} items"))
    if cp.require_improvement:
        t = _diff(cand, parent, None, n_boot, seed)
        better = t.diff > 0 and t.p_superiority < alpha
        checks.append(_check(f"{cap} better than the parent on the new suite", better, round(t.diff, 4), f"p < {alpha:g}",
                             f"difference {t.diff:+.3f} [{t.ci_low:+.3f}, {t.ci_high:+.3f}], p = {t.p_superiority:.4f} ({t.method})"))
    for suite, per_cap in sorted(retention.items()):
        for c in W.CAPABILITIES:
            pair = per_cap.get(c)
            name = f"retention: {c} on suite {suite}"
            if pair is None:
                checks.append(_check(name, identical[c], 0.0, -cp.retention_margin, "adapter byte-identical to the parent's"))
                continue
            t = _diff(pair[0], pair[1], cp.retention_margin, n_boot, seed)
            checks.append(_check(name, t.p_noninferiority < alpha, round(t.ci_low, 4), -cp.retention_margin,
                                 f"candidate {np.mean(pair[0]):.3f} vs parent {np.mean(pair[1]):.3f}: difference {t.diff:+.3f} "
                                 f"[{t.ci_low:+.3f}, {t.ci_high:+.3f}], non-inferiority p = {t.p_noninferiority:.4f} "
                                 f"(margin {cp.retention_margin:g}, {t.method})"))
    return checks


def pick_weakest(rates: dict[str, float]) -> str:
    return min(W.CAPABILITIES, key=lambda c: (rates[c], W.CAPABILITIES.index(c)))


# ------------------------------------------------------------------ tables
LINEAGE_COLUMNS = ("candidate", "version", "parent", "status", "shift", "capability", "audit_success", "harness", "harness_trials",
                   "harness_dev_success", "harness_greedy_dev_success", "harness_samples", "kept_share", "update_steps", "new_suite_success", "parent_new_suite_success", "failed_checks", "update_data_sha256",
                   "adapter_sha256")


def lineage_rows(lineage: list[dict]) -> list[dict]:
    rows = []
    for r in lineage:
        cap = r.get("capability")
        harness = r.get("harness", {})
        rows.append({
            "candidate": r.get("candidate", "-"), "version": r.get("version") or "-", "parent": r.get("parent") or "-",
            "status": r["status"], "shift": r.get("shift", 0), "capability": cap or "all",
            "audit_success": r.get("audit", {}).get(cap) if cap else None,
            # the chosen harness (v0 has none; the faulty cycle skips the search), its verified share on the harness
            # dev pool, greedy decoding's there (the first trial) and every sample the search and the run drew
            "harness": f"skipped ({harness['skipped']})" if "skipped" in harness else harness.get("label", "-"),
            "harness_trials": harness.get("n_trials"),
            "harness_dev_success": harness.get("dev_verified_share"),
            "harness_greedy_dev_success": harness.get("greedy_dev_verified_share"),
            "harness_samples": harness.get("samples"),
            "kept_share": r.get("trajectories", {}).get("kept_share"),
            "update_steps": r.get("config", {}).get("update_steps"),
            "new_suite_success": r.get("new_suite", {}).get("candidate"),
            "parent_new_suite_success": r.get("new_suite", {}).get("parent"),
            "failed_checks": "; ".join(r.get("failed_checks", [])) or "-",
            "update_data_sha256": (r.get("data", {}).get("update_sha256") or "-")[:12],
            "adapter_sha256": _adapter_sha(r["adapters"], cap)[:12],
        })
    return rows


def _adapter_sha(adapters: dict[str, str], cap: str | None) -> str:
    """The updated capability's file (mixture of LoRA), the one file (monolith), else a hash of all of them (v0)."""
    if cap in adapters:
        return adapters[cap]
    return next(iter(adapters.values())) if len(adapters) == 1 else sha256_json(adapters)


def lineage_markdown(lineage: list[dict], serving: str) -> str:
    """The lineage as a Markdown table (generated; the browsable record of every version and candidate)."""
    def cell(v):
        return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = [f"Serving: **{serving}**", "", "| " + " | ".join(LINEAGE_COLUMNS) + " |", "|" + " --- |" * len(LINEAGE_COLUMNS)]
    lines += ["| " + " | ".join(cell(r[c]) for c in LINEAGE_COLUMNS) + " |" for r in lineage_rows(lineage)]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m paperworks.mol.versions show|rollback <version> [--root data/mol/versions]``."""
    ap = argparse.ArgumentParser(prog="python -m paperworks.mol.versions")
    ap.add_argument("command", choices=["show", "rollback"])
    ap.add_argument("version", nargs="?")
    ap.add_argument("--root", default="data/mol/versions")
    args = ap.parse_args(argv)
    store = VersionStore(args.root)
    if args.command == "rollback":
        if not args.version:
            ap.error("rollback needs a version (e.g. v0)")
        store.rollback(args.version)
    serving = store.serving()["version"]
    text = lineage_markdown(store.lineage(), serving)
    if args.command == "show":
        print(text)
    else:
        write_text(Path(args.root) / "lineage.md", text)
        print(f"serving {serving}")


if __name__ == "__main__":
    main()
