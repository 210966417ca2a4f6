"""The text-to-video suite: prompts, generators, clip tools, the rule per dimension, params, artifacts, sessions."""
import ast
import dataclasses
import inspect
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from paperworks.core.io import ArtifactError, write_json, write_parquet
from paperworks.core.params import ParamsError, validate_section
from paperworks.core.render.scene import Scene
from paperworks.eval_agent import t2v_report, video_tools
from paperworks.eval_agent.artifacts import OUTCOME_SCHEMA, read_t2v
from paperworks.eval_agent.params import VDIMS, Params, T2VParams, ToolParams, ZooParams
from paperworks.eval_agent.tools import ToolHeads, tool_set, train_tools
from paperworks.eval_agent.video import (HELD_OUT, IN_DOMAIN, VSTRATA, VideoGenerator, build_video_prompts, build_video_zoo, draw_clip,
                                         make_video_prompt, prompt_script)
from paperworks.eval_agent.video_tools import Thresholds, check_clip, read_clips
from paperworks.eval_agent.world import build_zoo

NM = 28.0
TH = Thresholds(quality=12.0, flicker=0.02, jerk=0.04, dynamic=0.1)
PERFECT = dict(subject_drift=0.0, background_drift=0.0, flicker_mean=0.0, flicker_spread=0.0, jitter_mean=0.0, jitter_spread=0.0,
               freeze=0.0, noise_mean=0.0, noise_spread=0.0, shape_error=0.0, omission=0.0, colour_swap=0.0, relation_flip=0.0,
               vertical_factor=1.0, action_flip=0.0, scene_error=0.0, style_error=0.0, style_factor=1.0)


def gen(family="V0", **kw) -> VideoGenerator:
    return VideoGenerator(name="g", family=family, role="in_family", **{**PERFECT, **kw})


def prompts(dim, n=6, seed=0):
    rng = np.random.default_rng(seed)
    return [make_video_prompt(dim, i % len(VSTRATA[dim]), rng) for i in range(n)]


def truth_pass(g, dim, n=6, seed=0) -> float:
    return float(np.mean([check_clip(dim, p.scene, p.motion, draw_clip(g, dim, p, 100 + i, 8, NM)[1], TH)
                          for i, p in enumerate(prompts(dim, n, seed))]))


@pytest.fixture(scope="module")
def heads() -> ToolHeads:
    """Small heads fitted like eval_agent_tools (families A/B population renders), ≈ 5 CPU-s."""
    torch.set_num_threads(1)
    pop = [g for g in build_zoo(ZooParams(n_population=6), 0) if g.role == "population"]
    train, held = tool_set(pop, 500, 1, NM), tool_set(pop, 64, 2, NM)
    model, _ = train_tools(ToolParams(n_train=500, n_heldout=64, steps=800, log_every=400), train, held, NM, 3)
    return model


def test_suite_dimensions_and_counts():
    assert tuple(VSTRATA) == VDIMS and len(VDIMS) == 14
    assert not {"aesthetic_quality", "temporal_style", "human_action"} & set(VDIMS)  # left out / renamed (see the page)
    p = T2VParams()
    recs = build_video_prompts(p, 0)
    assert len(recs) == 14 * 68 and len(recs) * p.samples_per_prompt == 4760  # VBench: 4,730 videos
    for dim in VDIMS:
        strata = np.bincount([r.stratum for r in recs if r.dim == dim], minlength=len(VSTRATA[dim]))
        assert strata.max() - strata.min() <= 1, (dim, strata)  # sub-aspects in equal shares
    assert build_video_prompts(p, 0) == recs and build_video_prompts(p, 1) != recs
    zoo = build_video_zoo(p, 0, NM)
    assert {g.family for g in zoo if g.role == "in_family"} == set(IN_DOMAIN) and len(IN_DOMAIN) == 4
    assert {g.family for g in zoo if g.role == "held_out"} == set(HELD_OUT) and len(HELD_OUT) == 3
    assert {g.family for g in zoo if g.role == "population"} <= set(IN_DOMAIN)
    assert len({g.name for g in zoo}) == len(zoo)


def test_prompt_script_is_the_scene_script():
    p = next(q for q in prompts("object_action", 4) if q.motion == "up")
    spec = prompt_script(p, 3, 8)
    assert [e.kind for e in spec.events] == ["move"] and spec.events[0].start == 1 and spec.events[0].end == 8
    sc = Scene(spec)
    a, b = sc.state(0, 0), sc.state(0, 7)
    assert np.isclose(a[0].x, b[0].x) and np.isclose(a[0].y - b[0].y, p.distance, atol=1e-3)  # up = y decreasing
    assert "moves up" in p.text()


def test_a_perfect_generator_passes_every_dimension_and_clips_are_deterministic():
    g = gen()
    for dim in VDIMS:
        assert truth_pass(g, dim, 4) == 1.0, dim
    p = prompts("motion_smoothness", 1)[0]
    c1, t1 = draw_clip(g, "motion_smoothness", p, 5, 8, NM)
    c2, _ = draw_clip(g, "motion_smoothness", p, 5, 8, NM)
    assert c1.shape == (8, 64, 64, 3) and c1.dtype == np.uint8 and np.array_equal(c1, c2)
    assert not np.array_equal(c1, draw_clip(g, "motion_smoothness", p, 6, 8, NM)[0])


@pytest.mark.parametrize("dim,fault", [
    ("subject_consistency", dict(subject_drift=1.0)), ("background_consistency", dict(background_drift=1.0)),
    ("temporal_flickering", dict(flicker_mean=0.08)), ("motion_smoothness", dict(jitter_mean=0.04)),
    ("dynamic_degree", dict(freeze=1.0)), ("object_action", dict(action_flip=1.0)), ("object_class", dict(shape_error=1.0)),
    ("scene", dict(scene_error=1.0)), ("appearance_style", dict(style_error=1.0)), ("multiple_objects", dict(omission=0.9)),
    ("spatial_relationship", dict(relation_flip=1.0)), ("colour", dict(colour_swap=1.0)), ("imaging_quality", dict(noise_mean=25.0)),
])
def test_each_fault_fails_its_dimension_in_the_truth(dim, fault):
    """The drawn clip's truth (not the profile) carries each fault into its dimension's verdict."""
    assert truth_pass(gen(**fault), dim, 6) <= 0.34 < truth_pass(gen(), dim, 6)


def test_a_reversed_move_is_still_dynamic_and_a_frozen_one_is_not():
    rev, frozen = gen(action_flip=1.0), gen(freeze=1.0)
    assert truth_pass(rev, "dynamic_degree") == 1.0 and truth_pass(rev, "object_action") == 0.0
    assert truth_pass(frozen, "dynamic_degree") == 0.0 and truth_pass(frozen, "object_action") == 0.0
    assert truth_pass(gen(action_flip=1.0), "overall_consistency") <= 0.5  # the moving half fails


def test_flicker_tool_reads_pixels_only_and_ranks_generators():
    """Frame-difference flicker needs no learned head: untrained heads give the same flicker measure."""
    steady, flicker = gen(), gen(flicker_mean=0.06, flicker_spread=0.01)
    ps = prompts("temporal_flickering", 6)
    untrained = ToolHeads(16)
    f_s = [read_clips(untrained, [draw_clip(steady, "temporal_flickering", p, i, 8, NM)[0]], NM)[0].flicker for i, p in enumerate(ps)]
    f_f = [read_clips(untrained, [draw_clip(flicker, "temporal_flickering", p, i, 8, NM)[0]], NM)[0].flicker for i, p in enumerate(ps)]
    assert max(f_s) < TH.flicker < min(f_f)


def test_tools_agree_with_the_truth_and_rank_faults(heads):
    """The fitted image heads read clips frame-wise; verdicts match the renderer's on the in-domain look."""
    agree, score = [], {}
    for name, g in (("steady", gen()), ("jittery", gen(jitter_mean=0.03, jitter_spread=0.005)), ("frozen", gen(freeze=1.0)),
                    ("noisy", gen(noise_mean=20.0, noise_spread=2.0)), ("wrong style", gen(style_error=1.0))):
        for dim in ("motion_smoothness", "dynamic_degree", "object_class", "appearance_style", "imaging_quality", "colour"):
            ps = prompts(dim, 6, seed=7)
            drawn = [draw_clip(g, dim, p, 50 + i, 8, NM) for i, p in enumerate(ps)]
            reads = read_clips(heads, [c for c, _ in drawn], NM)
            tool = [check_clip(dim, p.scene, p.motion, r, TH) for p, r in zip(ps, reads)]
            truth = [check_clip(dim, p.scene, p.motion, t, TH) for p, (_, t) in zip(ps, drawn)]
            agree += [a == b for a, b in zip(tool, truth)]
            score[(name, dim)] = np.mean(tool)
    assert np.mean(agree) >= 0.9
    assert score[("steady", "motion_smoothness")] > score[("jittery", "motion_smoothness")]
    assert score[("steady", "dynamic_degree")] > score[("frozen", "dynamic_degree")]
    assert score[("steady", "imaging_quality")] > score[("noisy", "imaging_quality")]
    assert score[("steady", "appearance_style")] > score[("wrong style", "appearance_style")]


def test_the_tools_never_see_a_generator():
    """video_tools takes pixels (and the prompt), never a profile: no parameter, no import of the generator module."""
    tree = ast.parse(Path(video_tools.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "paperworks.eval_agent.video" not in imported
    fields = {f.name for f in dataclasses.fields(VideoGenerator)} - {"name", "family", "role"}
    for fn in (read_clips, check_clip):
        params = set(inspect.signature(fn).parameters)
        assert not params & fields and "g" not in params and "generator" not in params
    assert not any(f in Path(video_tools.__file__).read_text() for f in ("subject_drift", "jitter_mean", "flicker_mean"))


def _section(**t2v):
    import yaml

    conf = Path(__file__).resolve().parents[2] / "conf"
    s = yaml.safe_load((conf / "default" / "eval_agent.yaml").read_text())
    s["t2v"].update(t2v)
    return s


@pytest.mark.parametrize("t2v,words", [
    (dict(dims=["aesthetic_quality"]), ["eval_agent.t2v.dims", "subject_consistency", "overall_consistency"]),
    (dict(enabled="yes"), ["eval_agent.t2v.enabled"]),
    (dict(n_frames=3), ["eval_agent.t2v.n_frames", "6"]),
    (dict(enabled=True, prompts_per_dim=4, samples_per_prompt=2), ["t2v.prompts_per_dim", "agent.max_rounds"]),
    (dict(dims=["scene", "scene"]), ["t2v.dims"]),
])
def test_bad_t2v_params_name_the_key(t2v, words):
    with pytest.raises(ParamsError) as e:
        validate_section("eval_agent", Params, _section(**t2v))
    assert all(w in str(e.value) for w in words), str(e.value)
    # off, a suite too small for the agent is not an error (nothing reads it)
    validate_section("eval_agent", Params, _section(enabled=False, prompts_per_dim=4, samples_per_prompt=2))


def _outcomes(models=(("V0-0", "V0", "in_family"), ("H0-0", "H0", "held_out"), ("vpop0", "V0", "population"), ("vpop1", "V1", "population")),
              dims=("scene", "dynamic_degree"), n_prompts=6, n_samples=2, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for m, fam, role in models:
        for run in (("a",) if role == "population" else ("a", "b")):
            for dim in dims:
                for i in range(n_prompts):
                    for k in range(n_samples):
                        v = int(rng.random() < 0.6)
                        rows.append((m, fam, role, run, dim, i, i % len(VSTRATA[dim]), k, v, v))
    return pd.DataFrame(rows, columns=OUTCOME_SCHEMA.names).astype({"tool": "int8", "truth": "int8"})


def _write_suite(root: Path, df: pd.DataFrame, enabled=True, dims=("scene", "dynamic_degree"), n_prompts=6, n_samples=2):
    write_json(root / "suite.json", {"enabled": enabled, "dims": list(dims), "prompts_per_dim": n_prompts,
                                     "samples_per_prompt": n_samples, "n_frames": 8, "clips_per_model_run": len(dims) * n_prompts * n_samples})
    write_parquet(root / "outcomes.parquet", df, OUTCOME_SCHEMA)


def test_read_t2v_detects_corrupted_artifacts(tmp_path):
    df = _outcomes()
    _write_suite(tmp_path, df)
    suite, back = read_t2v(tmp_path)
    assert suite["enabled"] and len(back) == len(df)
    _write_suite(tmp_path, df.iloc[:-1])  # a sample missing
    with pytest.raises(ArtifactError, match="rerun eval_agent_t2v_bench"):
        read_t2v(tmp_path)
    _write_suite(tmp_path, df[~((df["model"] == "V0-0") & (df["run"] == "b"))])  # a whole run missing
    with pytest.raises(ArtifactError):
        read_t2v(tmp_path)
    _write_suite(tmp_path, df[df["dim"] == "scene"])  # a dimension of the record missing
    with pytest.raises(ArtifactError):
        read_t2v(tmp_path)
    _write_suite(tmp_path, df.assign(tool=df["tool"].where(df.index != 3, 2).astype("int8")))
    with pytest.raises(ArtifactError, match="not 0/1"):
        read_t2v(tmp_path)
    _write_suite(tmp_path, df, enabled=False)  # off, yet holding samples
    with pytest.raises(ArtifactError, match="off"):
        read_t2v(tmp_path)
    (tmp_path / "suite.json").write_text(json.dumps({"note": "x"}))
    with pytest.raises(ArtifactError, match="enabled"):
        read_t2v(tmp_path)


def test_t2v_sessions_go_through_the_image_suite_machinery():
    """Same agent, controls, level tables and unit tables as the image suite; own ids, all exploratory."""
    import yaml

    conf = Path(__file__).resolve().parents[2] / "conf"
    s = yaml.safe_load((conf / "default" / "eval_agent.yaml").read_text())
    s["agent"].update(batch_size=2, max_rounds=3, repeats=2)
    s["t2v"].update(enabled=True, dims=["scene", "dynamic_degree"], prompts_per_dim=6, samples_per_prompt=2)
    p = validate_section("eval_agent", Params, s)
    df, edges = t2v_report.sessions(_outcomes(), p, seed=0)
    assert set(df["arm"]) == {"agent", "random_subset", "first_n", "full_rerun"} and set(edges) == {"scene", "dynamic_degree"}
    ag = df[df["arm"] == "agent"]
    assert (ag["n"] <= 6).all() and len(ag) == 2 * 2 * 2  # models × dims × repeats
    rs = df[df["arm"] == "random_subset"].set_index(["model", "dim", "repeat"])["n"]
    assert (rs == ag.set_index(["model", "dim", "repeat"])["n"]).all()  # equal samples
    units = t2v_report.units(df)
    assert {"t2v_exact", "t2v_within_one", "t2v_within_one_heldout"} <= set(units)
    specs = t2v_report.claim_specs(p)
    assert all(c.id.startswith("t2v_") and c.role == "exploratory" and c.table in units for c in specs)
    pre = t2v_report.preconditions(_outcomes(), p)
    assert pre[0]["passed"] and "V0" in pre[0]["detail"]
    summ = t2v_report.summary(df, _outcomes(), edges, {"clips_per_model_run": 24, "n_frames": 8}, p)
    assert summ["models"] == {"in_family": ["V0-0"], "held_out": ["H0-0"]} and summ["summary"]["in_family/full_rerun"]["samples"] == 12
