"""The flow under overlap and failure: one params writer at a time, DVC's locks waited for,
non-transient failures not retried and reported once, quiet logs, a report that refuses a
mixed output set, experiments of one track, and a repository a run cannot choose.

Every test works on a throwaway DVC project in tmp_path with trivial stages; flows run
in-process against the session's Prefect API (``prefect_api``), except where the point is
what a user's own ``python -m flows.pipeline`` prints.
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, tool_env

DVC = str(Path(sys.executable).with_name("dvc"))
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def make_project(root: Path, dvc_yaml: str, params: str, files: dict[str, str] | None = None) -> Path:
    """git + dvc project with these stages, params and helper files, committed."""
    (root / "dvc.yaml").write_text(dvc_yaml)
    (root / "params.yaml").write_text(params)
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    env = dict(tool_env(), **GIT_ENV)
    for cmd in (["git", "init", "-q"], [DVC, "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "toy"]):
        subprocess.run(cmd, cwd=root, check=True, env=env, capture_output=True)
    return root


def dvc(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([DVC, *args], cwd=root, env=tool_env(), capture_output=True, text=True, check=check)


def wait_until(cond, what: str, limit: float = 180.0) -> None:
    """Poll ``cond``; the limit only bounds a hang, it is not what the test measures."""
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.1)


# A stage that records what it read, then blocks until the test creates `go`: a stage "in flight".
GATED_STAGE = """\
import pathlib, sys, time, yaml
depth = yaml.safe_load(open("params.yaml"))["control"]["tree"]["max_depth"]
pathlib.Path("started").write_text(str(depth))
while not pathlib.Path("go").exists():
    time.sleep(0.05)
pathlib.Path("depth.txt").write_text(str(depth))
"""
GATED_DVC_YAML = """\
stages:
  control_depth:
    cmd: python gated.py
    deps: [gated.py]
    params: [control.tree.max_depth]
    outs: [depth.txt]
"""


def _lock_params(root: Path, stage: str) -> dict:
    return yaml.safe_load((root / "dvc.lock").read_text())["stages"][stage]["params"]["params.yaml"]


# --------------------------------------------------------------------------- issue 23 item 1

def test_two_flows_with_different_params_take_turns(tmp_path: Path, prefect_api: str) -> None:
    """Flow A (-S max_depth=13) is inside its stage when flow B (-S max_depth=14) starts. B must
    not rewrite params.yaml until A has written dvc.lock; at the end dvc.lock's recorded depth is
    the one the output was built with, and DVC sees nothing to do."""
    from flows.pipeline import build_flow
    from flows.project_lock import holders

    root = make_project(tmp_path, GATED_DVC_YAML, (REPO / "params.yaml").read_text(), {"gated.py": GATED_STAGE})
    flow = build_flow(retries=0, repo_root=root)
    outcome: dict[str, object] = {}

    def run(name: str, depth: int) -> None:
        try:
            outcome[name] = flow(overrides=[f"control.tree.max_depth={depth}"])
        except BaseException as e:  # noqa: BLE001 — reported by the asserts below
            outcome[name] = e

    a = threading.Thread(target=run, args=("a", 13), daemon=True)
    b = threading.Thread(target=run, args=("b", 14), daemon=True)
    depth_in_params = lambda: yaml.safe_load((root / "params.yaml").read_text())["control"]["tree"]["max_depth"]  # noqa: E731
    try:
        a.start()
        wait_until(lambda: (root / "started").exists(), "flow A's stage started")
        b.start()
        wait_until(lambda: any(h["state"] == "waiting" for h in holders(root)) or depth_in_params() == 14,
                   "flow B waits for the project lock (or rewrites params.yaml)")
        assert depth_in_params() == 13, "flow B rewrote params.yaml while flow A's stage was running"
    finally:
        (root / "go").write_text("")  # never leave a stage blocked
        a.join(300)
        b.join(300)
    assert isinstance(outcome["a"], list) and isinstance(outcome["b"], list), outcome
    built_with = int((root / "depth.txt").read_text())
    assert built_with == 14
    assert _lock_params(root, "control_depth") == {"control.tree.max_depth": built_with}
    assert "up to date" in dvc(root, "status").stdout


def test_a_run_that_cannot_get_the_lock_is_refused_clearly(tmp_path: Path, prefect_api: str) -> None:
    """With a lock timeout, a run that finds the project held fails with a message naming the
    holder, and params.yaml is not rewritten."""
    from flows.pipeline import build_flow
    from flows.project_lock import project_lock

    root = make_project(tmp_path, GATED_DVC_YAML, (REPO / "params.yaml").read_text(), {"gated.py": GATED_STAGE})
    before = (root / "params.yaml").read_text()
    flow = build_flow(retries=0, repo_root=root, lock_timeout=0.5)
    with project_lock(root, exclusive=False, purpose="a test holding the project"):
        with pytest.raises(Exception, match=r"(?s)the project is locked.*a test holding the project"):
            flow(overrides=["control.tree.max_depth=5"])
    assert (root / "params.yaml").read_text() == before


def test_project_lock_is_shared_between_readers_exclusive_for_writers(tmp_path: Path) -> None:
    from flows.project_lock import ProjectLockTimeout, project_lock

    with project_lock(tmp_path, exclusive=False, purpose="reader 1"):
        with project_lock(tmp_path, exclusive=False, purpose="reader 2", timeout=0):
            pass  # two plain runs overlap
        with pytest.raises(ProjectLockTimeout, match="reader 1"):
            with project_lock(tmp_path, exclusive=True, purpose="writer", timeout=0.2):
                pass
    with project_lock(tmp_path, exclusive=True, purpose="writer", timeout=0):
        with pytest.raises(ProjectLockTimeout, match="holding exclusive by PID"):
            with project_lock(tmp_path, exclusive=False, purpose="reader", timeout=0.2):
                pass
    # the command-line wrapper (what `make run` can use) refuses the same way
    with project_lock(tmp_path, exclusive=True, purpose="a flow"):
        proc = subprocess.run([sys.executable, "-m", "flows.project_lock", "--repo", str(tmp_path), "--timeout", "0.2",
                               "--", "true"], cwd=REPO, env=tool_env(), capture_output=True, text=True)
    assert proc.returncode == 3 and "the project is locked" in proc.stderr and "a flow" in proc.stderr
    ok = subprocess.run([sys.executable, "-m", "flows.project_lock", "--repo", str(tmp_path), "--", "true"],
                        cwd=REPO, env=tool_env(), capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


# --------------------------------------------------------------------------- issue 23 item 2

def test_dvc_calls_wait_for_a_busy_path_and_keep_dvcs_message(tmp_path: Path) -> None:
    """While another `dvc repro` holds a stage's paths, `dvc status` fails at once with "is busy"
    (rc 1; --wait-for-lock does not wait for these locks). The flow's DVC calls say so with DVC's
    own words when they give up, and otherwise wait and succeed."""
    from flows.dvc_cli import DvcError
    from flows.pipeline import stale_stages

    root = make_project(tmp_path, GATED_DVC_YAML, (REPO / "params.yaml").read_text(), {"gated.py": GATED_STAGE})
    other = subprocess.Popen([DVC, "repro", "--single-item", "control_depth"], cwd=root, env=tool_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: (root / "started").exists(), "the other dvc repro is inside its stage")
        with pytest.raises(DvcError, match=r"(?s)is busy, it is being blocked by.*repro --single-item control_depth"):
            stale_stages(root, busy_timeout=0)

        seen = threading.Event()

        class Seen(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if "DVC is busy" in record.getMessage():
                    seen.set()

        handler = Seen()
        logging.getLogger("paperworks.flows").addHandler(handler)
        result: dict[str, object] = {}
        def check() -> None:
            try:
                result["stale"] = stale_stages(root)
            except Exception as e:  # noqa: BLE001 — reported by the asserts
                result["error"] = e

        waiter = threading.Thread(target=check, daemon=True)
        try:
            waiter.start()
            wait_until(lambda: seen.is_set() or not waiter.is_alive(), "the status call waits or ends")
            assert seen.is_set(), f"the status call did not wait for the busy path: {result}"
            (root / "go").write_text("")
            waiter.join(180)
        finally:
            logging.getLogger("paperworks.flows").removeHandler(handler)
        assert result.get("stale") == set(), result  # the other run finished; nothing left to do
    finally:
        (root / "go").write_text("")
        other.wait(120)


def test_stale_stages_after_a_killed_dvc_repro(tmp_path: Path) -> None:
    """A `dvc repro` killed inside its stage leaves its entry in DVC's rwlock; the next DVC call
    removes it with a warning on the merged output stream ("… had been killed. Auto removed it").
    The flow's status call must still read the JSON (it failed with "Expecting value" on
    2026-12-03, so a flow could not start after an interrupted one)."""
    import os
    import signal

    from flows.pipeline import stale_stages

    root = make_project(tmp_path, GATED_DVC_YAML, (REPO / "params.yaml").read_text(), {"gated.py": GATED_STAGE})
    other = subprocess.Popen([DVC, "repro", "--single-item", "control_depth"], cwd=root, env=tool_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_until(lambda: (root / "started").exists(), "the other dvc repro is inside its stage")
    os.killpg(other.pid, signal.SIGKILL)  # dvc and its stage: no cleanup runs
    other.wait(60)
    assert str(other.pid) in (root / ".dvc" / "tmp" / "rwlock").read_text()  # the stale entry is there
    assert stale_stages(root, busy_timeout=0) == {"control_depth"}


# --------------------------------------------------------------------------- issue 22 items 5 and 6

FAILING_STAGE = """\
import pathlib, yaml
from paperworks.core.params import ParamsError
from paperworks.core.stage import stage_main


@stage_main
def main() -> None:
    with open("calls.txt", "a") as f:
        f.write("x")
    n = yaml.safe_load(open("params.yaml"))["toy"]["n"]
    if n < 0:
        raise ParamsError(f"toy.n = {n}: must be at least 0")
    pathlib.Path("a.txt").write_text(str(n))


main()
"""
FAILING_DVC_YAML = """\
stages:
  toy_gen:
    cmd: python toy_stage.py
    deps: [toy_stage.py]
    params: [toy.n]
    outs: [a.txt]
"""
QUIET_ENV_DROP = ("PREFECT_API_URL", "PREFECT_HOME", "PREFECT_SERVER_ANALYTICS_ENABLED", "DO_NOT_TRACK",
                  "DVC_NO_ANALYTICS", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS")


@pytest.mark.integration
def test_bad_value_fails_once_is_not_retried_and_the_run_is_quiet(tmp_path: Path) -> None:
    """`python -m flows.pipeline --retries 3` as a user runs it (no telemetry variables, a fresh
    Prefect home, its own temporary API) on a stage whose wrapper exits 2 on a bad value: the
    stage runs once, the run exits 1 with the stage's message, no traceback, no "database is
    locked", and the project's own `.prefect/` is the Prefect home."""
    root = make_project(tmp_path, FAILING_DVC_YAML, "toy:\n  n: -1\n", {"toy_stage.py": FAILING_STAGE})
    shutil.copytree(REPO / "flows", root / "flows", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in tool_env().items() if k not in QUIET_ENV_DROP}
    env["PYTHONPATH"] = str(REPO)  # paperworks from this checkout; `flows` from the project's own copy (cwd)
    proc = subprocess.run([sys.executable, "-m", "flows.pipeline", "--retries", "3"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert (root / "calls.txt").read_text() == "x", "a failure that is not transient was retried"
    said = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(said) == 1 and "toy.n = -1: must be at least 0" in said[0], out[-4000:]  # the cause, said once at the end
    assert "Traceback" not in out, out[-4000:]
    assert "database is locked" not in out
    assert (root / ".prefect").is_dir()
    assert not (root / "a.txt").exists()


def test_task_logs_carry_no_dvc_git_hints(tmp_path: Path, prefect_api: str) -> None:
    """The run's logs as the Prefect API stores them (what the UI shows) keep DVC's progress but
    not its "git add dvc.lock" / "dvc push" / autostage advice."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    from flows.pipeline import build_flow

    root = make_project(tmp_path, FAILING_DVC_YAML, "toy:\n  n: 3\n", {"toy_stage.py": FAILING_STAGE})
    state = build_flow(retries=0, repo_root=root)(return_state=True)
    assert [r["status"] for r in state.result()] == ["ran"]
    run_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id]))
    lines: list[str] = []

    def logged() -> bool:
        with get_client(sync_client=True) as client:
            lines[:] = [log.message for log in client.read_logs(log_filter=run_filter, limit=200)]
        return any("Finished in state Completed" in m for m in lines) and any("Running stage 'toy_gen'" in m for m in lines)

    wait_until(logged, "the run's logs reached the API")
    assert [m for m in lines if "git add" in m or "dvc push" in m or "autostage" in m] == []


def test_prefect_environment_is_set_by_the_code_not_only_make() -> None:
    """A bare `python -m flows.…` (no variables exported) gets the project's Prefect home, a
    180 s startup timeout and analytics off, as Prefect's own settings report them."""
    env = {k: v for k, v in tool_env().items() if k not in QUIET_ENV_DROP}
    env["PYTHONPATH"] = str(REPO)
    code = ("import json, os, flows.pipeline; from prefect.settings import get_current_settings as g; s = g(); "
            "print(json.dumps({'home': str(s.home), 'analytics': s.server.analytics_enabled, "
            "'timeout': s.server.ephemeral.startup_timeout_seconds, 'dnt': os.environ.get('DO_NOT_TRACK'), "
            "'dvc': os.environ.get('DVC_NO_ANALYTICS')}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"home": str(REPO / ".prefect"), "analytics": False, "timeout": 180, "dnt": "1", "dvc": "1"}
    assert subprocess.run(["git", "check-ignore", "-q", ".prefect/x"], cwd=REPO).returncode == 0


# --------------------------------------------------------------------------- issue 23 item 9

def test_repo_root_is_not_a_run_parameter(tmp_path: Path) -> None:
    """Whoever starts a run picks targets, profile, overrides, experiment: not the repository."""
    from prefect.exceptions import SignatureMismatchError

    from flows.pipeline import REPO_ROOT, build_flow, pipeline

    assert REPO_ROOT == REPO
    for flow in (pipeline, build_flow(repo_root=tmp_path)):
        assert set(flow.parameters.properties) == {"targets", "profile", "overrides", "experiment"}
        with pytest.raises(SignatureMismatchError, match="repo_root"):
            flow.validate_parameters({"repo_root": str(tmp_path)})


# --------------------------------------------------------------------------- issue 23 item 7

REPORT_DVC_YAML = """\
stages:
  toy_evaluate:
    cmd: python evaluate.py
    outs:
      - plots/toy.csv
      - scores.txt
    metrics:
      - metrics/toy.json:
          cache: false
  toy_data:
    cmd: python -c "open('data.txt', 'w').write('d')"
    outs: [data.txt]
  other_evaluate:
    cmd: python -c "open('metrics/other.json', 'w').write('{}')"
    deps: [never_built_here.txt]
    metrics:
      - metrics/other.json:
          cache: false
"""
EVALUATE = """\
import json, pathlib
json.dump({"claims": []}, open("metrics/toy.json", "w"))
pathlib.Path("plots/toy.csv").write_text("x,y\\n1,2\\n")
pathlib.Path("scores.txt").write_text("1 2")
"""


def test_report_refuses_a_mixed_output_set(tmp_path: Path) -> None:
    """An evaluate stage killed mid-write (a PNG/CSV gone, the JSON changed) is caught before the
    report is built; intact outputs pass, and a changed non-report output does not block it."""
    root = make_project(tmp_path, REPORT_DVC_YAML, "toy:\n  n: 1\n", {"metrics/.keep": "", "plots/.keep": "", "evaluate.py": EVALUATE})
    (root / "never_built_here.txt").write_text("x")
    dvc(root, "repro")
    # a fresh clone that never ran other_evaluate: its input is absent and its (committed) output
    # differs from the lock, e.g. a restated result; the guard cannot call that an interrupted run
    (root / "never_built_here.txt").unlink()
    (root / "metrics/other.json").write_text('{"restated": true}')
    guard = [sys.executable, "-m", "flows.report_guard", "--repo", str(root)]
    ok = subprocess.run(guard, cwd=REPO, env=tool_env(), capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "1 stage(s) not checked" in ok.stdout
    (root / "data.txt").write_text("tampered")  # not read by the report
    (root / "scores.txt").unlink()  # an evaluate stage's output the report does not read (absent in a fresh clone)
    assert subprocess.run(guard, cwd=REPO, env=tool_env(), capture_output=True, text=True).returncode == 0
    (root / "plots/toy.csv").unlink()
    (root / "metrics/toy.json").write_text('{"claims": [], "half": true}')
    bad = subprocess.run(guard, cwd=REPO, env=tool_env(), capture_output=True, text=True)
    assert bad.returncode == 1
    assert "refusing to build the report" in bad.stderr
    assert "toy_evaluate" in bad.stderr and "plots/toy.csv deleted" in bad.stderr and "metrics/toy.json modified" in bad.stderr
    dvc(root, "repro", "toy_evaluate")
    assert subprocess.run(guard, cwd=REPO, env=tool_env(), capture_output=True, text=True).returncode == 0


def test_make_report_runs_the_guard_first() -> None:
    dry = subprocess.run(["make", "-n", "report", f"VENV={Path(sys.executable).parents[1]}"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    guard, report = dry.find("-m flows.report_guard"), dry.find("-m paperworks.core.report")
    assert 0 <= guard < report, dry


# --------------------------------------------------------------------------- issue 22 item 1

TWO_TRACKS_DVC_YAML = """\
stages:
  x_make:
    cmd: python -c "import yaml; open('x.txt', 'w').write(str(yaml.safe_load(open('params.yaml'))['x']['n']))"
    params: [x.n]
    outs: [x.txt]
  y_make:
    cmd: python -c "open('y.txt', 'w').write('y')"
    outs: [y.txt]
"""


def test_experiment_of_one_track_is_saved(tmp_path: Path, prefect_api: str) -> None:
    """A clone that has track y's dvc.lock entry but not its outputs runs track x with
    `--experiment`: the experiment is saved (a plain `dvc exp save` fails on y's missing output)."""
    from flows.pipeline import build_flow

    root = make_project(tmp_path, TWO_TRACKS_DVC_YAML, "x:\n  n: 1\n")
    dvc(root, "repro")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=dict(tool_env(), **GIT_ENV))
    subprocess.run(["git", "commit", "-qm", "baseline"], cwd=root, check=True, env=dict(tool_env(), **GIT_ENV))
    (root / "y.txt").unlink()
    shutil.rmtree(root / ".dvc" / "cache")  # as in a fresh clone without `dvc pull`
    (root / "params.yaml").write_text("x:\n  n: 2\n")
    results = build_flow(retries=0, repo_root=root)(targets=["x_*"], experiment="x-two")
    assert [(r["stage"], r["status"]) for r in results] == [("x_make", "ran")]
    shown = json.loads(dvc(root, "exp", "show", "--json").stdout)
    names = {exp.get("name") for rev in shown for exp in (rev.get("experiments") or []) for exp in exp.get("revs", [])}
    assert "x-two" in names, shown


def test_server_refuses_to_bind_beyond_loopback_without_auth(tmp_path: Path) -> None:
    """`flows.schedule` (and anything using its `start_server`) never serves an open API."""
    from flows.schedule import check_bind, start_server

    with pytest.raises(SystemExit, match="PREFECT_SERVER_API_AUTH_STRING"):
        start_server(4299, tmp_path / "home", host="0.0.0.0")
    assert not (tmp_path / "home").exists()  # refused before anything started
    check_bind("127.0.0.1", {})
    check_bind("localhost", {})
    check_bind("0.0.0.0", {"PREFECT_SERVER_API_AUTH_STRING": "paperworks:secret"})
    with pytest.raises(SystemExit):
        check_bind("192.168.1.5", {})


@pytest.mark.integration
def test_served_api_requires_basic_auth(tmp_path: Path, monkeypatch) -> None:
    """The setting docs/orchestration.md gives (`PREFECT_SERVER_API_AUTH_STRING`) really closes
    the API: no or wrong credentials get 401, the right ones 200."""
    import base64
    import socket
    import urllib.error
    import urllib.request

    from flows.schedule import start_server, stop_server, wait_healthy

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("PREFECT_SERVER_API_AUTH_STRING", "paperworks:s3cret")
    server = start_server(port, tmp_path / "home")
    url = f"http://127.0.0.1:{port}/api/flow_runs/filter"

    def status(auth: str | None) -> int:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=b"{}", headers=headers), timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    try:
        wait_healthy(f"http://127.0.0.1:{port}/api", timeout=240)
        assert [status(None), status("paperworks:wrong"), status("paperworks:s3cret")] == [401, 401, 200]
    finally:
        stop_server(server)
