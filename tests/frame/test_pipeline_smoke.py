"""The smoke profile through Prefect and DVC: the flow runs the control track end to end
(each task is `dvc repro --single-item`), the whole DAG then reproduces, a second
`dvc repro` is a no-op, a forced rerun gives byte-identical data, and a tampered output
is detected and regenerated."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import adopt_other_workers_stages, dvc, run


def _lock(repo: Path) -> dict:
    return yaml.safe_load((repo / "dvc.lock").read_text())["stages"]


def _out_hashes(repo: Path, stage: str) -> dict[str, str]:
    return {out["path"]: out["md5"] for out in _lock(repo)[stage].get("outs", [])}


def _first_stage(repo: Path, prefix: str) -> str:
    names = sorted(s for s in _lock(repo) if s.startswith(prefix))
    assert names, f"no {prefix}* stage in dvc.lock"
    return names[0]


@pytest.mark.integration
@pytest.mark.orchestration
def test_prefect_flow_runs_control_smoke(smoke_repo: Path) -> None:
    """Runs before every other integration test, so the control stages really execute here."""
    run([sys.executable, "-m", "flows.pipeline", "--targets", "control_*"], cwd=smoke_repo, timeout=1800)
    lock = _lock(smoke_repo)
    assert any(s.startswith("control_evaluate") for s in lock)
    again = dvc(smoke_repo, "repro", "--glob", "control_*")
    assert "Data and pipelines are up to date" in again.stdout + again.stderr


@pytest.mark.integration
@pytest.mark.whole_dag
def test_whole_smoke_dag_then_noop(smoke_repo: Path) -> None:
    """Every stage of the smoke DAG, in one copy, is up to date: those the other worker ran are
    adopted (lock entry + outputs) and DVC re-checks their hashes; the rest run here."""
    adopt_other_workers_stages(smoke_repo)
    first = dvc(smoke_repo, "repro")
    # A repro that ran nothing is already the no-op; one that ran stages must be followed by one
    # that runs none (this test is the serial tail of `make test`: no repro twice for nothing)
    second = dvc(smoke_repo, "repro") if "Running stage" in first.stdout else first
    assert "Data and pipelines are up to date" in second.stdout + second.stderr
    assert "up to date" in dvc(smoke_repo, "status").stdout
    assert dvc(smoke_repo, "metrics", "show", "--json").stdout.strip().startswith("{")


# The forced-rerun and tamper checks need only the control stages (run by the Prefect test above),
# so they run with the track tests, not after the whole-DAG wait for the other worker's group.
@pytest.mark.integration
def test_forced_rerun_gives_identical_data(smoke_repo: Path) -> None:
    stage = _first_stage(smoke_repo, "control_rollouts")
    before = _out_hashes(smoke_repo, stage)
    dvc(smoke_repo, "repro", "--force", "--single-item", stage)
    assert _out_hashes(smoke_repo, stage) == before


@pytest.mark.integration
def test_tampered_output_is_detected_and_regenerated(smoke_repo: Path) -> None:
    stage = _first_stage(smoke_repo, "control_rollouts")
    before = _out_hashes(smoke_repo, stage)
    out = smoke_repo / sorted(before)[0]
    victim = next(p for p in sorted(out.rglob("*")) if p.is_file()) if out.is_dir() else out
    victim.write_bytes(victim.read_bytes()[:-7] + b"corrupt")
    status = dvc(smoke_repo, "status", stage).stdout
    assert "modified" in status, status
    dvc(smoke_repo, "repro", stage)
    assert _out_hashes(smoke_repo, stage) == before
    assert "up to date" in dvc(smoke_repo, "status", stage).stdout


# Not a whole-DAG test: the round trip needs one finished track, and the control stages (run by the
# Prefect test above) are one. Run with the track tests, it overlaps the other workers instead of
# lengthening the serial tail after every track (≈ 40 s there on 2026-12-07).
@pytest.mark.integration
def test_push_then_a_fresh_clone_pulls_instead_of_retraining(smoke_repo: Path, tmp_path: Path) -> None:
    """The shared store round trip on the control track: push the outputs dvc.lock records to a
    directory remote, clone afresh, pull; then those stages are clean, `dvc repro` of the track
    has nothing to do, and the report rebuilds."""
    dvc(smoke_repo, "repro", "--glob", "control_*")
    run(["git", "add", "-A"], cwd=smoke_repo)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "smoke run"], cwd=smoke_repo)
    remote = tmp_path / "store"
    run([sys.executable, "-m", "flows.store", "push", "--remote", str(remote), "--glob", "control_*"], cwd=smoke_repo, timeout=900)
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(smoke_repo), str(clone)], cwd=tmp_path)
    assert not any((clone / "models").rglob("*.safetensors"))  # a fresh clone has no artifacts
    # only the control track ran in this copy: a whole-store pull would fail on every other stage
    run([sys.executable, "-m", "flows.store", "pull", "--remote", str(remote), "--glob", "control_*"], cwd=clone, timeout=900)
    pulled = sorted(s for s in _lock(clone) if s.startswith(("control_", "params_check")))
    assert any(s.startswith("control_evaluate") for s in pulled) and any((clone / "models").rglob("*.safetensors"))
    status = dvc(clone, "status", *pulled).stdout
    assert "up to date" in status, status
    again = dvc(clone, "repro", "--glob", "control_*")
    assert "Running stage" not in again.stdout, again.stdout[-2000:]
    report = run([sys.executable, "-m", "paperworks.core.report", "--recompute", "--readme", "README.md"], cwd=clone)
    assert "every interval and verdict identical" in report.stdout
    assert "remote" not in (clone / ".dvc/config").read_text()  # the store is this machine's, never committed
