"""The metric-agreement study (simulated, and says so): three simulated report systems per case, a
simulated panel of raters ranking them, and every metric's ranking compared with the panel's.

Systems differ in error profile *and* in paraphrase rate (disclosed): ``terse`` misses small
findings and copies the canonical wording; ``verbose`` hallucinates a finding now and then and
paraphrases half the time; ``shifty`` puts a finding in the wrong region and paraphrases most of the
time. A rater's utility of a report = −Σ severity × w over its missed and hallucinated findings
(matched on region + type against the case's truth), w = the rater's own RoI weight (drawn from
``roi_weight_range``) inside the RoI and 1 elsewhere, plus Gaussian noise. The metrics never see the
truth, the severities or the raters' weights: only the report, the reference report and the RoI.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import kendalltau

from paperworks.encoder_fusion.params import PanelParams
from paperworks.encoder_fusion.reports import realise
from paperworks.encoder_fusion.world import REGIONS, TYPES, Case, Finding, severity

SYSTEMS: dict[str, dict[str, float]] = {
    "terse": {"miss_small": 0.5, "miss": 0.05, "hallucinate": 0.05, "shift": 0.0, "paraphrase": 0.05},
    "verbose": {"miss_small": 0.1, "miss": 0.1, "hallucinate": 0.4, "shift": 0.0, "paraphrase": 0.5},
    "shifty": {"miss_small": 0.1, "miss": 0.05, "hallucinate": 0.05, "shift": 0.3, "paraphrase": 0.9},
}


def system_findings(case: Case, profile: dict[str, float], rng: np.random.Generator) -> list[Finding]:
    """The truth perturbed by one system's error profile."""
    out = []
    for f in case.findings:
        if rng.random() < (profile["miss_small"] if f.size == "small" else profile["miss"]):
            continue
        if rng.random() < profile["shift"]:
            free = [r for r in REGIONS[case.modality] if r != f.region and r not in {g.region for g in case.findings}]
            if free:
                f = Finding(free[int(rng.integers(0, len(free)))], f.type, f.size, f.severity)
        out.append(f)
    if rng.random() < profile["hallucinate"]:
        free = [r for r in REGIONS[case.modality] if r not in {g.region for g in out}]
        if free:
            t, size = int(rng.integers(0, 2)), ("small", "large")[int(rng.integers(0, 2))]
            out.append(Finding(free[int(rng.integers(0, len(free)))], TYPES[case.modality][t], size, severity(t, size)))
    return sorted(out, key=lambda f: REGIONS[case.modality].index(f.region))


def errors(report: list[Finding], truth: tuple[Finding, ...]) -> tuple[list[Finding], list[Finding]]:
    """(missed, hallucinated) of a report's findings against the truth, matched on region + type."""
    rep, ref = {f.key() for f in report}, {f.key() for f in truth}
    return [f for f in truth if f.key() not in rep], [f for f in report if f.key() not in ref]


def rater_utility(report: list[Finding], case: Case, roi_weight: float) -> float:
    missed, halluc = errors(report, case.findings)
    return -sum(f.severity * (roi_weight if f.region == case.roi else 1.0) for f in missed + halluc)


def simulate(cases: list[Case], p: PanelParams, seed: int) -> tuple[list[dict], np.ndarray]:
    """Per case: the reference report, each system's report and findings, and the raters' utilities.

    Returns (one record per case, rater RoI weights)."""
    rng = np.random.default_rng(seed)
    weights = rng.uniform(*p.roi_weight_range, size=p.raters)
    out = []
    for case in cases:
        rec = {"case_id": case.case_id, "modality": case.modality, "roi": case.roi,
               "reference": realise(case.findings, case.modality, rng, p.paraphrase_rate), "systems": {}}
        for name, profile in SYSTEMS.items():
            fs = system_findings(case, profile, rng)
            text = realise(fs, case.modality, rng, profile["paraphrase"])
            utilities = [rater_utility(fs, case, w) + rng.normal(0, p.rater_noise) for w in weights]
            rec["systems"][name] = {"report": text, "utilities": utilities}
        out.append(rec)
    return out, weights


def agreement(metric_scores: list[float], utilities: list[list[float]]) -> float:
    """Mean over raters of Kendall's τ-b between a metric's scores of the systems and the rater's utilities
    (a metric that ties every system carries no ranking: τ = 0)."""
    taus = []
    for r in range(len(utilities[0])):
        tau = kendalltau(metric_scores, [u[r] for u in utilities]).statistic
        taus.append(0.0 if not np.isfinite(tau) else float(tau))
    return float(np.mean(taus))
