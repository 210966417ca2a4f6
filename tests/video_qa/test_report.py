"""The evaluation: τ and the temperature come from dev only; the routers exit as many questions as the margin."""
import numpy as np
import pandas as pd

from paperworks.core.adaptive import confidence_signals
from paperworks.core.claims import EvidenceParams
from paperworks.core.params import validate_section
from paperworks.core.profile import compose
from paperworks.video_qa import report
from paperworks.video_qa.params import Params
from paperworks.video_qa.pipeline import VARIANTS
from tests.video_qa.test_params import CONF

P = validate_section("video_qa", Params, compose("smoke", CONF)["video_qa"])


def synthetic_results(seed: int, n_dev: int = 60, n_test: int = 80, test_shift: float = 0.0) -> pd.DataFrame:
    """Stage 1 is right when confident; stage 2 is right on every 'local' question and on half the rest."""
    rng = np.random.default_rng(seed)
    rows = []
    for split, n in (("dev", n_dev), ("test", n_test)):
        for i in range(n):
            qtype = ("global", "local", "temporal", "counting")[i % 4]
            answer = int(rng.integers(4))
            sure = rng.random() < 0.5
            for v in VARIANTS:
                logits = rng.normal(size=4)
                if v == "stage1":
                    if sure:
                        logits[answer] += 4.0 + (test_shift if split == "test" else 0.0)
                    else:
                        logits = rng.normal(size=4) * 0.3
                elif qtype == "local" or i % 2:
                    logits[answer] += 5.0
                rows.append({"split": split, "video": f"{split}-{i // 3}", "qid": f"{split}-{i:03d}", "qtype": qtype,
                             "answer": answer, "variant": v, **{f"logit_{k}": float(x) for k, x in enumerate(logits)},
                             "frames": 16 if v == "stage1" else 40, "calls": 1 if v == "stage1" else 5, "win_start": 0,
                             "win_end": 12, "passed": True, "rounds": 1, "hit": qtype == "local"})
    return report.results_frame(rows)


def test_tau_and_temperature_come_from_dev_only():
    a = report.evaluate(synthetic_results(0), P, seed=1)
    b = report.evaluate(synthetic_results(0, test_shift=3.0), P, seed=1)  # only test logits differ
    assert a.tau == b.tau and a.temperature == b.temperature
    assert not np.array_equal(a.test.logits["stage1"], b.test.logits["stage1"])


def test_policies_compose_the_stages_and_routers_match_the_exit_share():
    e = report.evaluate(synthetic_results(2), P, seed=1)
    t = e.test
    margin = confidence_signals(t.logits["stage1"], e.temperature).margin
    exits = margin >= e.tau
    np.testing.assert_array_equal(e.exits["cader"], exits)
    np.testing.assert_array_equal(e.correct["cader"], np.where(exits, t.correct("stage1"), t.correct("stage2")))
    np.testing.assert_array_equal(e.correct["global"], t.correct("stage1"))
    np.testing.assert_array_equal(e.correct["always_stage2"], t.correct("stage2"))
    for router in ("router_max_prob", "router_entropy", "router_random"):
        assert e.exits[router].sum() == exits.sum()
    np.testing.assert_array_equal(e.frames["cader"], np.where(exits, 16, 40))
    assert 0 < exits.mean() < 1


def test_claims_tables_and_preconditions():
    e = report.evaluate(synthetic_results(3), P, seed=1)
    units = report.question_units(e)["accuracy"]
    assert set(units["arm"]) == set(report.POLICIES) and len(units) == len(report.POLICIES) * len(e.test.qid)
    # questions are nested in their video: the cluster of every row is the video the question asks about
    assert (units.groupby("unit")["cluster"].nunique() == 1).all()
    assert units["cluster"].nunique() == len(set(e.test.video)) < units["unit"].nunique()
    flat = list(np.linspace(1.0, 0.5, 30)) + [0.5] * 30
    pre = {p["name"]: p for p in report.preconditions(e, P, {"encoder": flat, "answerer": flat, "scorer": flat}, EvidenceParams())}
    assert pre[report.CONVERGED]["passed"]
    # stage 2's oracle is random in the synthetic table, so the gain precondition is measured, not assumed
    assert isinstance(pre[report.ORACLE]["value"], float)
    still_falling = list(np.linspace(1.0, 0.1, 60))
    pre = {p["name"]: p for p in report.preconditions(e, P, {"encoder": flat, "answerer": still_falling, "scorer": flat}, EvidenceParams())}
    assert not pre[report.CONVERGED]["passed"] and "answerer loss plateaued" in pre[report.CONVERGED]["detail"]
    specs = report.claim_specs(P)
    assert sum(s.role == "headline" for s in specs) == 3 and all(s.cluster == "video" for s in specs)
