"""Shared fixtures: a temporary copy of the repository switched to the smoke profile."""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    # Two workers share two cores: one thread each, in this process (set before torch is
    # imported) and in every stage it starts.
    for var in ("PAPERWORKS_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


@pytest.fixture(scope="session")
def prefect_api() -> str:
    """A temporary Prefect API (SQLite in a temp dir) for this session; its URL is exported as
    ``PREFECT_API_URL`` so flows run in subprocesses (``python -m flows.pipeline``, workers) use
    it too instead of each starting their own."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    before = os.environ.get("PREFECT_API_URL")
    with prefect_test_harness(server_startup_timeout=180):
        url = PREFECT_API_URL.value()
        os.environ["PREFECT_API_URL"] = url
        try:
            yield url
        finally:
            if before is None:
                os.environ.pop("PREFECT_API_URL", None)
            else:
                os.environ["PREFECT_API_URL"] = before


def repo_files(root: Path = REPO) -> list[str]:
    """Tracked files plus untracked ones git does not ignore (what a clone + local edits hold)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root, check=True, capture_output=True,
    ).stdout.decode()
    return [f for f in out.split("\0") if f and (root / f).is_file()]


def copy_repo(dest: Path, root: Path = REPO) -> Path:
    for rel in repo_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "copy"]):
        subprocess.run(cmd, cwd=dest, check=True, env=env)
    return dest


def tool_env() -> dict[str, str]:
    """Environment for subprocesses: the venv first on PATH, offline, no telemetry."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DVC_NO_ANALYTICS="1", DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false", TOKENIZERS_PARALLELISM="false",
    )
    return env


def run(cmd: list[str], cwd: Path, timeout: float = 1800, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=tool_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture(scope="session")
def smoke_repo(tmp_path_factory) -> Path:
    """One temporary copy of the repo on the smoke profile, shared by every integration test.

    Tests reproduce their own track's stages in it (`dvc repro --glob '<track>_*'`);
    DVC skips what an earlier test already produced.
    """
    dest = copy_repo(tmp_path_factory.mktemp("smoke_repo"))
    run([sys.executable, "-m", "paperworks.core.profile", "smoke"], cwd=dest)
    # The committed dvc.lock records the default run: under smoke params every entry is stale and
    # its outputs are absent from the copy, so it decides nothing here. It only costs time: DVC
    # parses and rewrites the whole lock file after every stage (~0.5 MB, seconds per stage).
    (dest / "dvc.lock").unlink()
    if XDIST_WORKER:
        # Under `pytest -n 2` or more each group's worker fills its own copy with its own tracks (see
        # SMOKE_GROUPS); one DVC cache for both lets the whole-DAG tests restore the other
        # worker's stages from DVC's run cache instead of training them a second time.
        shared = tmp_path_factory.getbasetemp().parent / "shared-dvc-cache"
        shared.mkdir(exist_ok=True)
        dvc(dest, "cache", "dir", "--local", str(shared))
        # params_check is the one stage both groups run: one worker at a time, so that the two never
        # reproduce it at once (DVC's run cache races then, see wait_for_other_smoke_groups)
        with open(shared.parent / "params_check.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            dvc(dest, "repro", "params_check")
    return dest


def adopt_other_workers_stages(repo: Path) -> list[str]:
    """Bring the stages the other pytest-xdist worker reproduced into this smoke copy.

    Under ``make test`` each worker runs its own tracks in its own copy (same files, same smoke
    params, one shared DVC cache). The whole-DAG tests need every stage in one copy; restoring the
    other worker's stages through DVC's run cache rewrites ``dvc.lock`` once per stage (a round-trip
    YAML parse of a growing file: ≈ 2 s a stage, 80–90 s for the whole group). Instead this copies
    each finished stage's lock entry and its outputs (exactly the paths that entry lists) from the
    other copy; the following ``dvc repro`` then checks every dep, param and output hash of the
    adopted stages and runs whatever no worker ran. A copy with other files or params is ignored.
    It first waits for the other worker's smoke group to finish (`wait_for_other_smoke_groups`).
    Returns the adopted stage names.
    """
    if not XDIST_WORKER:
        return []
    wait_for_other_smoke_groups()
    mine = repo.resolve()
    lock_path = repo / "dvc.lock"
    lock = yaml.safe_load(lock_path.read_text()) if lock_path.exists() else {"schema": "2.0", "stages": {}}
    adopted: list[str] = []
    others = {p.resolve() for p in mine.parent.parent.glob("popen-gw*/smoke_repo*") if p.is_dir()} - {mine}
    for other in sorted(others):
        if not (other / "dvc.lock").is_file() or any(
            (other / f).read_bytes() != (repo / f).read_bytes() for f in ("dvc.yaml", "params.yaml")
        ):
            continue
        try:
            stages = yaml.safe_load((other / "dvc.lock").read_text())["stages"]
        except (yaml.YAMLError, KeyError, TypeError):
            continue  # caught mid-write by the other worker: `dvc repro` restores its stages instead
        for name, entry in stages.items():
            if name in lock["stages"]:
                continue
            outs = [out["path"] for out in entry.get("outs", [])]
            if not all((other / out).exists() for out in outs):
                continue  # the other worker is still writing it: leave it to `dvc repro`
            for out in outs:
                src, dst = other / out, repo / out
                if dst.is_dir():
                    shutil.rmtree(dst)
                dst.parent.mkdir(parents=True, exist_ok=True)
                (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
            lock["stages"][name] = entry
            adopted.append(name)
    if adopted:
        lock_path.write_text(yaml.safe_dump(lock, sort_keys=False))
    return adopted


# Why the whole-DAG tests wait for the other worker's group: DVC's run cache is not safe for two
# processes reproducing the same stage at once. `StageCache._load` lists a run-cache directory and
# stats every entry, while `save` writes a temporary file there and renames it; a listing that
# catches the other process's temporary file fails the whole `dvc repro` with FileNotFoundError
# (CI failed so on 2026-12-02, in video_qa_infer). Waiting for the other group to finish leaves
# the whole-DAG repro only stages that no worker is running, and adopts all of the other group's.
_CONFIG: pytest.Config | None = None
_GROUP_LEFT: dict[str, int] = {}  # smoke group -> its tests not yet torn down on this worker


def pytest_configure(config) -> None:
    global _CONFIG
    _CONFIG = config
    # One Prefect API for the whole test session (`prefect_api`, for every folder's tests). Prefect reads its
    # settings when it is imported, so the environment is set here, before collection imports any test module
    # (and with it ``flows`` or ``prefect``), and not at this module's import (benchmarks import it for
    # `copy_repo`): a throwaway ``PREFECT_HOME`` (tests never touch the project's ``.prefect/`` or the user's
    # ``~/.prefect``), a startup timeout fit for a loaded machine, analytics off.
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="paperworks-prefect-home-")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def pytest_collection_finish(session) -> None:
    _GROUP_LEFT.clear()
    for item in session.items:  # the selected tests: `-k` and marks have already deselected
        group = smoke_group(item.nodeid)
        if group:
            _GROUP_LEFT[group] = _GROUP_LEFT.get(group, 0) + 1


def _group_markers() -> Path:
    """A folder shared by the xdist workers of this session (beside their base temp folders)."""
    folder = _CONFIG._tmp_path_factory.getbasetemp().parent / "smoke-groups"
    folder.mkdir(exist_ok=True)
    return folder


def pytest_runtest_setup(item) -> None:
    group = smoke_group(item.nodeid)
    if XDIST_WORKER and group:
        (_group_markers() / f"{group}.started.{XDIST_WORKER}").touch()


def pytest_runtest_teardown(item, nextitem) -> None:
    group = smoke_group(item.nodeid)
    if XDIST_WORKER and group:
        _GROUP_LEFT[group] -= 1
        if _GROUP_LEFT[group] == 0:  # every test of the group ran here (xdist sends a group whole)
            (_group_markers() / f"{group}.done.{XDIST_WORKER}").touch()


def wait_for_other_smoke_groups(timeout_s: float = 2400.0, poll_s: float = 5.0) -> float:
    """Block until every smoke group that another worker started has finished; returns the seconds
    waited. A group no other worker started is not waited for (it runs later here, or not at all);
    after `timeout_s` (a crashed worker) the caller goes on and DVC may race as before."""
    if not XDIST_WORKER or _CONFIG is None:
        return 0.0
    markers, start = _group_markers(), time.monotonic()
    while time.monotonic() - start < timeout_s:
        running = [
            m.name for m in markers.glob("*.started.*")
            if not m.name.endswith(f".{XDIST_WORKER}")
            and not (markers / m.name.replace(".started.", ".done.")).exists()
        ]
        if not running:
            break
        time.sleep(poll_s)
    waited = time.monotonic() - start
    if waited > poll_s:
        print(f"waited {waited:.0f} s for the other worker's smoke group", file=sys.stderr)
    return waited


def dvc(repo: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return run([str(VENV_BIN / "dvc"), *args], cwd=repo, timeout=timeout)


def pytest_collection_modifyitems(config, items) -> None:
    """Unit tests, then the Prefect run of the control smoke, then per-track integration
    tests, then the whole-DAG checks.

    The whole-DAG tests reuse the `smoke_repo` that the track tests filled, so they
    only run what is left and then check that a second `dvc repro` is a no-op.
    """
    def rank(item) -> int:
        if item.get_closest_marker("whole_dag"):
            return 3
        if item.get_closest_marker("orchestration"):
            return 1
        return 2 if item.get_closest_marker("integration") else 0

    items.sort(key=rank)  # stable: file order kept inside each group


# `make test` runs three pytest-xdist workers. The tests of a file that uses the smoke copy run in
# order on one worker, in that worker's copy, as one of two groups: A holds the Prefect run, the
# whole-DAG checks and the tracks before them; B the others, of about A's length. The third worker
# takes the unit tests (with two workers they fill the gaps of both). xdist's own `--dist loadgroup`
# cannot do this under pytest 9 (it renames node ids through an attribute pytest 9 no longer reads), so the grouping is a
# scheduler: xdist's scope scheduler with a scope per group, every other test its own scope.
# The two groups are the largest scopes, so xdist hands them out first, one to each worker.
# Measured 2026-12-02 (three workers): B ended 3.5 min after A reached the whole-DAG wait, so
# video_qa (≈ 90 s) moved to A. 2026-12-07: eval_agent's T2V overlay (≈ 120 s, a unit-worker test until then)
# now copies A's smoke copy instead of rerunning the track's stages, so eval_agent moved to A and video_qa
# back to B. A waiting at the whole-DAG test costs nothing while B and the unit worker keep both cores busy;
# A finishing after B would leave its tests alone on the machine at the end.
SMOKE_GROUP_B = {"person_search", "protocol_distill", "mol", "encoder_fusion", "video_qa"}


def smoke_group(nodeid: str) -> str | None:
    """The worker group of a test, from its file (the controller sees node ids, not fixtures)."""
    path = REPO / nodeid.split("::")[0]
    text = _source(path)
    if "smoke_repo" in text:
        return "smoke-b" if path.relative_to(REPO / "tests").parts[0] in SMOKE_GROUP_B else "smoke-a"
    # Nothing else is grouped: a third group (e.g. the Prefect API tests) could take a worker
    # before group B starts, and the whole-DAG tests would then rerun B's stages themselves.
    return None


_SOURCES: dict[Path, str] = {}


def _source(path: Path) -> str:
    if path not in _SOURCES:
        _SOURCES[path] = path.read_text(encoding="utf-8") if path.suffix == ".py" and path.is_file() else ""
    return _SOURCES[path]


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None  # an explicit other --dist mode is the user's choice
    from xdist.scheduler import LoadScopeScheduling

    class SmokeGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return smoke_group(nodeid) or nodeid

    return SmokeGroupScheduling(config, log)


VERDICT_PREFIXES = ("method better", "baseline better", "unresolved", "non-inferior", "inferior beyond", "equivalent",
                    "not equivalent", "not tested: ")


def assert_claims_meet_standard(metrics: dict, track: str, root: Path | None = None) -> list[dict]:
    """Every claim record of a track's metrics file is complete under the evidence standard, and
    recomputing it from its committed per-unit table gives the same interval and verdict."""
    from paperworks.core.claims import recompute, record_problems

    claims = metrics["claims"]
    assert claims, f"{track}: no claims"
    for c in claims:
        assert record_problems(c) == [], (c["id"], record_problems(c))
        assert c["verdict"].startswith(VERDICT_PREFIXES), c["verdict"]
        if c["diff"] is not None:  # an unbounded side (fewer than 2 clusters) is written as null
            lo = -float("inf") if c["ci_low"] is None else c["ci_low"]
            hi = float("inf") if c["ci_high"] is None else c["ci_high"]
            assert lo <= c["diff"] <= hi, c
            assert c["table"] == f"metrics/units/{track}/{Path(c['table']).name}"
    assert sorted(c["id"] for c in claims) == sorted(metrics["claim_summary"])
    assert sum(c["role"] == "headline" for c in claims) <= 3
    if root is not None:
        assert recompute(metrics, root) == claims
    return claims
