"""The evidence standard: a verdict only where the run can support it.

A track declares its claims as :class:`ClaimSpec` (what is compared, of which kind, on which
per-unit table, at which level, resting on which preconditions) and measures its
preconditions as :func:`precondition` / :func:`convergence` records. :func:`evaluate_claims`
turns specs + per-unit tables + preconditions into claim records:

- **Units and nesting.** A per-unit table has columns ``arm, cluster, unit, value``: one row per
  unit (question, episode, draw) of one arm (method or baseline), inside the cluster it was
  trained in (seed, teacher). The interval is taken over clusters (:mod:`paperworks.core.stats`).
  A claim whose arms were trained once and are compared on the same test units has
  ``cluster=None``: each unit is its own cluster, and the record says the interval is
  conditional on that one training run.
- **Kinds.** ``superiority``; ``non_inferiority`` and ``equivalence`` with a margin stated in
  params (TOST). "As well as X" is never tested as "better than X".
- **Preconditions.** A claim whose precondition failed reads ``not tested: <names>`` and carries
  no direction, whatever its interval says.
- **Headline vs exploratory.** At most :data:`MAX_HEADLINE` headline claims per track. p-values
  are Holm-adjusted inside each family (headline, exploratory) of a track (statsmodels).

The records are self-contained (spec, table path, preconditions, evidence params), so
``python -m paperworks.core.report --recompute`` can redo every interval and verdict from the
committed per-unit tables without retraining.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

import numpy as np
import pandas as pd
from pydantic import Field

from paperworks.core.params import StrictModel
from paperworks.core.stats import SMALL_SAMPLE, compare_clustered

MAX_HEADLINE = 3
UNITS_DIR = Path("metrics/units")
UNIT_COLUMNS = ("arm", "cluster", "unit", "value")
Kind = Literal["superiority", "non_inferiority", "equivalence"]
Role = Literal["headline", "exploratory"]


class EvidenceParams(StrictModel):
    """``params.yaml:evidence`` — the frame-wide statistical settings (one place for every track)."""

    alpha: float = Field(0.05, gt=0, lt=0.5, description="family-wise error rate per family (Holm)")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="level of the reported (unadjusted) intervals")
    bootstrap_resamples: int = Field(2000, ge=200, le=100_000)
    convergence_tail: float = Field(0.2, gt=0, le=0.5, description="the last share of a curve compared with the share before it")
    convergence_rel_tol: float = Field(0.05, gt=0, lt=1, description="largest relative improvement of the last window that still counts as a plateau")
    convergence_min_points: int = Field(10, ge=4, description="fewer logged points than this cannot show a plateau")
    convergence_abs_tol_nats: float = Field(
        0.001, ge=0, lt=0.1,
        description="for curves in nats (cross-entropy losses): a last-window improvement below this counts as a plateau "
                    "whatever its relative size (near a zero loss the relative rule asks for the impossible)")


# ------------------------------------------------------------------ preconditions
def precondition(name: str, passed: bool, value: Any = None, threshold: Any = None, detail: str = "") -> dict:
    """One measured precondition: what it is, what was measured, what it had to reach."""
    return {"name": name, "passed": bool(passed), "value": _plain(value), "threshold": _plain(threshold), "detail": detail}


def convergence(name: str, curve: Sequence[float], ev: EvidenceParams, lower_is_better: bool = True,
                abs_tol: float = 0.0) -> dict:
    """The generic convergence check: the curve's last window vs the window before it.

    Passes when the last ``convergence_tail`` share of the logged points improved on the share
    before it by at most ``convergence_rel_tol`` (relative to the earlier window's magnitude):
    a model still improving that fast was stopped before it converged. A plateau says nothing
    about whether the model learned anything; tracks pair it with a precondition of their own
    (e.g. "left the constant-score loss").

    ``abs_tol`` (in the curve's units; tracks pass ``ev.convergence_abs_tol_nats`` for a
    cross-entropy curve) also passes an improvement smaller than it: a dev loss of 0.0013 nats
    that falls 10 % per window is moving by 0.00013 nats, and at a mean loss L the mean probability
    of the right token is at least exp(−L), so such a model has nothing left to gain that a
    comparison could see.
    """
    y = np.asarray([v for v in curve if v is not None and np.isfinite(v)], dtype=float)
    if len(y) < ev.convergence_min_points:
        return precondition(name, False, value=len(y), threshold=ev.convergence_min_points,
                            detail=f"only {len(y)} logged points (need ≥ {ev.convergence_min_points} to see a plateau)")
    w = max(1, int(round(len(y) * ev.convergence_tail)))
    before, last = y[-2 * w:-w].mean(), y[-w:].mean()
    improvement = (before - last) if lower_is_better else (last - before)
    rel = float(improvement / max(abs(before), 1e-12))
    detail = f"last {w} of {len(y)} points: {before:.4g} → {last:.4g} (relative improvement {rel:+.3f}"
    passed = rel <= ev.convergence_rel_tol
    if abs_tol > 0:
        small = improvement < abs_tol
        detail += f"; absolute {improvement:+.2g} {'<' if small else '≥'} the floor {abs_tol:g}"
        passed = passed or small
    return precondition(name, passed, value=round(rel, 6), threshold=ev.convergence_rel_tol, detail=detail + ")")


def learned(name: str, curve: Sequence[float], min_rel_improvement: float, ev: EvidenceParams,
            lower_is_better: bool = True) -> dict:
    """The curve's last window improved on its first by at least ``min_rel_improvement``.

    The companion of :func:`convergence`: a loss that never moved is "flat" too.
    """
    y = np.asarray([v for v in curve if v is not None and np.isfinite(v)], dtype=float)
    if len(y) < 2:
        return precondition(name, False, value=len(y), threshold=2, detail=f"only {len(y)} logged points")
    w = max(1, int(round(len(y) * ev.convergence_tail)))
    first, last = y[:w].mean(), y[-w:].mean()
    gain = (first - last) if lower_is_better else (last - first)
    rel = float(gain / max(abs(first), 1e-12))
    return precondition(name, rel >= min_rel_improvement, value=round(rel, 6), threshold=min_rel_improvement,
                        detail=f"first {w} → last {w} of {len(y)} points: {first:.4g} → {last:.4g} (relative improvement {rel:+.3f})")


def combine(name: str, records: Sequence[dict], what: str) -> dict:
    """One precondition over many models: passes when every model's record passed."""
    failed = [r for r in records if not r["passed"]]
    detail = f"{len(records) - len(failed)}/{len(records)} {what} pass"
    if failed:
        detail += "; failing: " + "; ".join(f"{r['name']} ({r['detail']})" for r in failed[:3])
        detail += f" … and {len(failed) - 3} more" if len(failed) > 3 else ""
    return precondition(name, bool(records) and not failed, value=len(records) - len(failed), threshold=len(records), detail=detail)


def live_curve(tsv: Path | str) -> list[float]:
    """The values of one dvclive series (``plots/metrics/<name>.tsv``: step, value), in step order."""
    from paperworks.core.io import ArtifactError

    path = Path(tsv)
    if not path.exists():
        raise ArtifactError(f"{path}: training curve missing")
    df = pd.read_csv(path, sep="\t")
    if df.shape[1] < 2 or "step" not in df.columns:
        raise ArtifactError(f"{path}: not a dvclive series (needs a 'step' column and a value column)")
    value = [c for c in df.columns if c not in ("step", "timestamp")][0]
    return df.sort_values("step")[value].astype(float).tolist()


def all_passed(records: Iterable[dict]) -> bool:
    return all(r["passed"] for r in records)


# ------------------------------------------------------------------ specs and tables
@dataclass(frozen=True)
class ClaimSpec:
    """What one claim compares; everything the verdict needs except the data."""

    id: str                      # stable key (DVC compares claims by it)
    statement: str               # short, generated from params where it names a value
    table: str                   # per-unit table name: metrics/units/<track>/<table>.csv
    metric: str
    method: str                  # arm compared …
    baseline: str                # … against this arm
    unit: str                    # what one value is ("question", "draw", "seed")
    cluster: str | None          # what units sit inside ("seed", "teacher"); None: one training run
    kind: Kind = "superiority"
    margin: float | None = None  # non-inferiority / equivalence margin, in metric units
    higher_is_better: bool = True
    role: Role = "exploratory"
    paired: bool = True          # arms share clusters (and units inside them)
    preconditions: tuple[str, ...] = ()   # names of the track's precondition records this claim rests on

    def __post_init__(self) -> None:
        if self.kind != "superiority" and (self.margin is None or not self.margin > 0):
            raise ValueError(f"claim {self.id}: a {self.kind} claim needs a positive margin (got {self.margin!r})")
        if self.kind == "superiority" and self.margin is not None:
            raise ValueError(f"claim {self.id}: a superiority claim takes no margin")

    @classmethod
    def from_record(cls, record: dict) -> "ClaimSpec":
        names = {f.name for f in fields(cls)}
        raw = {k: record[k] for k in names if k in record}
        auto = f"at least 2 independent {plural(record['units']['cluster'] or '')}"
        raw["preconditions"] = tuple(p["name"] for p in record.get("preconditions", []) if p["name"] != auto)
        raw["cluster"] = record["units"]["cluster"]
        raw["unit"] = record["units"]["unit"]
        raw["paired"] = record["units"]["paired"]
        raw["table"] = record["table_name"]
        return cls(**raw)


def unit_table(rows: Iterable[dict] | pd.DataFrame) -> pd.DataFrame:
    """A per-unit table with the standard columns and types (arm, cluster, unit: str; value: float)."""
    df = pd.DataFrame(rows)
    missing = [c for c in UNIT_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"per-unit table lacks columns {missing}")
    df = df[list(UNIT_COLUMNS)].copy()
    for c in ("arm", "cluster", "unit"):
        df[c] = df[c].astype(str)
    df["value"] = df["value"].astype(float)
    if df.duplicated(["arm", "cluster", "unit"]).any():
        dup = df[df.duplicated(["arm", "cluster", "unit"], keep=False)].head(3).to_dict("records")
        raise ValueError(f"per-unit table has duplicate (arm, cluster, unit) rows, e.g. {dup}")
    return df.sort_values(["arm", "cluster", "unit"], kind="stable").reset_index(drop=True)


def _arm_groups(table: pd.DataFrame, spec: ClaimSpec) -> tuple[list[np.ndarray], list[np.ndarray], int, list[str]]:
    """Signed unit values of both arms grouped by cluster (aligned by cluster and unit when paired)."""
    sign = 1.0 if spec.higher_is_better else -1.0
    parts = {}
    for arm in (spec.method, spec.baseline):
        g = table[table["arm"] == arm]
        if g.empty:
            raise ValueError(f"claim {spec.id}: table '{spec.table}' has no rows for arm '{arm}'")
        if spec.cluster is None:  # one training run: every unit is its own cluster
            g = g.assign(cluster=g["unit"])
        parts[arm] = g
    a, b = parts[spec.method], parts[spec.baseline]
    problems: list[str] = []
    if spec.paired:
        merged = a.merge(b, on=["cluster", "unit"], suffixes=("_m", "_b"), how="outer", indicator=True)
        unmatched = merged[merged["_merge"] != "both"]
        if len(unmatched):
            problems.append(f"{len(unmatched)} units present in one arm only (dropped from the paired comparison)")
        merged = merged[merged["_merge"] == "both"]
        grouped = [(g["value_m"].to_numpy() * sign, g["value_b"].to_numpy() * sign) for _, g in merged.groupby("cluster", sort=True)]
        ma, mb = [x for x, _ in grouped], [y for _, y in grouped]
        n_units = int(len(merged))
    else:
        ma = [g["value"].to_numpy() * sign for _, g in a.groupby("cluster", sort=True)]
        mb = [g["value"].to_numpy() * sign for _, g in b.groupby("cluster", sort=True)]
        n_units = int(len(a) + len(b))
    return ma, mb, n_units, problems


def _clusters_name(spec: ClaimSpec) -> str:
    return f"at least 2 independent {plural(spec.cluster)}"


def _seed_for(claim_id: str, seed: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{claim_id}".encode()).digest()[:4], "little")


def plural(noun: str) -> str:
    return noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"


def _units_label(spec: ClaimSpec, n_clusters: int, n_units: int) -> str:
    if spec.cluster is None:
        return f"1 training run × {n_units // (1 if spec.paired else 2)} {plural(spec.unit)}"
    per_arm = n_units // (1 if spec.paired else 2)
    per = per_arm / max(n_clusters, 1)
    if per == 1:
        return f"{n_clusters} {plural(spec.cluster)}"
    if per != int(per):  # clusters of unequal size (e.g. videos with 2-4 questions): give the total
        return f"{n_clusters} {plural(spec.cluster)}, {per_arm} {plural(spec.unit)}"
    return f"{n_clusters} {plural(spec.cluster)} × {per:g} {plural(spec.unit)}"


def measure_claim(spec: ClaimSpec, table: pd.DataFrame, preconditions: Sequence[dict], ev: EvidenceParams,
                  seed: int, table_path: str) -> dict:
    """The claim record before multiplicity adjustment (``p_holm`` and ``verdict`` are set later)."""
    ma, mb, n_units, problems = _arm_groups(table, spec)
    sign = 1.0 if spec.higher_is_better else -1.0
    test = compare_clustered(ma, mb, paired=spec.paired, margin=spec.margin, confidence=ev.confidence,
                             n_boot=ev.bootstrap_resamples, seed=_seed_for(spec.id, seed))
    n_clusters = min(len(ma), len(mb))
    # report the raw difference (method − baseline, metric units); the tests ran on the signed one
    lo, hi = sorted((sign * test.ci_low, sign * test.ci_high))
    p = {"superiority": test.p_superiority, "non_inferiority": test.p_noninferiority, "equivalence": test.p_equivalence}[spec.kind]
    pre = [dict(r) for r in preconditions]
    missing = set(spec.preconditions) - {r["name"] for r in pre}
    if missing:
        raise ValueError(f"claim {spec.id}: precondition records missing: {sorted(missing)}")
    pre = [r for r in pre if r["name"] in spec.preconditions]
    if spec.cluster is not None:  # an interval over clusters needs two of them (generic, never declared)
        pre.append(precondition(_clusters_name(spec), n_clusters >= 2, value=n_clusters, threshold=2,
                                detail=f"{n_clusters} independent {spec.cluster}(s) per arm"))
    method_means = [g.mean() * sign for g in ma]
    base_means = [g.mean() * sign for g in mb]
    return {
        "id": spec.id, "statement": spec.statement, "role": spec.role, "kind": spec.kind, "margin": spec.margin,
        "metric": spec.metric, "higher_is_better": spec.higher_is_better,
        "direction": "higher is better" if spec.higher_is_better else "lower is better",
        "method": spec.method, "baseline": spec.baseline,
        "method_mean": float(np.mean(method_means)), "baseline_mean": float(np.mean(base_means)),
        "diff": float(sign * test.diff), "ci_low": float(lo), "ci_high": float(hi), "ci_level": ev.confidence,
        "interval_method": test.method,
        "units": {"unit": spec.unit, "cluster": spec.cluster, "n_clusters": int(n_clusters), "n_units": n_units,
                  "paired": spec.paired, "label": _units_label(spec, n_clusters, n_units),
                  "small_sample": n_clusters < SMALL_SAMPLE, "notes": problems},
        "p_value": float(p), "preconditions": pre, "table": table_path, "table_name": spec.table,
    }


def verdict(kind: str, p_adjusted: float, diff: float, ci_low: float, ci_high: float, margin: float | None,
            higher_is_better: bool, alpha: float) -> str:
    """The words a claim may say, given its Holm-adjusted p-value and its interval.

    ``diff``/``ci_*`` are raw (method − baseline); the direction comes from ``higher_is_better``.
    A significant result is ``p_adjusted < alpha`` (strictly).
    """
    sign = 1.0 if higher_is_better else -1.0
    d = sign * diff
    lo, hi = sorted((sign * ci_low, sign * ci_high))   # signed: > 0 means the method is better
    significant = p_adjusted < alpha
    if kind == "superiority":
        if significant:
            return "method better" if d > 0 else "baseline better"
        return "unresolved"
    if kind == "non_inferiority":
        if significant:
            return f"non-inferior (margin {margin:g})"
        if hi < -margin:
            return f"inferior beyond the margin ({margin:g})"
        return "unresolved"
    if kind == "equivalence":
        if significant:
            return f"equivalent (±{margin:g})"
        if lo > margin or hi < -margin:
            return f"not equivalent (outside ±{margin:g})"
        return "unresolved"
    raise ValueError(f"unknown claim kind {kind!r}")


def adjust_and_decide(records: list[dict], ev: EvidenceParams) -> list[dict]:
    """Holm-adjust p-values inside each family (headline, exploratory) of a track; set verdicts.

    Claims whose preconditions failed are not tested: they take no part in the adjustment and
    their verdict names the failed preconditions.
    """
    headline = [r for r in records if r["role"] == "headline"]
    if len(headline) > MAX_HEADLINE:
        raise ValueError(f"{len(headline)} headline claims ({[r['id'] for r in headline]}); at most {MAX_HEADLINE}")
    ids = [r["id"] for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError(f"claim ids are not unique: {ids}")
    out = [dict(r) for r in records]
    for role in ("headline", "exploratory"):
        tested = [r for r in out if r["role"] == role and all_passed(r["preconditions"])]
        if tested:
            from statsmodels.stats.multitest import multipletests  # lazy: every stage imports this module

            adj = multipletests([r["p_value"] for r in tested], alpha=ev.alpha, method="holm")[1]
            for r, p in zip(tested, adj):
                r["p_holm"] = float(p)
                r["holm_family"] = f"{role} ({len(tested)} tested)"
    for r in out:
        failed = [p["name"] for p in r["preconditions"] if not p["passed"]]
        if failed:
            r["p_holm"] = None
            r["holm_family"] = None
            r["verdict"] = "not tested: " + ", ".join(failed)
        else:
            r["verdict"] = verdict(r["kind"], r["p_holm"], r["diff"], r["ci_low"], r["ci_high"], r["margin"],
                                   r["higher_is_better"], ev.alpha)
    # headline claims first, then exploratory, each in declaration order
    return [r for r in out if r["role"] == "headline"] + [r for r in out if r["role"] == "exploratory"]


def not_measured(spec: ClaimSpec, preconditions: Sequence[dict]) -> dict:
    """The record of a claim with no per-unit table (only possible when a precondition failed)."""
    pre = [dict(r) for r in preconditions if r["name"] in spec.preconditions]
    if all_passed(pre):
        raise ValueError(f"claim {spec.id}: no per-unit values, yet every precondition passed — measure it")
    return {
        "id": spec.id, "statement": spec.statement, "role": spec.role, "kind": spec.kind, "margin": spec.margin,
        "metric": spec.metric, "higher_is_better": spec.higher_is_better,
        "direction": "higher is better" if spec.higher_is_better else "lower is better",
        "method": spec.method, "baseline": spec.baseline, "method_mean": None, "baseline_mean": None,
        "diff": None, "ci_low": None, "ci_high": None, "ci_level": None, "interval_method": None,
        "units": {"unit": spec.unit, "cluster": spec.cluster, "n_clusters": 0, "n_units": 0, "paired": spec.paired,
                  "label": "not measured", "small_sample": None, "notes": []},
        "p_value": None, "preconditions": pre, "table": None, "table_name": spec.table,
    }


def evaluate_claims(specs: Sequence[ClaimSpec], tables: dict[str, pd.DataFrame], preconditions: Sequence[dict],
                    ev: EvidenceParams, seed: int, track: str) -> list[dict]:
    """Every claim of one track: measured, Holm-adjusted, decided. ``tables`` by table name."""
    records = []
    for spec in specs:
        if spec.table in tables:
            path = str(UNITS_DIR / track / f"{spec.table}.csv")
            records.append(measure_claim(spec, tables[spec.table], preconditions, ev, seed, path))
        else:
            records.append(not_measured(spec, preconditions))
    return adjust_and_decide(records, ev)


def claim_summary(records: Sequence[dict]) -> dict[str, dict]:
    """Claims keyed by id with scalar fields only, so `dvc metrics diff` / `dvc exp show` can compare them."""
    out = {}
    for r in records:
        out[r["id"]] = {"diff": r["diff"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                        "p_holm": r.get("p_holm"), "verdict": r["verdict"], "role": r["role"], "kind": r["kind"]}
    return out


def evidence_block(ev: EvidenceParams, seed: int) -> dict:
    """Stored beside the claims so a recomputation uses the same settings."""
    return {**ev.model_dump(), "seed": seed, "small_sample_clusters": SMALL_SAMPLE}


# ------------------------------------------------------------------ I/O at the edge
def write_unit_tables(track: str, tables: dict[str, pd.DataFrame], root: Path | str = ".") -> None:
    """Write each per-unit table as CSV under ``metrics/units/<track>/`` (committed, cache: false)."""
    from paperworks.core.io import write_text

    for name, df in tables.items():
        write_text(Path(root) / UNITS_DIR / track / f"{name}.csv", unit_table(df).to_csv(index=False, float_format="%.17g"))


def read_unit_table(path: Path | str) -> pd.DataFrame:
    from paperworks.core.io import ArtifactError

    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path}: per-unit table missing")
    try:
        return unit_table(pd.read_csv(path, dtype={"arm": str, "cluster": str, "unit": str}))
    except (ValueError, pd.errors.ParserError) as e:
        raise ArtifactError(f"{path}: not a per-unit table ({e})") from None


def recompute(metrics: dict, root: Path | str = ".") -> list[dict]:
    """Redo every claim of one metrics file from its committed per-unit tables (returned as the
    metrics file stores them: an unbounded interval side is null)."""
    from paperworks.core.io import as_json

    ev_raw = dict(metrics["evidence"])
    seed = ev_raw.pop("seed")
    ev_raw.pop("small_sample_clusters", None)
    ev = EvidenceParams(**ev_raw)
    records = []
    for r in metrics["claims"]:
        spec = ClaimSpec.from_record(r)
        if r["table"] is None:
            records.append(not_measured(spec, r["preconditions"]))
        else:
            table = read_unit_table(Path(root) / r["table"])
            records.append(measure_claim(spec, table, r["preconditions"], ev, seed, r["table"]))
    return as_json(adjust_and_decide(records, ev))


# ------------------------------------------------------------------ the record's own check
REQUIRED_FIELDS = ("id", "statement", "role", "kind", "metric", "direction", "method", "baseline", "diff", "ci_low",
                   "ci_high", "interval_method", "units", "p_value", "preconditions", "verdict", "table")


def record_problems(record: dict) -> list[str]:
    """What a claim record lacks under the evidence standard (empty list: complete)."""
    problems = [f"missing '{k}'" for k in REQUIRED_FIELDS if k not in record]
    if problems:
        return problems
    if record["kind"] not in ("superiority", "non_inferiority", "equivalence"):
        problems.append(f"unknown kind {record['kind']!r}")
    if record["role"] not in ("headline", "exploratory"):
        problems.append(f"unknown role {record['role']!r}")
    u = record["units"]
    for k in ("unit", "cluster", "n_clusters", "n_units", "paired", "label"):
        if k not in u:
            problems.append(f"units lacks '{k}'")
    if not isinstance(record["preconditions"], list):
        problems.append("preconditions is not a list")
    failed = [p["name"] for p in record["preconditions"] if not p.get("passed")]
    if failed and not record["verdict"].startswith("not tested"):
        problems.append(f"precondition(s) {failed} failed but the verdict is '{record['verdict']}'")
    if not failed and record["verdict"].startswith("not tested"):
        problems.append("verdict says not tested although every precondition passed")
    return problems


def _plain(x: Any) -> Any:
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    return x




def load_evidence(path: Path | str | None = None) -> EvidenceParams:
    """``params.yaml:evidence``, validated."""
    from paperworks.core.params import PARAMS_FILE, load_section

    return load_section("evidence", EvidenceParams, path or PARAMS_FILE)
