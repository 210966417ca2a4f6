"""The shared core: params validation, atomic I/O, checked readers, stats, ranking, profiles, report."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pytest
import torch
import yaml
from pydantic import Field
from sklearn.metrics import ndcg_score

from paperworks.core import ranking
from paperworks.core.io import (
    ArtifactError, atomic_path, load_safetensors, read_json, read_parquet, save_safetensors, write_json, write_parquet,
)
from paperworks.core.params import ParamsError, StrictModel, load_section, track_models, validate_all, validate_section
from paperworks.core.profile import PROFILES, compose, deep_merge
from paperworks.core.report import inject, results_table
from paperworks.core.seeding import derive_seed
from tests.conftest import REPO


# ------------------------------------------------------------------ params

class Tree(StrictModel):
    max_depth: int = Field(ge=1, le=20)
    criterion: Literal["squared_error", "friedman_mse"] = "squared_error"


class Toy(StrictModel):
    tree: Tree
    sigma: float = Field(ge=0)


def test_params_error_names_key_and_allowed_range() -> None:
    with pytest.raises(ParamsError) as e:
        validate_section("toy", Toy, {"tree": {"max_depth": 0}, "sigma": 1.0})
    assert "toy.tree.max_depth" in str(e.value) and "greater than or equal to 1" in str(e.value)
    with pytest.raises(ParamsError) as e:
        validate_section("toy", Toy, {"tree": {"max_depth": 3, "criterion": "gini"}, "sigma": 1.0})
    assert "toy.tree.criterion" in str(e.value) and "'squared_error' or 'friedman_mse'" in str(e.value)
    with pytest.raises(ParamsError, match=r"toy\.tree\.maxdepth: Extra inputs"):
        validate_section("toy", Toy, {"tree": {"max_depth": 3, "maxdepth": 4}, "sigma": 1.0})
    with pytest.raises(ParamsError, match="no 'toy' section"):
        validate_section("toy", Toy, None)


def test_load_section_reads_file(tmp_path: Path) -> None:
    f = tmp_path / "params.yaml"
    f.write_text("seed: 1\ntoy:\n  tree: {max_depth: 4}\n  sigma: 0.5\n")
    assert load_section("toy", Toy, f).tree.max_depth == 4


def test_committed_params_are_the_default_profile_and_valid() -> None:
    have = yaml.safe_load((REPO / "params.yaml").read_text())
    assert have == compose("default", REPO / "conf"), "params.yaml is stale: run `make profile P=default`"
    assert validate_all(REPO / "params.yaml") == []


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_validates(profile: str, tmp_path: Path) -> None:
    params = compose(profile, REPO / "conf")
    assert params["profile"] == profile
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(params))
    assert validate_all(f) == []


def test_every_track_section_has_a_model() -> None:
    models = track_models()
    tracks = {p.stem for p in (REPO / "conf/default").glob("*.yaml")}
    assert tracks <= set(models), f"conf/default sections without paperworks.<track>.params.Params: {tracks - set(models)}"


def test_profile_overlay_rejects_unknown_keys() -> None:
    assert deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"b": 5}}) == {"a": {"b": 5, "c": 2}}
    with pytest.raises(ParamsError, match="a.x"):
        deep_merge({"a": {"b": 1}}, {"a": {"x": 5}})
    with pytest.raises(ParamsError, match="allowed: smoke, default, paper"):
        compose("huge", REPO / "conf")


def test_params_cli_rejects_bad_value_before_work(tmp_path: Path) -> None:
    f = tmp_path / "params.yaml"
    f.write_text("seed: -1\n")
    assert any("seed" in e for e in validate_all(f))


# ------------------------------------------------------------------ atomic I/O

CRASHING_WRITER = """
import sys, time
from paperworks.core.io import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    with open(tmp, "w") as fh:
        fh.write("half-written")
        fh.flush()
        print("writing", flush=True)
        time.sleep(60)
"""


def test_atomic_write_survives_a_killed_writer(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old complete output")
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_WRITER, str(target)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert target.read_text() == "old complete output"  # never torn
    assert list(tmp_path.glob(".out.txt.tmp-*"))  # the temp file is what the crash left
    with atomic_path(target) as tmp:  # the next write cleans it up
        tmp.write_text("new")
    assert target.read_text() == "new" and not list(tmp_path.glob(".out.txt.tmp-*"))


def test_atomic_write_exception_keeps_old_output(tmp_path: Path) -> None:
    target = tmp_path / "d"
    target.mkdir()
    (target / "f").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "f").write_text("new")
            raise RuntimeError("boom")
    assert (target / "f").read_text() == "old"
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "f").write_text("new")
    assert (target / "f").read_text() == "new" and len(list(tmp_path.iterdir())) == 1


def test_json_roundtrip_and_corruption(tmp_path: Path) -> None:
    write_json(tmp_path / "m.json", {"a": np.float32(0.5), "b": float("nan"), "c": np.arange(2)})
    assert read_json(tmp_path / "m.json") == {"a": 0.5, "b": None, "c": [0, 1]}
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="corrupt JSON"):
        read_json(tmp_path / "bad.json")


SCHEMA = pa.schema([("theta", pa.float64()), ("action", pa.float32())])


def test_parquet_schema_is_enforced(tmp_path: Path) -> None:
    import pandas as pd

    df = pd.DataFrame({"theta": [0.1, 0.2], "action": np.array([1.0, -1.0], dtype=np.float32)})
    write_parquet(tmp_path / "t.parquet", df, SCHEMA)
    assert read_parquet(tmp_path / "t.parquet", SCHEMA).equals(df)
    with pytest.raises(ArtifactError, match=r"missing \['action'\]"):
        write_parquet(tmp_path / "u.parquet", df[["theta"]], SCHEMA)
    write_parquet(tmp_path / "v.parquet", df[["theta"]], pa.schema([("theta", pa.float64())]))
    with pytest.raises(ArtifactError, match=r"missing column\(s\) \['action'\]"):
        read_parquet(tmp_path / "v.parquet", SCHEMA)
    (tmp_path / "w.parquet").write_bytes(b"PAR1garbage")
    with pytest.raises(ArtifactError, match="corrupt Parquet"):
        read_parquet(tmp_path / "w.parquet", SCHEMA)


def test_safetensors_shapes_are_checked(tmp_path: Path) -> None:
    save_safetensors(tmp_path / "w.safetensors", {"w": torch.zeros(4, 3), "b": torch.zeros(3)})
    assert load_safetensors(tmp_path / "w.safetensors", {"w": (4, 3), "b": (3,)})["w"].shape == (4, 3)
    with pytest.raises(ArtifactError, match=r"'w' has shape \(4, 3\), expected \(256, 4\)"):
        load_safetensors(tmp_path / "w.safetensors", {"w": (256, 4), "b": (3,)})
    (tmp_path / "x.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(ArtifactError, match="corrupt safetensors"):
        load_safetensors(tmp_path / "x.safetensors")


def test_seed_everything_turns_deterministic_kernels_on_without_loading_inductor() -> None:
    """The stage seed switches torch to deterministic kernels (so a stage that uses a
    nondeterministic op warns) and does not pay for importing torch._inductor."""
    code = ("import sys, torch; from paperworks.core.seeding import seed_everything; "
            "assert not torch.are_deterministic_algorithms_enabled(); seed_everything(3); "
            "print(torch.are_deterministic_algorithms_enabled(), "
            "torch.is_deterministic_algorithms_warn_only_enabled(), 'torch._inductor.config' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "False"]


def test_derive_seed_is_stable() -> None:
    assert derive_seed(1, "control", 3) == derive_seed(1, "control", 3)
    assert derive_seed(1, "control", 3) != derive_seed(1, "control", 4)
    # stable across processes (sha256, not Python's salted hash):
    out = subprocess.run([sys.executable, "-c", "from paperworks.core.seeding import derive_seed; print(derive_seed(7, 'x'))"],
                         capture_output=True, text=True, cwd=REPO).stdout.strip()
    assert int(out) == derive_seed(7, "x")


# ------------------------------------------------------------------ ranking (checked against scikit-learn)

def test_ndcg_matches_sklearn() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        n = int(rng.integers(2, 12))
        rels = rng.integers(0, 4, n).astype(float)
        scores = rng.normal(size=n)
        for k in (1, 3, 5, 10):
            ours = ranking.ndcg_at_k(ranking.rank_by_score(scores, rels), k)
            if rels.max() == 0:
                assert ours == 0.0
                continue
            assert ours == pytest.approx(ndcg_score([rels], [scores], k=k), abs=1e-12)


def test_rank_metrics_by_hand() -> None:
    ranked = [0, 1, 0, 1]  # hits at ranks 2 and 4
    assert ranking.reciprocal_rank(ranked) == 0.5
    assert ranking.average_precision_at_k(ranked, 10) == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert ranking.recall_at_k(ranked, 2) == 0.5
    assert ranking.recall_at_k(ranked, 2, n_relevant=4) == 0.25
    assert ranking.spearman([3, 2, 1], [2, 1, 0]) == pytest.approx(1.0)


# ------------------------------------------------------------------ report

def test_results_table_is_generated_from_claims(tmp_path: Path) -> None:
    """The README table: per track its headline claims first (direction, kind, clusters × units,
    verdict), then one row counting the exploratory claims and linking the track page; the
    track page's table keeps every column."""
    from paperworks.core.claims import ClaimSpec, EvidenceParams, evaluate_claims, unit_table
    from paperworks.core.report import track_claims_block

    table = unit_table([{"arm": a, "cluster": s, "unit": 0, "value": v}
                        for s, (x, y) in enumerate([(0.9, 0.5), (0.8, 0.6), (0.85, 0.55)]) for a, v in (("A", x), ("B", y))])
    specs = [ClaimSpec(id="b_vs_a", statement="B loses less than A", table="t", metric="loss", method="B", baseline="A",
                       unit="seed", cluster="seed", higher_is_better=False),
             ClaimSpec(id="a_vs_b", statement="A beats B", table="t", metric="ndcg@3", method="A", baseline="B",
                       unit="seed", cluster="seed", role="headline")]
    c = evaluate_claims(specs, {"t": table}, [], EvidenceParams(), seed=0, track="t")
    (tmp_path / "t.json").write_text(json.dumps({"profile": "smoke", "claims": c}))
    out = results_table(tmp_path)
    rows = out.splitlines()
    assert rows[0] == "| track | profile | claim | better | kind | difference [95% CI] | clusters × units | verdict |"
    assert rows[2].startswith("| t | smoke | A beats B | higher ↑ | superiority | +0.300 [") and rows[2].endswith(
        "| 3 seeds | **method better** |")
    assert rows[3] == ("| t | smoke | + 1 exploratory claim: [docs/tracks/t.md](docs/tracks/t.md) |  |  |  |  | "
                       "1 method better |") and len(rows) == 4
    page = track_claims_block({"profile": "smoke", "claims": c}, "t")
    assert "B loses less than A | loss (lower is better)" in page and "A 0.850 vs B 0.550" in page
    readme = "# x\n<!-- results:start -->\nold\n<!-- results:end -->\ntail\n"
    assert inject(readme, out) == f"# x\n<!-- results:start -->\n{out}<!-- results:end -->\ntail\n"


def test_readme_results_table_is_current() -> None:
    proc = subprocess.run([sys.executable, "-m", "paperworks.core.report", "--readme", "README.md", "--check"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr


def test_committed_claims_meet_the_evidence_standard_and_recompute() -> None:
    """Every claim in metrics/ says its kind, units, interval and preconditions, and `make report`
    recomputes the same intervals and verdicts from the committed per-unit tables."""
    from tests.conftest import assert_claims_meet_standard

    checked = 0
    for path in sorted((REPO / "metrics").glob("*.json")):
        metrics = json.loads(path.read_text())
        if "claims" not in metrics:  # scalar-only metrics for `dvc exp show` (e.g. mol_versions.json), as make report skips them
            continue
        if not metrics["claims"]:  # a stage whose methods the profile does not run (mol_learned_routing at default) says so
            assert metrics.get("not_run") and all(metrics["not_run"].values()), f"{path}: no claims and no reason"
            continue
        assert_claims_meet_standard(metrics, path.stem, REPO)
        checked += 1
    assert checked >= 10, checked  # every track's metrics file carries claims



def test_report_numbers_keep_four_significant_digits_when_huge() -> None:
    """A claim on counted FLOPs (≈ 1e12) reads 9.268e+11 in the tables, not thirteen digits."""
    from paperworks.core.report import _fmt

    assert _fmt(926849433600.0) == "9.268e+11" and _fmt(-1010329190400.0, signed=True) == "-1.01e+12"
    assert _fmt(0.1234, signed=True) == "+0.123" and _fmt(123.45) == "123.5" and _fmt(None) == "–"
