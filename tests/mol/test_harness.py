"""The harness search of a loop cycle: a problem keeps its first verified sample and costs the samples drawn until
then; the search beats greedy decoding where greedy fails; the same seed gives the same choice; bad params name
their key; the lineage tables carry the harness; a real cycle (both layouts) runs it on a disjoint pool and the
faulty cycle skips it."""
import contextlib
import random
from collections import Counter

import pytest
import torch
import yaml

from paperworks.core.io import save_safetensors
from paperworks.core.params import ParamsError, validate_section
from paperworks.core.profile import compose
from paperworks.mol import harness as H
from paperworks.mol import versions as V
from paperworks.mol import world as W
from paperworks.mol.params import HarnessParams, Params
from tests.mol.test_params import CONF


def _verified_from(k: int, prompts_that_verify: set[str]):
    """A planted generator: a prompt in ``prompts_that_verify`` gets a *verified* answer ``ok<n>`` from its k-th sample
    on (every later sample a different verified answer), every other sample is ``bad<n>``; it counts its samples."""
    calls: Counter = Counter()

    def generate(prompts, temperature, seed):
        out = []
        for p in prompts:
            calls[p] += 1
            out.append(f"ok{calls[p]}" if p in prompts_that_verify and calls[p] >= k else f"bad{calls[p]}")
        return out
    return generate, calls


def _ok(x, answer):
    return answer.startswith("ok")


def test_first_verified_sample_is_kept_and_counted():
    generate, calls = _verified_from(3, {"a"})
    run = H.run_harness(generate, [{"prompt": "a"}, {"prompt": "b"}], _ok, H.Harness(1.0, 5), seed=0)
    assert run.outputs == ["ok3", None]        # the 3rd sample, not a later verified one; none verified → no trajectory
    assert run.samples == [3, 5] and run.total_samples == 8 and run.verified == 1
    assert calls == {"a": 3, "b": 5}           # no sample is drawn for a problem after its first verified one
    short = H.run_harness(_verified_from(3, {"a"})[0], [{"prompt": "a"}], _ok, H.Harness(1.0, 2), seed=0)
    assert short.outputs == [None] and short.samples == [2]  # the retry budget ends before the 3rd sample
    greedy = H.run_harness(_verified_from(1, {"a"})[0], [{"prompt": "a"}, {"prompt": "b"}], _ok, H.GREEDY, seed=0)
    assert greedy.outputs == ["ok1", None] and greedy.samples == [1, 1]  # greedy: one try


def _planted_pool():
    """Greedy decoding never verifies; a sample at temperature ≥ 0.6 verifies with probability ½ (a fixed coin per
    prompt and seed), below 0.6 never."""
    pool = [{"prompt": f"p{i}"} for i in range(16)]

    def generate(prompts, temperature, seed):
        if temperature is None or temperature < 0.6:
            return ["bad"] * len(prompts)
        return ["ok" if random.Random(f"{p}|{seed}").random() < 0.5 else "bad" for p in prompts]
    return pool, generate


def test_search_beats_greedy_on_a_planted_pool():
    pool, generate = _planted_pool()
    hp = HarnessParams(trials=8, max_retries=4, pool=len(pool), temperature_range=(0.3, 1.5))
    chosen, rec = H.search_harness(generate, pool, _ok, hp, seed=11)
    assert rec["trials"][0]["label"] == "greedy" and rec["greedy_dev_verified_share"] == 0.0  # trial 0 = the old harness
    assert chosen.decoding == "sample" and chosen.temperature >= 0.6
    assert rec["dev_verified_share"] > 0.5 > rec["greedy_dev_verified_share"]   # retries beat one greedy try
    assert rec["n_trials"] == 8 and rec["search_samples"] == sum(t["samples"] for t in rec["trials"])
    best = max(rec["trials"], key=lambda t: t["value"])
    assert rec["dev_verified_share"] == best["value"]


def test_ties_go_to_fewer_samples_then_the_earlier_trial():
    trials = [{"number": 0, "value": 0.5, "samples": 10}, {"number": 1, "value": 0.5, "samples": 6},
              {"number": 2, "value": 0.25, "samples": 1}, {"number": 3, "value": 0.5, "samples": 6}]
    assert H.choose(trials)["number"] == 1


def test_same_seed_same_choice():
    pool, generate = _planted_pool()
    hp = HarnessParams(trials=6, max_retries=3, pool=len(pool))
    a = H.search_harness(generate, pool, _ok, hp, seed=5)
    b = H.search_harness(generate, pool, _ok, hp, seed=5)
    assert a == b
    c = H.search_harness(generate, pool, _ok, hp, seed=6)
    assert [t["temperature"] for t in c[1]["trials"]] != [t["temperature"] for t in a[1]["trials"]]  # the seed matters


def test_model_sampling_is_seeded_and_leaves_the_global_rng(tiny_base):
    from paperworks.mol.models import generate as greedy_answers
    from paperworks.mol.models import lora_model

    base, _, tok = tiny_base
    model = lora_model(base, 2, 2.0, seed=0).eval()
    generate = H.model_generate(model, tok, 12)
    prompts = ["show the open invoices of ana, limit 3", "list the draft files of bob, limit 2"] * 3
    state = torch.get_rng_state()
    first = generate(prompts, 1.0, 3)
    assert torch.equal(state, torch.get_rng_state())          # the caller's torch RNG is untouched
    assert generate(prompts, 1.0, 3) == first                  # same seed → same samples
    assert generate(prompts, 1.0, 4) != first                  # (an untrained model samples near-uniform tokens)
    assert generate(prompts, None, 9) == greedy_answers(model, tok, prompts, 12)  # None = the loop's greedy answers


# ------------------------------------------------------------------ params
def _default():
    return yaml.safe_load((CONF / "default" / "mol.yaml").read_text())


@pytest.mark.parametrize(("key", "value", "named"), [
    ("temperature_range", [1.0, 0.5], "mol.versions.harness.temperature_range"),
    ("temperature_range", [0.0, 1.0], "mol.versions.harness.temperature_range"),
    ("trials", 0, "mol.versions.harness.trials"),
    ("max_retries", 0, "mol.versions.harness.max_retries"),
    ("pool", 1, "mol.versions.harness.pool"),
    ("exemplars", 2, "mol.versions.harness.exemplars"),   # not a harness knob here (no in-context learning)
])
def test_bad_harness_params_name_the_key(key, value, named):
    s = _default()
    s["versions"]["harness"][key] = value
    with pytest.raises(ParamsError) as e:
        validate_section("mol", Params, s)
    assert named in str(e.value)


def test_profiles_size_the_search():
    sizes = {prof: validate_section("mol", Params, compose(prof, CONF)["mol"]).versions.harness for prof in ("smoke", "default", "paper")}
    assert (sizes["smoke"].trials, sizes["smoke"].max_retries, sizes["smoke"].pool) == (2, 2, 4)
    assert (sizes["default"].trials, sizes["default"].max_retries, sizes["default"].pool) == (8, 4, 24)
    assert (sizes["paper"].trials, sizes["paper"].pool) == (16, 48)


# ------------------------------------------------------------------ lineage tables
def test_lineage_tables_carry_the_harness(tmp_path):
    def adapter(name, value):
        path = tmp_path / f"{name}.safetensors"
        save_safetensors(path, {"lora_A": torch.full((2, 3), value)}, metadata={"rank": "2"})
        return path

    store = V.VersionStore(tmp_path / "versions")
    store.init({c: adapter(c, float(i)) for i, c in enumerate(W.CAPABILITIES)}, {"candidate": "-"})
    searched = {"label": "sample t=0.84 ×3", "n_trials": 8, "dev_verified_share": 0.625, "greedy_dev_verified_share": 0.25,
                "samples": 311}
    ok = [{"name": "all good", "passed": True}]
    store.propose("cand1", "agent", adapter("a1", 5.0), ok, {"shift": 1, "harness": searched})
    store.propose("cand2", "agent", adapter("a2", 6.0), [{"name": "update data verified", "passed": False}],
                  {"shift": 2, "harness": {"skipped": "faulty cycle"}})
    rows = V.lineage_rows(store.lineage())
    assert [r["harness"] for r in rows] == ["-", "sample t=0.84 ×3", "skipped (faulty cycle)"]
    assert (rows[1]["harness_trials"], rows[1]["harness_dev_success"], rows[1]["harness_greedy_dev_success"],
            rows[1]["harness_samples"]) == (8, 0.625, 0.25, 311)
    md = V.lineage_markdown(store.lineage(), "v1").splitlines()
    header = [c.strip() for c in md[2].strip("|").split("|")]
    assert {"harness", "harness_trials", "harness_dev_success", "harness_greedy_dev_success", "harness_samples"} <= set(header)
    cand1 = dict(zip(header, (c.strip() for c in md[5].strip("|").split("|"))))
    assert (cand1["harness"], cand1["harness_dev_success"], cand1["harness_samples"]) == ("sample t=0.84 ×3", "0.625", "311")
    assert "skipped (faulty cycle)" in md[6]


# ------------------------------------------------------------------ the real loop
def test_cycles_search_on_a_disjoint_pool_and_skip_the_faulty_one(tiny_repo, tiny_base, tmp_path):
    from paperworks.core.claims import load_evidence
    from paperworks.core.params import global_seed, load_section, read_params_file
    from paperworks.mol.artifacts import read_world, seed_dir
    from paperworks.mol.loop import Loop

    base, cfg, tok = tiny_base
    with contextlib.chdir(tiny_repo):
        p = load_section("mol", Params)
        g, world, ev = global_seed(read_params_file()), read_world(), load_evidence()
        v0 = {c: seed_dir(p.versions.seed) / "adapters" / f"{c}.safetensors" for c in W.CAPABILITIES}
        runs = []
        for name in ("a", "b"):
            loop = Loop(p, g, world, tok, base, cfg, ev)
            store = loop.new_store(tmp_path / name)
            loop.init_store(store, v0)
            runs.append((loop, store, [loop.cycle(store, k, tmp_path / name) for k in (1, 2)]))
    hp = p.versions.harness
    (loop, store, (rec1, rec2)), (_, _, (again1, _)) = runs
    assert rec2["faulty"] and rec2["harness"] == {"skipped": "faulty cycle"}
    h = rec1["harness"]
    assert h["n_trials"] == hp.trials and h["trials"][0]["label"] == "greedy" and h["dev_pool"] == hp.pool
    assert h["problems"] == p.versions.seed_problems
    assert h["problems"] <= h["problems_samples"] <= h["problems"] * h["max_retries"]
    assert h["samples"] == h["search_samples"] + h["problems_samples"]
    assert rec1["trajectories"]["kept_from_model"] <= h["problems_verified"]
    assert again1["harness"] == h and again1["adapters"] == rec1["adapters"]   # same params and seed → same choice, same candidate
    assert store.lineage()[1]["harness"] == h                                  # recorded in the lineage
    # the pool: its own stream, disjoint from every held-out request, the training items and the cycle's seed problems
    cycle = p.versions.cycles[0]
    cap = rec1["capability"]
    problems = V.traffic_items(loop.rng_for("problems", 1, cap), cap, p.versions.seed_problems, cycle.shift,
                               p.versions.new_verb_share, loop.held, p.world.weak_cue_share)
    with contextlib.chdir(tiny_repo):
        _, again, pool = loop.harness(1, cap, cycle, problems, store.path("v0", cap))
    assert V.sha256_json(pool) == h["dev_pool_sha256"] and again == h
    bodies = {V.body(x) for x in pool}
    assert len(pool) == hp.pool and not bodies & (loop.held | loop.trained | {V.body(x) for x in problems})
